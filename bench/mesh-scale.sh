#!/usr/bin/env bash
# A 5 000-service mesh, Envoy 1.40 and Outrider side by side (see bench/mesh-scale.py for
# what is measured): installs wrk and Envoy if missing, builds Outrider (dist profile), runs.
#
#   bench/mesh-scale.sh [--services N] [--endpoints M] [--duration S] [--deliveries delta,static]
#
# OUTRIDER_SKIP_BUILD=1 uses the dist binary as it is (or OUTRIDER_BIN).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
command -v wrk >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk >/dev/null
bash "$here/install-envoy.sh" >/dev/null
[[ -n "${OUTRIDER_SKIP_BUILD:-}" ]] || (cd "$root" && cargo build --profile dist --quiet)
outrider="${OUTRIDER_BIN:-${CARGO_TARGET_DIR:-$root/target}/dist/outrider}"
exec python3 "$here/mesh-scale.py" --outrider "$outrider" --envoy "$here/.envoy/bin/envoy" "$@"
