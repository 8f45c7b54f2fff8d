#!/usr/bin/env bash
# A waypoint's cost, Outrider beside Envoy 1.40 in one run: requests per waypoint
# CPU-second, and the waypoint's memory, idle with its configuration and after load.
#
# The configuration is istiod's own rendering of a waypoint (tests/data/istio/waypoint-istiod.config_dump.json:
# what a real istiod in Kubernetes mode sent an Outrider waypoint for a Service bound to it,
# with an HTTPRoute and an AuthorizationPolicy; tests/mesh/waypoint.rs drives that waypoint),
# made static for loopback by bench/waypoint/bootstraps.py. Envoy 1.40 has no factory for
# Istio's two telemetry filters in it (peer metadata, TCP metadata exchange), so the proxies
# are compared on the rendering without them ("envoy", "outrider"); "outrider-istio" is
# Outrider with istiod's rendering whole.
#
# A request: wrk → the HBONE client (ztunnel's part: each connection tunnelled as an HTTP/2
# CONNECT to the Service's address over mutual TLS) → the waypoint (connect_terminate,
# main_internal, RBAC, the route, connect_originate) → HBONE → the backend's terminator →
# nginx. The client and the terminator are Outrider, the same for every waypoint; they,
# nginx and wrk run on CPU 0, the waypoint's one worker on CPU 1. Certificates are ECDSA
# P-256 with SPIFFE names, made here with openssl.
#
#   bench/waypoint-bench.sh [seconds-per-run]
#
# WAYPOINT_BENCH_ROUNDS (default 3) rounds, in each the three waypoints in a rotating order at
# each of WAYPOINT_BENCH_CONNECTIONS (default "32 256") connections (HTTP/1.1 keep-alive, one
# tunnel per connection). Prints each run, then the medians with Outrider's ratios.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
secs="${1:-10}"

need() { command -v "$1" >/dev/null 2>&1; }
if ! need wrk || ! need nginx || ! need openssl; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light wrk openssl >/dev/null
fi
bash "$here/install-envoy.sh" >/dev/null
envoy="$here/.envoy/bin/envoy"
[[ -n "${OUTRIDER_SKIP_BUILD:-}" ]] || (cd "$root" && cargo build --profile dist --quiet)
outrider="${OUTRIDER_BIN:-${CARGO_TARGET_DIR:-$root/target}/dist/outrider}"

work="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# The mesh's root, and one workload certificate per service account.
certs="$work/certs"
mkdir -p "$certs"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$certs/$1.key" 2>/dev/null; }
key ca
openssl req -x509 -new -key "$certs/ca.key" -subj "/CN=bench mesh root" -days 3650 -out "$certs/ca.pem" 2>/dev/null
for account in waypoint sleep echo; do
    key "$account"
    openssl req -new -key "$certs/$account.key" -subj "/O=cluster.local" -out "$certs/$account.csr" 2>/dev/null
    printf '%s\n' "subjectAltName=URI:spiffe://cluster.local/ns/default/sa/$account" \
        "keyUsage=digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth,clientAuth" >"$certs/$account.ext"
    openssl x509 -req -in "$certs/$account.csr" -CA "$certs/ca.pem" -CAkey "$certs/ca.key" -CAcreateserial \
        -days 365 -extfile "$certs/$account.ext" -out "$certs/$account.pem" 2>/dev/null
done
python3 "$here/waypoint/bootstraps.py" "$work" "$certs" >/dev/null

wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
ulimit -n "$(ulimit -Hn)"
taskset -c 0 nginx -c "$here/nginx.conf" -p /tmp & pids+=($!)
RUST_LOG=error taskset -c 0 "$outrider" run --config "$work/backend.json" --concurrency 1 >/dev/null 2>&1 & pids+=($!)
RUST_LOG=error taskset -c 0 "$outrider" run --config "$work/client.json" --concurrency 1 >/dev/null 2>&1 & pids+=($!)
wait_port 18080
wait_port 15200
wait_port 15100

