#!/usr/bin/env bash
# Builds ztunnel, Istio's ambient node proxy (a Rust project), from its source at the commit
# below, for the HBONE tests (tests/mesh/ztunnel_hbone.rs). Its source comes from
# $OUTRIDER_ZTUNNEL_SRC (a checkout or a git directory of github.com/istio/ztunnel that has
# the commit), else from a clone of the public repository. Built with cargo and the features
# the tests use: `tls-ring` (no BoringSSL) and `testing` (FAKE_CA: certificates issued from
# the test root in its source). Its protos are compiled with the protoc that Outrider's own
# build vendors.
# The binary and that test root go to $OUTRIDER_PEERS_DIR/ztunnel (default
# ~/.cache/outrider/peers/ztunnel); rebuilt only when the commit or this script changes
# (with OUTRIDER_PEERS_CLEAN set, the build directory is removed afterwards).
# Exits 1 when the source cannot be had: the tests that need ztunnel then say SKIPPED.
set -euo pipefail
commit=62d826530e5ce85764e309170205b293efcbc80b
here="$(cd "$(dirname "$0")" && pwd)"
peers="${OUTRIDER_PEERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/outrider/peers}"
out="$peers/ztunnel"
work="$peers/build/ztunnel"
want="$commit-$(sha256sum "$0" | cut -c1-16)"
if [[ -x "$out/ztunnel" && -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$want" ]]; then
  echo "peers: ztunnel up to date"
  exit 0
fi

git_dir="$work/git"
mkdir -p "$work"
if [[ -n "${OUTRIDER_ZTUNNEL_SRC:-}" ]]; then
  git_dir="$OUTRIDER_ZTUNNEL_SRC"
elif ! git --git-dir="$git_dir" cat-file -e "$commit^{commit}" 2>/dev/null; then
  rm -rf "$git_dir"
  if ! timeout 300 git clone --quiet --bare --filter=blob:none https://github.com/istio/ztunnel "$git_dir"; then
    echo "peers: ztunnel source not reachable (set OUTRIDER_ZTUNNEL_SRC to a checkout of github.com/istio/ztunnel)"
    exit 1
  fi
fi
if [[ -d "$git_dir/.git" ]]; then
  git_dir="$git_dir/.git"
fi
if ! git --git-dir="$git_dir" cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "peers: $git_dir does not have ztunnel commit $commit"
  exit 1
fi

echo "peers: building ztunnel $commit"
start=$SECONDS
rm -rf "$work/src"
mkdir -p "$work/src"
# vendor/ holds prebuilt BoringSSL archives the ring build does not use.
export GIT_INDEX_FILE="$work/index"
git --git-dir="$git_dir" read-tree "$commit"
git --git-dir="$git_dir" ls-files | grep -v '^vendor/' |
  git --git-dir="$git_dir" --work-tree="$work/src" checkout-index --stdin
unset GIT_INDEX_FILE
# The BoringSSL provider is a git dependency; without network access to its repository cargo
# cannot even resolve it, though the ring build never compiles it.
sed -i '/^boring-rustls-provider = /d; s/^tls-boring = .*/tls-boring = []/' "$work/src/Cargo.toml"

protoc="${PROTOC:-}"
if [[ -z "$protoc" ]]; then
  arch="$(uname -m)"
  case "$arch" in
    aarch64) arch=aarch_64 ;;
  esac
  for candidate in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/protoc-bin-vendored-linux-"$arch"-*/bin/protoc; do
    if [[ -x "$candidate" ]]; then
      protoc="$candidate"
    fi
  done
fi
if [[ -z "$protoc" ]] && command -v protoc >/dev/null; then
  protoc="$(command -v protoc)"
fi
if [[ -z "$protoc" ]]; then
  echo "peers: no protoc for ztunnel's protos (build Outrider first: its build fetches one)"
  exit 1
fi

(cd "$work/src" && PROTOC="$protoc" CARGO_TARGET_DIR="$work/target" \
  cargo build --quiet --bin ztunnel --no-default-features --features tls-ring,testing)
mkdir -p "$out"
cp "$work/target/debug/ztunnel" "$out/ztunnel"
cp "$work/src/src/tls/root-cert.pem" "$work/src/src/tls/ca-key.pem" "$out/"
echo "$want" >"$out/.stamp"
echo "peers: ztunnel built in $((SECONDS - start)) s"
# CI keeps the binary, not the gigabytes of cargo's build directory.
if [[ -n "${OUTRIDER_PEERS_CLEAN:-}" ]]; then
  rm -rf "$work"
fi
