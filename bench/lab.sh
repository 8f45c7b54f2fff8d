#!/usr/bin/env bash
# The scenario lab: the situations where load balancing decides tail latency and errors,
# each run through Envoy 1.40 and through Outrider with the same xDS resources, the same
# backends (`outrider lab-backend`) and the same load (oha), alternately, on this machine.
# Tables and charts go into bench/RESULTS.md and bench/charts/; raw data into bench/out/.
#
#   bench/lab.sh S1                one scenario (S0…S11, see bench/scenarios/; S8 and S9 run
#                                  their backends in cgroups with CPU limits: root)
#   bench/lab.sh all               every scenario, one run each
#   bench/lab.sh all --runs 2      two runs of each proxy × policy, the lower p99 reported
#                                  (for a machine shared with other work)
#   bench/lab.sh all --quick       every run and scripted time halved
#   bench/lab.sh S3 --runs 2 --keep   reuse the runs already under bench/out/, add the rest
#   bench/lab.sh S3 --http2        HTTP/2 from the load generator to the backends, reported
#                                  as S3-h2 beside the HTTP/1.1 section
#   bench/lab.sh S3 --grpc         gRPC unary calls (ghz, built with go install), as S3-grpc
#   bench/lab.sh S5 --grpc-go      the same calls to backends written with grpc-go, reporting
#                                  ORCA with grpc-go's orca package (tests/peers/grpc-orca), as S5-grpc-go
#   bench/lab.sh S5 --policies adaptive,cswrr   only some of the scenario's policies
#   bench/lab.sh S5 --two-hop      each backend behind its own sidecar over mTLS, sending no ORCA
#                                  (as S7–S11 are written), as S5-2hop
#
# Installs what it needs: Envoy (bench/install-envoy.sh), oha (cargo install), ghz for --grpc
# (go install), matplotlib and PyYAML in bench/.venv, nginx, wrk and h2load (apt, for S0, S6).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
[[ $# -ge 1 ]] || { sed -n '2,22p' "$0"; exit 2; }

need() { command -v "$1" >/dev/null 2>&1; }
if ! need wrk || ! need h2load || ! need nginx || ! need taskset; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light wrk nghttp2-client util-linux >/dev/null
fi
bash "$here/install-envoy.sh" >/dev/null
need oha || cargo install oha --locked --quiet
# ghz, the gRPC load generator, only for --grpc: built from its Go module.
ghz="$(go env GOPATH 2>/dev/null)/bin/ghz"
if [[ " $* " == *" --grpc "* || " $* " == *" --grpc-go "* ]] && [[ ! -x "$ghz" ]]; then
    go install github.com/bojand/ghz/cmd/ghz@v0.93.0
fi
# The grpc-go backends, only for --grpc-go: built from their module like the tests' peers.
if [[ " $* " == *" --grpc-go "* ]]; then
    bash "$root/tests/peers/build.sh" grpc-orca >/dev/null
    export LAB_GRPC_GO_BACKEND="${OUTRIDER_PEERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/outrider/peers}/bin/grpc-orca-backend"
fi
if [[ ! -x "$here/.venv/bin/python" ]] || ! "$here/.venv/bin/python" -c 'import matplotlib, yaml' 2>/dev/null; then
    python3 -m venv "$here/.venv"
    "$here/.venv/bin/pip" install --quiet matplotlib pyyaml
fi
(cd "$root" && cargo build --profile dist --quiet)
# A private copy, so a build started while the lab runs cannot swap the binary under it.
built="${CARGO_TARGET_DIR:-$root/target}/dist/outrider"
mkdir -p "$here/out/bin"
cp "$built" "$here/out/bin/outrider.partial" && mv -f "$here/out/bin/outrider.partial" "$here/out/bin/outrider"
if ! "$here/out/bin/outrider" lab-backend --help >/dev/null 2>&1; then
    echo "lab.sh: $built has no lab-backend command (another checkout built into the same target directory?)" >&2
    exit 1
fi
export LAB_OUTRIDER="$here/out/bin/outrider" OUTRIDER_BIN="$here/out/bin/outrider"
export LAB_ENVOY="$here/.envoy/bin/envoy"
export LAB_OHA="$(command -v oha)" LAB_GHZ="$ghz"
export OUTRIDER_SKIP_BUILD=1
cd "$root"
exec "$here/.venv/bin/python" "$here/lab/main.py" "$@"
