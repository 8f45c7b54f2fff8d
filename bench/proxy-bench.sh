#!/usr/bin/env bash
# Overhead of the proxy itself, side by side with Envoy 1.40 in one run: the same bootstrap
# (bench/proxy-bootstrap.yaml), the same nginx backend, one worker each, the proxies run
# alternately. Measures maximum throughput (HTTP/1.1 keep-alive with wrk, HTTP/2 with
# h2load), p50/p99 latency at half of Envoy's HTTP/1.1 maximum (oha, open loop at a fixed
# rate with latency correction), and idle and loaded RSS. Prints a markdown table with
# Outrider/Envoy ratios. oha is installed with `cargo install oha --locked` if missing.
#
#   bench/proxy-bench.sh [seconds-per-run]
#   bench/proxy-bench.sh [seconds-per-run] --sweep
#
# --sweep: requests per wall-second and per proxy CPU-second of Envoy 1.40, Outrider and
# Orion (bench/install-orion.sh builds it; ORION_BIN names another binary), one worker
# each pinned to CPU 1 with nginx and the load generators on CPU 0, HTTP/1.1 (wrk) and
# HTTP/2 (h2load, one stream per connection) at each of PROXY_BENCH_CONNECTIONS (default
# 32 512 2048 16384) connections, PROXY_BENCH_ROUNDS rounds (default 3) in which the three
# take turns in a rotating order; prints each run and the medians with Outrider's ratios.
#
# PROXY_BENCH_NO_LATENCY=1 skips the oha latency runs (p50_ms, p99_ms print n/a), for a
# machine without oha where installing it is not wanted.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
secs="${1:-10}"

need() { command -v "$1" >/dev/null 2>&1; }
if ! need wrk || ! need h2load || ! need nginx; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light wrk nghttp2-client >/dev/null
fi
bash "$here/install-envoy.sh" >/dev/null
latency=1
[[ -z "${PROXY_BENCH_NO_LATENCY:-}" ]] || latency=
[[ -z "$latency" ]] || command -v oha >/dev/null || cargo install oha --locked --quiet
envoy="$here/.envoy/bin/envoy"
[[ -n "${OUTRIDER_SKIP_BUILD:-}" ]] || (cd "$root" && cargo build --profile dist --quiet)
outrider="${OUTRIDER_BIN:-${CARGO_TARGET_DIR:-$root/target}/dist/outrider}"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

nginx -c "$here/nginx.conf" -p /tmp & pids+=($!)

wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
wait_port 18080

# start PROXY [WORKERS]
start() {
    local workers="${2:-1}"
    case "$1" in
        envoy) "$envoy" -c "$here/proxy-bootstrap.yaml" --concurrency "$workers" --log-level error --disable-hot-restart --use-dynamic-base-id >/dev/null 2>&1 & ;;
        outrider) RUST_LOG=error "$outrider" run --config "$here/proxy-bootstrap.yaml" --concurrency "$workers" >/dev/null 2>&1 & ;;
    esac
    proxy=$!
    wait_port 19000
    sleep 1
}
stop() { kill "$proxy"; wait "$proxy" 2>/dev/null || true; sleep 1; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$proxy/status"; }
# The proxy's CPU time so far, in clock ticks: utime + stime (fields 14 and 15; the command
# name in field 2 is skipped by cutting at its closing parenthesis).
ticks() { sed 's/^.*) //' "/proc/$proxy/stat" | awk '{print $12 + $13}'; }
hz=$(getconf CLK_TCK)

# load KEY TOOL: one throughput run of TOOL (h1: wrk, h2: h2load) against the running
# proxy; sets r[KEY_rps] (requests per wall-second) and r[KEY_rpcs] (requests per proxy
# CPU-second).
load() {
    local key="$1" before after out requests wall
    before=$(ticks)
    case "$2" in
        h1)
            out=$(wrk -t1 -c50 -d"${secs}s" "$url")
            requests=$(echo "$out" | awk '/requests in/ {print $1}')
            r[${key}_rps]=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
            ;;
        h2)
            out=$(h2load -c50 -m10 -D"$secs" "$url" 2>/dev/null)
            requests=$(echo "$out" | awk '/^requests:/ {print $8}')
            r[${key}_rps]=$(echo "$out" | awk '/finished in/ {print $4}')
            ;;
    esac
    after=$(ticks)
    r[${key}_rpcs]=$(awk -v n="$requests" -v t=$((after - before)) -v hz="$hz" \
        'BEGIN { if (t == 0) print "n/a"; else printf "%d", n * hz / t }')
}

