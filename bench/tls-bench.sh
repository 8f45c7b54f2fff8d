#!/usr/bin/env bash
# Mutual TLS through the proxy, side by side with Envoy 1.40 in one run: the same bootstrap
# (bench/tls-bootstrap.yaml: mTLS in, client identity checked by SPIFFE URI SAN, plaintext
# to the nginx backend), ECDSA P-256 certificates made here with openssl, one worker each,
# the proxies run alternately. Measures
#   - new mTLS handshakes per second: `openssl s_time -new` (a full handshake on every
#     connection, no session resumption), two client processes in parallel;
#   - keep-alive throughput over mTLS: oha with a client certificate, 50 connections,
#     HTTP/1.1, and HTTP/2 with 10 streams per connection;
#   - the proxy's own CPU time in each run (/proc), so that a client-bound run still says
#     what one proxy CPU-second buys; and RSS after the load.
# Prints a markdown table with Outrider/Envoy ratios. Installs what is missing: nginx, wrk,
# h2load, openssl (apt-get), oha (`cargo install oha --locked`), Envoy (install-envoy.sh).
#
#   bench/tls-bench.sh [seconds-per-run]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
secs="${1:-10}"

need() { command -v "$1" >/dev/null 2>&1; }
if ! need wrk || ! need h2load || ! need nginx || ! need openssl; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light wrk nghttp2-client openssl >/dev/null
fi
bash "$here/install-envoy.sh" >/dev/null
need oha || cargo install oha --locked --quiet
envoy="$here/.envoy/bin/envoy"
(cd "$root" && cargo build --profile dist --quiet)
outrider="${CARGO_TARGET_DIR:-$root/target}/dist/outrider"

# Certificates: a root, the proxy's server identity, the load client's identity.
tls="$here/out/tls"
mkdir -p "$tls"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tls/$1.key" 2>/dev/null; }
key ca
openssl req -x509 -new -key "$tls/ca.key" -subj "/CN=outrider bench root" -days 3650 -out "$tls/ca.pem" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
leaf() {
    key "$1"
    openssl req -new -key "$tls/$1.key" -subj "/CN=$1" -out "$tls/$1.csr" 2>/dev/null
    printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature" \
        "extendedKeyUsage=serverAuth,clientAuth" \
        "subjectAltName=URI:spiffe://cluster.local/ns/bench/sa/$1,IP:127.0.0.1,DNS:server.test" >"$tls/$1.ext"
    openssl x509 -req -in "$tls/$1.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial -days 365 \
        -extfile "$tls/$1.ext" -out "$tls/$1.pem" 2>/dev/null
}
leaf server
leaf client
sed "s|@TLS_DIR@|$tls|g" "$here/tls-bootstrap.yaml" >"$tls/bootstrap.yaml"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

nginx -c "$here/nginx.conf" -p /tmp & pids+=($!)

wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
wait_port 18080

start() {
    case "$1" in
        envoy) "$envoy" -c "$tls/bootstrap.yaml" --concurrency 1 --log-level error --disable-hot-restart --use-dynamic-base-id >/dev/null 2>&1 & ;;
        outrider) RUST_LOG=error "$outrider" run --config "$tls/bootstrap.yaml" --concurrency 1 >/dev/null 2>&1 & ;;
    esac
    proxy=$!
    pids+=("$proxy")
    wait_port 19443
    sleep 1
}
stop() { kill "$proxy"; wait "$proxy" 2>/dev/null || true; sleep 1; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$proxy/status"; }
# CPU seconds (user + system, every thread) the proxy has used so far.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$proxy/stat"; }
per_cpu() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN { printf "%d", n / (b - a) }'; }

url=https://127.0.0.1:19443/
client=(--cert "$tls/client.pem" --key "$tls/client.key" --cacert "$tls/ca.pem")
oha_rps() { oha --no-tui -z "${secs}s" -c 50 "${client[@]}" --output-format json "$@" "$url" |
    python3 -c 'import json,sys; s=json.load(sys.stdin)["summary"]; print(int(s["requestsPerSec"]), round(s["successRate"], 4))'; }
s_time() {
    openssl s_time -connect 127.0.0.1:19443 -new -time "$secs" \
        -cert "$tls/client.pem" -key "$tls/client.key" -CAfile "$tls/ca.pem" 2>/dev/null |
        awk '/connections in .* real seconds/ { printf "%d", $1 / $4 }'
}

declare -A r
for p in envoy outrider; do
    start "$p"
    # New connections: two s_time clients at once; the sum of their handshakes per second.
    before=$(cpu)
    s_time >"$tls/s_time.1" & a=$!
    s_time >"$tls/s_time.2" & b=$!
    wait "$a" "$b"
    after=$(cpu)
    one=$(cat "$tls/s_time.1") two=$(cat "$tls/s_time.2")
    r[$p.handshakes]=$(( ${one:-0} + ${two:-0} ))
    r[$p.handshakes_per_cpu_s]=$(per_cpu "$(( ${r[$p.handshakes]} * secs ))" "$before" "$after")
    # Keep-alive: the handshakes are done once, then requests flow.
    oha_rps >/dev/null  # warm-up
    before=$(cpu)
    read -r r[$p.h1_rps] r[$p.h1_success] < <(oha_rps)
    after=$(cpu)
    r[$p.h1_rps_per_cpu_s]=$(per_cpu "$(( ${r[$p.h1_rps]} * secs ))" "$before" "$after")
    r[$p.rss_loaded]=$(rss)
    before=$(cpu)
    read -r r[$p.h2_rps] r[$p.h2_success] < <(oha_rps --http2 -p 10)
    after=$(cpu)
    r[$p.h2_rps_per_cpu_s]=$(per_cpu "$(( ${r[$p.h2_rps]} * secs ))" "$before" "$after")
    stop
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b+0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
echo "| measure | Envoy 1.40 | Outrider | Outrider/Envoy |"
echo "| --- | --- | --- | --- |"
for m in handshakes handshakes_per_cpu_s h1_rps h1_rps_per_cpu_s h1_success h2_rps h2_rps_per_cpu_s h2_success rss_loaded; do
    echo "| $m | ${r[envoy.$m]} | ${r[outrider.$m]} | $(ratio "${r[outrider.$m]}" "${r[envoy.$m]}") |"
done
echo "(handshakes: full mTLS handshakes/s, ECDSA P-256, 2 openssl s_time clients; h1/h2: requests/s over"
echo " kept-alive mTLS connections, oha -c 50 (h2: 10 streams each); *_per_cpu_s: per CPU-second of the"
echo " proxy process; success: oha's success rate; rss in KiB; $secs s per run, one worker each)"