# start NAME: the waypoint on CPU 1 with one worker.
start() {
    case "$1" in
        envoy) taskset -c 1 "$envoy" -c "$work/waypoint-envoy.json" --concurrency 1 --log-level error --disable-hot-restart --use-dynamic-base-id >/dev/null 2>&1 & ;;
        outrider) RUST_LOG=error taskset -c 1 "$outrider" run --config "$work/waypoint-envoy.json" --concurrency 1 >/dev/null 2>&1 & ;;
        outrider-istio) RUST_LOG=error taskset -c 1 "$outrider" run --config "$work/waypoint.json" --concurrency 1 >/dev/null 2>&1 & ;;
    esac
    proxy=$!
    wait_port 15000
    sleep 1
}
# SIGKILL: a waypoint has the client's pooled HBONE connections open, which an Outrider
# drain would wait out (Envoy exits on SIGTERM at once); neither is measured stopping.
stop() { kill -KILL "$proxy"; wait "$proxy" 2>/dev/null || true; sleep 1; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$proxy/status"; }
ticks() { sed 's/^.*) //' "/proc/$proxy/stat" | awk '{print $12 + $13}'; }
hz=$(getconf CLK_TCK)
url=http://127.0.0.1:18000/

# A request through the waypoint must be served, and its policy must refuse /denied.
start envoy
check=$(curl -s -o /dev/null -w '%{http_code}' "$url")/$(curl -s -o /dev/null -w '%{http_code}' "${url}denied")
stop
[[ "$check" == 200/403 ]] || { echo "the waypoint does not serve (/, /denied: $check)" >&2; exit 1; }

# CONNECTIONS IDLE: successful responses per wall-second and per waypoint CPU-second,
# failures, and the idle (IDLE, taken before any traffic) and loaded RSS (KiB).
run() {
    local before after out ok failed idle="$2"
    before=$(ticks)
    out=$(taskset -c 0 wrk -t1 -c"$1" -d"${secs}s" "$url")
    after=$(ticks)
    failed=$(echo "$out" | awk '/Non-2xx or 3xx responses/ {print $5}')
    ok=$(echo "$out" | awk -v f="${failed:-0}" '/requests in/ {print $1 - f}')
    awk -v n="${ok:-0}" -v f="${failed:-0}" -v s="$secs" -v t=$((after - before)) -v hz="$hz" -v idle="$idle" -v loaded="$(rss)" \
        'BEGIN { printf "%d %d %d %d %d\n", n / s, (t == 0 ? 0 : n * hz / t), f, idle, loaded }'
}

proxies=(envoy outrider outrider-istio)
rounds="${WAYPOINT_BENCH_ROUNDS:-3}"
runs="$work/runs"
echo "round connections waypoint rps rpcs failed rss_idle_kib rss_loaded_kib"
for round in $(seq "$rounds"); do
    for conns in ${WAYPOINT_BENCH_CONNECTIONS:-32 256}; do
        for i in 0 1 2; do
            p="${proxies[$(((i + round) % 3))]}"
            start "$p"
            idle=$(rss)
            taskset -c 0 wrk -t1 -c"$conns" -d2s "$url" >/dev/null 2>&1 || true # warm-up
            line="$round $conns $p $(run "$conns" "$idle")"
            echo "$line" | tee -a "$runs"
            stop
        done
    done
done
echo
echo "Medians over $rounds rounds (rps: requests per wall-second; rpcs: per waypoint CPU-second; RSS in MiB):"
echo
python3 - "$runs" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    _, conns, proxy, *values = line.split()
    runs[(int(conns), proxy)].append([float(v) for v in values])
med = lambda key, i: statistics.median(v[i] for v in runs[key])
ratio = lambda a, b: f"{a / b:.2f}" if b else "n/a"
print("| connections | waypoint | rps | rpcs | rpcs vs Envoy | failed | idle RSS | loaded RSS | loaded RSS vs Envoy |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for conns in sorted({c for c, _ in runs}):
    e = (conns, "envoy")
    for name in ("envoy", "outrider", "outrider-istio"):
        k = (conns, name)
        if not runs[k]:
            continue
        print(f"| {conns} | {name} | {med(k, 0):.0f} | {med(k, 1):.0f} | {ratio(med(k, 1), med(e, 1))} | {med(k, 2):.0f} "
              f"| {med(k, 3) / 1024:.1f} | {med(k, 4) / 1024:.1f} | {ratio(med(k, 4), med(e, 4))} |")
PY
