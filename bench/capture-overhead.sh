#!/usr/bin/env bash
# The cost of transparent capture, in the network namespaces of the capture test: sequential
# HTTP requests, one new connection each, from the pod namespace to a server in the client
# namespace — directly, through Outrider's explicitly addressed listener, and captured
# (iptables REDIRECT to 15001, SO_ORIGINAL_DST, hand-off to the port's listener).
#
# Needs root, iproute2 and iptables. PROFILE=dev measures a debug build (quicker to build,
# slower to run); CAPTURE_BENCH_REQUESTS sets the number of requests per path (2000).
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-dist}"
flag=(--profile dist)
[ "$profile" = dev ] && flag=()
cargo build "${flag[@]}" --bin outrider
dir="${CARGO_TARGET_DIR:-target}/$([ "$profile" = dev ] && echo debug || echo dist)"
# A private copy: a shared target directory may be rewritten by another build meanwhile.
copy="$(mktemp)"
trap 'rm -f "$copy"' EXIT
cp "$dir/outrider" "$copy"
OUTRIDER_BIN="$copy" cargo test "${flag[@]}" --test mesh -- --ignored --exact capture_netns::capture_overhead --nocapture
