#!/usr/bin/env bash
# The kernel's share, per request, side by side: system calls (counted by `strace -c` on
# every thread of the proxy) and context switches (voluntary and not, from every thread's
# /proc status, counted in a second pass without strace, which would add its own) that
# Envoy 1.40 and Outrider spend per request on bench/proxy-bootstrap.yaml, one worker,
# nginx behind it, N requests from h2load over 10 connections (HTTP/1.1 keep-alive, or
# HTTP/2 with 10 streams each) after a warm-up.
#
#   bench/syscalls-per-request.sh [h1|h2] [N]
#
# OUTRIDER_BIN=FILE counts another Outrider binary (default target/dist/outrider, built
# unless OUTRIDER_SKIP_BUILD is set). Prints one line per proxy: the calls per request by
# name (those at 0.05 a request or more), their total, and the context switches.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
mode="${1:-h1}"; n="${2:-20000}"
need() { command -v "$1" >/dev/null 2>&1; }
if ! need strace || ! need h2load || ! need nginx; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q strace nginx-light nghttp2-client >/dev/null
fi
bash "$here/install-envoy.sh" >/dev/null
envoy="$here/.envoy/bin/envoy"
[[ -n "${OUTRIDER_SKIP_BUILD:-}" ]] || (cd "$root" && cargo build --profile dist --quiet)
outrider="${OUTRIDER_BIN:-${CARGO_TARGET_DIR:-$root/target}/dist/outrider}"
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

nginx -c "$here/nginx.conf" -p /tmp & pids+=($!)

start() {
    case "$1" in
        envoy) "$envoy" -c "$here/proxy-bootstrap.yaml" --concurrency 1 --log-level error \
            --disable-hot-restart --use-dynamic-base-id >/dev/null 2>&1 & ;;
        outrider) RUST_LOG=error "$outrider" run --config "$here/proxy-bootstrap.yaml" --concurrency 1 \
            >/dev/null 2>&1 & ;;
    esac
    proxy=$!; pids+=($proxy)
    for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:19000/ && return 0; sleep 0.1; done
    echo "$1 did not serve on 19000" >&2; exit 1
}
stop() { kill "$proxy"; wait "$proxy" 2>/dev/null || true; }
load() {
    case "$mode" in
        h1) h2load --h1 -n "$1" -c 10 http://127.0.0.1:19000/ ;;
        h2) h2load -n "$1" -c 10 -m 10 http://127.0.0.1:19000/ ;;
    esac | awk '/^requests:/ {print $8}'
}
# Every thread's voluntary and involuntary context switches so far.
switches() { cat /proc/"$proxy"/task/*/status | awk '/ctxt_switches/ {s += $2} END {print s + 0}'; }

for name in envoy outrider; do
    start "$name"
    load 2000 >/dev/null
    before=$(switches)
    served=$(load "$n")
    after=$(switches)
    strace -c -f -q -p "$proxy" -o "$work/$name.strace" & tracer=$!
    # strace attaches to every thread before it counts; a request through it says when.
    for _ in $(seq 50); do grep -q 'TracerPid:.*[1-9]' /proc/"$proxy"/status && break; sleep 0.1; done
    traced=$(load "$n")
    kill -INT "$tracer"; wait "$tracer" 2>/dev/null || true
    stop
    awk -v name="$name" -v mode="$mode" -v n="$traced" -v served="$served" -v sw=$((after - before)) '
        $1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" { calls = $4; call = $NF; total += calls; if (calls / n >= 0.05) line = line sprintf(" %s=%.2f", call, calls / n) }
        END { printf "%s %s requests=%d syscalls_per_request=%.2f context_switches_per_request=%.3f%s\n", name, mode, n, total / n, sw / served, line }
    ' "$work/$name.strace"
done
