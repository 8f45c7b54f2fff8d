#!/usr/bin/env bash
# User-space instructions the proxy spends per request, counted by valgrind's callgrind: a
# measure of the request path that the machine's noise does not move (the kernel's share,
# the same for any user-space change, is not counted). bench/proxy-bootstrap.yaml, one
# worker, nginx behind it; counting starts after a warm-up and covers N requests from
# h2load over 10 connections (HTTP/1.1 keep-alive, or HTTP/2 with 10 streams each).
#
#   bench/instructions-per-request.sh BINARY [h1|h2] [N]
#
# OUTRIDER_BOOTSTRAP=FILE counts with another bootstrap (it must listen on 19000 and
# forward to nginx on 18080, as bench/proxy-bootstrap.yaml does).
# Prints `h1 instructions_per_request=...`. Compare two binaries by running it on each.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$1"; mode="${2:-h1}"; n="${3:-3000}"
bootstrap="${OUTRIDER_BOOTSTRAP:-$here/proxy-bootstrap.yaml}"
need() { command -v "$1" >/dev/null 2>&1; }
if ! need valgrind || ! need h2load || ! need nginx; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q valgrind nginx-light nghttp2-client >/dev/null
fi
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

nginx -c "$here/nginx.conf" -p /tmp & pids+=($!)
RUST_LOG=error valgrind --tool=callgrind --instr-atstart=no --log-file="$work/valgrind.log" \
    --callgrind-out-file="$work/callgrind.out" "$bin" run --config "$bootstrap" --concurrency 1 \
    >/dev/null 2>&1 & proxy=$!; pids+=($proxy)
for _ in $(seq 240); do curl -s -o /dev/null http://127.0.0.1:19000/ && break; sleep 0.5; done

load() {
    case "$mode" in
        h1) h2load --h1 -n "$1" -c 10 http://127.0.0.1:19000/ ;;
        h2) h2load -n "$1" -c 10 -m 10 http://127.0.0.1:19000/ ;;
    esac
}
load 500 >/dev/null
callgrind_control -i on "$proxy" >/dev/null 2>&1
done_requests=$(load "$n" | awk '/^requests:/ {print $8}')
callgrind_control -i off "$proxy" >/dev/null 2>&1
callgrind_control -d "$proxy" >/dev/null 2>&1
total=$(cat "$work"/callgrind.out* 2>/dev/null | awk '/^summary:|^totals:/ {s += $2} END {print s + 0}')
echo "$mode requests=$done_requests instructions_per_request=$((total / n))"
