#!/usr/bin/env bash
# Builds Orion (github.com/kmesh-net/orion, an Envoy-bootstrap-compatible proxy in Rust) at
# the commit below, for the side-by-side benchmarks: bench/.orion/bin/orion. Its source is a
# clone of the public repository with its git submodules (the protos it compiles: Envoy's
# data-plane-api, cncf/xds, googleapis, protobuf, …), or the checkout $OUTRIDER_ORION_SRC
# names, submodules included. Built with Orion's own release profile (fat LTO, one codegen
# unit: about 25 minutes on 2 cores); its protos with the protoc Outrider's build vendors.
set -euo pipefail
commit=ae5fa94ec5b3fca8e189e0a1f097f0b239bcc0ed
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/.orion"
short="${commit:0:7}"
if [[ -x "$out/bin/orion" && "$(cat "$out/commit" 2>/dev/null)" == "$short" ]]; then
  exit 0
fi
src="${OUTRIDER_ORION_SRC:-$out/src}"
if [[ -z "${OUTRIDER_ORION_SRC:-}" && ! -d "$src/.git" ]]; then
  git clone --quiet https://github.com/kmesh-net/orion "$src"
  git -C "$src" checkout --quiet "$short"
  git -C "$src" submodule update --init --quiet
fi
protoc="${PROTOC:-}"
if [[ -z "$protoc" ]]; then
  arch="$(uname -m)"; [[ "$arch" == aarch64 ]] && arch=aarch_64
  for candidate in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/protoc-bin-vendored-linux-"$arch"-*/bin/protoc; do
    [[ -x "$candidate" ]] && protoc="$candidate"
  done
fi
[[ -n "$protoc" ]] || { echo "install-orion: no protoc (build Outrider first: its build fetches one)" >&2; exit 1; }
(cd "$src" && PROTOC="$protoc" CARGO_TARGET_DIR="$out/target" cargo build --release --quiet --bin orion)
mkdir -p "$out/bin"
cp "$out/target/release/orion" "$out/bin/orion"
echo "$short" >"$out/commit"
