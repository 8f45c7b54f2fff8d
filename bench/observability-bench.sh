#!/usr/bin/env bash
# Cost of observability: HTTP/1.1 throughput (wrk, 50 keep-alive connections, one
# worker) and the proxy's own CPU time per request, through a baseline Outrider without
# stats and through this one: with stats (always on); with a span per request exported
# over OTLP/gRPC to a counting collector (bench/otlp_sink.py); with 1 % of requests traced
# (Istio's default sampling); with spans and an access log line per request. Same nginx
# backend and bootstrap as proxy-bench.sh; the variants run in turn, `rounds` times each.
#
#   bench/observability-bench.sh BASELINE_BINARY CANDIDATE_BINARY [seconds-per-run] [rounds]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
baseline="$1"
candidate="$2"
secs="${3:-10}"
rounds="${4:-3}"

need() { command -v "$1" >/dev/null 2>&1; }
if ! need wrk || ! need nginx; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light wrk >/dev/null
fi
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# proxy-bench.sh's nginx, on a port and pid file of its own.
sed -e 's/18080/28080/' -e "s#/tmp/outrider-bench-nginx.pid#$work/nginx.pid#" "$here/nginx.conf" > "$work/nginx.conf"
nginx -c "$work/nginx.conf" -p "$work" & pids+=($!)
wait_port 28080

# The OTLP collector, in its own virtualenv.
[ -x "$here/.otlp-venv/bin/python" ] || { python3 -m venv "$here/.otlp-venv" && "$here/.otlp-venv/bin/pip" install --quiet grpcio opentelemetry-proto; }
"$here/.otlp-venv/bin/python" "$here/otlp_sink.py" 4317 > "$work/sink.out" & pids+=($!)
wait_port 4317

# The same bootstrap with a tracer (and the connection manager tracing), then also with
# an access log to a file.
# Ports of their own (29000, 29901, backend 28080), so that proxy-bench.sh may run beside.
python3 - "$here/proxy-bootstrap.yaml" "$work" <<'PY'
import sys
src, work = sys.argv[1:]
text = open(src).read().replace("port_value: 19000", "port_value: 29000").replace("port_value: 19901", "port_value: 29901").replace("port_value: 18080", "port_value: 28080")
open(work + "/plain.yaml", "w").write(text)
tracer = (
    "tracing:\n  http:\n    name: envoy.tracers.opentelemetry\n    typed_config:\n"
    "      \"@type\": type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig\n"
    "      grpc_service: { google_grpc: { target_uri: 127.0.0.1:4317, stat_prefix: otlp } }\n"
)
traced = tracer + text.replace("          stat_prefix: ingress\n", "          stat_prefix: ingress\n          tracing: {}\n")
open(work + "/traced.yaml", "w").write(traced)
# Istio's default: 1 % of requests without a trace start one.
open(work + "/sampled.yaml", "w").write(traced.replace("          tracing: {}\n", "          tracing: { random_sampling: { value: 1 } }\n"))
log = (
    "          access_log:\n"
    "          - name: envoy.access_loggers.file\n"
    "            typed_config: { \"@type\": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog, path: %s/access.log }\n" % work
)
open(work + "/logged.yaml", "w").write(traced.replace("          tracing: {}\n", "          tracing: {}\n" + log))
PY

# CPU time (user + system, clock ticks) of a process and all its threads.
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

run() { # binary bootstrap → "requests/s  CPU-µs-per-request" (the proxy's own CPU: workers,
        # control thread, span export and access log threads)
    RUST_LOG=error "$1" run --config "$2" --concurrency 1 >/dev/null 2>&1 &
    local proxy=$!
    wait_port 29000
    wrk -t1 -c50 -d2s http://127.0.0.1:29000/ >/dev/null
    local before; before=$(ticks "$proxy")
    local out; out=$(wrk -t1 -c50 -d"${secs}s" http://127.0.0.1:29000/)
    local after; after=$(ticks "$proxy")
    kill "$proxy"; wait "$proxy" 2>/dev/null || true
    sleep 1
    local rps; rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    local requests; requests=$(echo "$out" | awk '/requests in/ {print $1}')
    awk -v r="$rps" -v b="$before" -v a="$after" -v n="$requests" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%s %.2f\n", r, (a - b) / hz * 1e6 / n }'
}

declare -A sum cpu_sum
for round in $(seq "$rounds"); do
    for variant in baseline stats stats+traces stats+traces@1% stats+traces+access_log; do
        case "$variant" in
            baseline) result=$(run "$baseline" "$work/plain.yaml") ;;
            stats) result=$(run "$candidate" "$work/plain.yaml") ;;
            stats+traces) result=$(run "$candidate" "$work/traced.yaml") ;;
            stats+traces@1%) result=$(run "$candidate" "$work/sampled.yaml") ;;
            stats+traces+access_log) result=$(run "$candidate" "$work/logged.yaml") ;;
        esac
        read -r rps cpu <<< "$result"
        echo "round $round $variant $rps requests/s, $cpu CPU-µs/request"
        sum[$variant]=$(awk -v a="${sum[$variant]:-0}" -v b="$rps" 'BEGIN { print a + b }')
        cpu_sum[$variant]=$(awk -v a="${cpu_sum[$variant]:-0}" -v b="$cpu" 'BEGIN { print a + b }')
    done
done
base=$(awk -v s="${sum[baseline]}" -v n="$rounds" 'BEGIN { print s / n }')
cpu_base=$(awk -v s="${cpu_sum[baseline]}" -v n="$rounds" 'BEGIN { print s / n }')
echo "| variant | requests/s (mean of $rounds × ${secs}s) | vs baseline | proxy CPU-µs per request | vs baseline |"
echo "| --- | --- | --- | --- | --- |"
for variant in baseline stats stats+traces stats+traces@1% stats+traces+access_log; do
    mean=$(awk -v s="${sum[$variant]}" -v n="$rounds" 'BEGIN { printf "%.0f", s / n }')
    cpu=$(awk -v s="${cpu_sum[$variant]}" -v n="$rounds" 'BEGIN { printf "%.2f", s / n }')
    echo "| $variant | $mean | $(awk -v m="$mean" -v b="$base" 'BEGIN { printf "%+.1f %%", (m / b - 1) * 100 }') | $cpu | $(awk -v m="$cpu" -v b="$cpu_base" 'BEGIN { printf "%+.1f %%", (m / b - 1) * 100 }') |"
done
kill "${pids[1]}"; sleep 1; cat "$work/sink.out"
echo "access log lines: $(wc -l < "$work/access.log" 2>/dev/null || echo 0)"