url=http://127.0.0.1:19000/

if [[ "${2:-}" == --sweep ]]; then
    orion="${ORION_BIN:-$here/.orion/bin/orion}"
    [[ -x "$orion" ]] || bash "$here/install-orion.sh"
    # A proxy holds a downstream and an upstream socket per request in flight.
    ulimit -n "$(ulimit -Hn)"
    files=$(ulimit -n)
    # nginx and the load generators on CPU 0, each proxy's one worker on CPU 1.
    taskset -pc 0 "${pids[0]}" >/dev/null
    start_pinned() {
        case "$1" in
            envoy) taskset -c 1 "$envoy" -c "$here/proxy-bootstrap.yaml" --concurrency 1 --log-level error --disable-hot-restart --use-dynamic-base-id >/dev/null 2>&1 & ;;
            outrider) RUST_LOG=error taskset -c 1 "$outrider" run --config "$here/proxy-bootstrap.yaml" --concurrency 1 >/dev/null 2>&1 & ;;
            orion) RUST_LOG=error taskset -c 1 "$orion" --with-envoy-bootstrap "$here/proxy-bootstrap.yaml" --num-cpus 1 --num-runtimes 1 >/dev/null 2>&1 & ;;
        esac
        proxy=$!
        wait_port 19000
        sleep 1
    }
    # PROTOCOL CONNECTIONS: prints the successful (2xx) responses per wall-second and per
    # proxy CPU-second, and how many responses were not 2xx (or failed).
    sweep_load() {
        local before after out ok failed
        before=$(ticks)
        case "$1" in
            h1)
                out=$(taskset -c 0 wrk -t1 -c"$2" -d"${secs}s" "$url")
                failed=$(echo "$out" | awk '/Non-2xx or 3xx responses/ {print $5}')
                ok=$(echo "$out" | awk -v f="${failed:-0}" '/requests in/ {print $1 - f}')
                ;;
            h2)
                out=$(taskset -c 0 h2load -c"$2" -m1 -D"$secs" "$url" 2>/dev/null)
                ok=$(echo "$out" | awk '/^status codes:/ {print $3}')
                failed=$(echo "$out" | awk '/^requests:/ {print $10 + $12 + $14}')
                ;;
        esac
        after=$(ticks)
        awk -v n="${ok:-0}" -v f="${failed:-0}" -v s="$secs" -v t=$((after - before)) -v hz="$hz" \
            'BEGIN { printf "%d %d %d\n", n / s, (t == 0 ? 0 : n * hz / t), f }'
    }
    proxies=(envoy outrider orion)
    rounds="${PROXY_BENCH_ROUNDS:-3}"
    runs="$(mktemp)"
    echo "round connections protocol proxy rps rpcs failed"
    for round in $(seq "$rounds"); do
        for conns in ${PROXY_BENCH_CONNECTIONS:-32 512 2048 16384}; do
            if [[ "$files" != unlimited ]] && ((2 * conns + 256 > files)); then
                ((round == 1)) && echo "# $conns connections need about $((2 * conns + 256)) open files; this machine allows $files: skipped"
                continue
            fi
            for proto in h1 h2; do
                # A rotating order, so that no proxy always runs first or last.
                for i in 0 1 2; do
                    p="${proxies[$(((i + round) % 3))]}"
                    start_pinned "$p"
                    taskset -c 0 wrk -t1 -c"$conns" -d2s "$url" >/dev/null 2>&1 || true # warm-up
                    line="$round $conns $proto $p $(sweep_load "$proto" "$conns")"
                    echo "$line" | tee -a "$runs"
                    stop
                done
            done
        done
    done
    echo
    echo "Medians over $rounds rounds (rps: requests per wall-second; rpcs: per proxy CPU-second):"
    echo
    python3 - "$runs" <<'PY'
