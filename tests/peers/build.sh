#!/usr/bin/env bash
# Builds the Go peers the interoperability tests run against, from the Go module proxy:
#   istio's pilot-discovery (istiod), pilot-agent and its DNS proxy alone
#   (istio/dns_reference.go), go-control-plane's integration test
#   server, grpc-go's interop server and client, and grpc-orca-backend (grpc-orca/main.go:
#   the scenario lab's backend written with grpc-go and its ORCA package), and a Kubernetes
#   control plane from k8s.io/kubernetes and etcd's server module (kubernetes/: etcd,
#   kube-apiserver, kube-controller-manager, kubectl).
# `build.sh NAME...` builds only those peers (istio, go-control-plane, grpc-interop, grpc-orca,
# kubernetes).
# Idempotent: a peer is rebuilt only when its go.mod, go.sum or patch changed. The binaries
# go to $OUTRIDER_PEERS_DIR/bin (default ~/.cache/outrider/peers/bin), where the tests look.
# Without Go the script says so and exits 0: the tests that need a peer report SKIPPED.
set -euo pipefail
shopt -s nullglob
here="$(cd "$(dirname "$0")" && pwd)"
peers="${OUTRIDER_PEERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/outrider/peers}"
mkdir -p "$peers/bin" "$peers/build"
only="$*"

if ! command -v go >/dev/null; then
  echo "peers: go not found; the tests that need Go peers will be skipped"
  exit 0
fi

# stamp FILES...: the hash of what a peer is built from.
stamp() {
  cat "$@" | sha256sum | cut -c1-16
}

# build NAME DIR BINARY=PACKAGE...: builds each PACKAGE from DIR's go.mod as $peers/bin/BINARY.
build() {
  local name="$1" dir="$2"
  shift 2
  local work="$peers/build/$name" want
  if [[ -n "$only" && " $only " != *" $name "* ]]; then
    return
  fi
  want="$(stamp "$here/$dir"/go.mod "$here/$dir"/go.sum "$here/$dir"/*.patch "$here/$dir"/*.go)"
  if [[ -f "$work/.stamp" && "$(cat "$work/.stamp")" == "$want" ]]; then
    echo "peers: $name up to date"
    return
  fi
  echo "peers: building $name"
  rm -rf "$work"
  mkdir -p "$work"
  cp "$here/$dir/go.mod" "$here/$dir/go.sum" "$here/$dir"/*.go "$work/"
  if [[ "$name" == istio ]]; then
    patch_istio "$work"
  fi
  local start=$SECONDS
  local target
  for target in "$@"; do
    (cd "$work" && GOFLAGS=-mod=mod go build -o "$peers/bin/${target%%=*}" "${target#*=}")
  done
  echo "peers: $name built in $((SECONDS - start)) s"
  echo "$want" >"$work/.stamp"
}

# The module proxy serves istio only as pseudo-versions of master, whose service-entry
# controller dereferences the multicluster controller that exists only with a Kubernetes
# registry. istiod in file mode (--registries= --configDir=DIR) needs it nil-safe: the
# module's source is copied, patched (istio/*.patch) and used through a replace directive.
patch_istio() {
  local work="$1" version src
  version="$(cd "$work" && go list -m -f '{{.Version}}' istio.io/istio)"
  src="$(cd "$work" && go mod download -json "istio.io/istio@$version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
  rm -rf "$work/istio-src"
  cp -r "$src" "$work/istio-src"
  chmod -R u+w "$work/istio-src"
  for p in "$here"/istio/*.patch; do
    (cd "$work/istio-src" && patch -s -p1 <"$p")
  done
  (cd "$work" && go mod edit -replace "istio.io/istio=./istio-src")
}

build istio istio \
  pilot-discovery=istio.io/istio/pilot/cmd/pilot-discovery \
  pilot-agent=istio.io/istio/pilot/cmd/pilot-agent \
  istio-dns-reference=.
build go-control-plane go-control-plane \
  go-control-plane-test-server=github.com/envoyproxy/go-control-plane/pkg/test/main
build grpc-interop grpc-interop \
  grpc-interop-server=google.golang.org/grpc/interop/server \
  grpc-interop-client=google.golang.org/grpc/interop/client
build grpc-orca grpc-orca \
  grpc-orca-backend=.
build kubernetes kubernetes \
  etcd=. \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
  kubectl=k8s.io/kubernetes/cmd/kubectl
ls -l "$peers/bin"

# OUTRIDER_PEERS_CLEAN=1 (CI): Go's build and module caches hold gigabytes once istio is
# built, and a clean machine never reads them again; the binaries and the patched istio
# source (its bootstrap template) stay.
if [[ "${OUTRIDER_PEERS_CLEAN:-}" == 1 ]]; then
  go clean -cache -modcache
  echo "peers: Go caches removed"
fi