import statistics, sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    _, conns, proto, proxy, rps, rpcs, failed = line.split()
    runs[(int(conns), proto, proxy)].append((float(rps), float(rpcs), float(failed)))
med = lambda key, i: statistics.median(v[i] for v in runs[key]) if runs[key] else 0.0
ratio = lambda a, b: f"{a / b:.2f}" if b else "n/a"
# A proxy that failed most requests of a cell has no figure there.
def cell(key, i):
    if runs[key] and statistics.median(v[2] for v in runs[key]) > statistics.median(v[0] for v in runs[key]):
        return None
    return med(key, i)
show = lambda v: "failed" if v is None else f"{v:.0f}"
rat = lambda a, b: "n/a" if a is None or b is None else ratio(a, b)
print("| connections | protocol | Envoy rps | Orion rps | Outrider rps | Envoy rpcs | Orion rpcs | Outrider rpcs | Outrider/Envoy rpcs | Outrider/Orion rpcs |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for conns, proto in sorted({(c, p) for c, p, _ in runs}):
    e, o, x = ((conns, proto, name) for name in ("envoy", "orion", "outrider"))
    print(f"| {conns} | {proto} | {show(cell(e,0))} | {show(cell(o,0))} | {show(cell(x,0))} | {show(cell(e,1))} | {show(cell(o,1))} | {show(cell(x,1))} | {rat(cell(x,1), cell(e,1))} | {rat(cell(x,1), cell(o,1))} |")
PY
    rm -f "$runs"
    exit 0
fi

declare -A r
for p in envoy outrider; do
    start "$p"
    r[$p.rss_idle]=$(rss)
    wrk -t1 -c50 -d"${secs}s" "$url" >/dev/null  # warm-up
    load "$p.h1" h1
    r[$p.rss_loaded]=$(rss)
    load "$p.h2" h2
    stop
done
# Two workers each, the same load.
for p in envoy outrider; do
    start "$p" 2
    wrk -t1 -c50 -d"${secs}s" "$url" >/dev/null  # warm-up
    load "$p.w2_h1" h1
    load "$p.w2_h2" h2
    stop
done
# Latency at half of Envoy's maximum, the same fixed rate for both (open loop).
rate=$(awk -v x="${r[envoy.h1_rps]}" 'BEGIN { printf "%d", x / 2 }')
for p in envoy outrider; do
    [[ -n "$latency" ]] || { r[$p.p50_ms]=n/a; r[$p.p99_ms]=n/a; continue; }
    start "$p"
    out=$(oha --no-tui --latency-correction -q "$rate" -c 50 -z "${secs}s" --output-format json "$url")
    r[$p.p50_ms]=$(echo "$out" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["latencyPercentiles"]["p50"]*1000, 3))')
    r[$p.p99_ms]=$(echo "$out" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["latencyPercentiles"]["p99"]*1000, 3))')
    stop
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b+0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
echo "| measure | Envoy 1.40 | Outrider | Outrider/Envoy |"
echo "| --- | --- | --- | --- |"
for m in h1_rps h2_rps p50_ms p99_ms rss_idle rss_loaded h1_rpcs h2_rpcs w2_h1_rps w2_h2_rps w2_h1_rpcs w2_h2_rpcs; do
    echo "| $m | ${r[envoy.$m]} | ${r[outrider.$m]} | $(ratio "${r[outrider.$m]}" "${r[envoy.$m]}") |"
done
echo "(p50_ms, p99_ms: HTTP/1.1 at $rate requests/s, 50 connections; rss in KiB;"
echo " *_rpcs: requests per proxy CPU-second; w2_*: --concurrency 2)"
echo
echo "Two workers / one worker:"
echo
echo "| measure | Envoy 1.40 | Outrider |"
echo "| --- | --- | --- |"
for m in h1_rps h2_rps h1_rpcs h2_rpcs; do
    echo "| $m | $(ratio "${r[envoy.w2_$m]}" "${r[envoy.$m]}") | $(ratio "${r[outrider.w2_$m]}" "${r[outrider.$m]}") |"
done
