#!/usr/bin/env bash
# Ring hash and maglev conformance with Envoy 1.40: the same bootstrap (a listener hashing
# the `x-key` header onto a cluster of 10 nginx backends, each answering with its port),
# the same 1 000 keys through Envoy and through Outrider; the key→backend mappings must be
# identical, with all 10 backends and with one removed. Also reports the share of keys that
# move when one backend is removed, for each proxy.
#
#   bench/hash-conformance.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
command -v nginx >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null
bash "$here/install-envoy.sh" >/dev/null
envoy="$here/.envoy/bin/envoy"
[[ -n "${OUTRIDER_SKIP_BUILD:-}" ]] || (cd "$root" && cargo build --profile dist --quiet)
outrider="${OUTRIDER_BIN:-${CARGO_TARGET_DIR:-$root/target}/dist/outrider}"
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

ports=$(seq 18101 18110)
{
    echo "worker_processes 1; daemon off; pid $work/nginx.pid; error_log /dev/null;"
    echo "events { worker_connections 1024; } http { access_log off;"
    for p in $ports; do echo "server { listen 127.0.0.1:$p; location / { return 200 \"$p\"; } }"; done
    echo "}"
} > "$work/nginx.conf"
nginx -c "$work/nginx.conf" -p "$work" & pids+=($!)

bootstrap() { # policy, ports...
    local policy=$1; shift
    local endpoints=""
    for p in "$@"; do endpoints+="        - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: $p } } }"$'\n'; done
    cat <<YAML
admin: { address: { socket_address: { address: 127.0.0.1, port_value: 19911 } } }
static_resources:
  listeners:
  - name: ingress
    address: { socket_address: { address: 127.0.0.1, port_value: 19010 } }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                route: { cluster: backend, hash_policy: [{ header: { header_name: x-key } }] }
          http_filters:
          - name: envoy.filters.http.router
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 1s
    lb_policy: $policy
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
$endpoints
YAML
}

mapping() { # proxy, policy, ports... → writes key→port lines
    local proxy=$1 policy=$2; shift 2
    bootstrap "$policy" "$@" > "$work/bootstrap.yaml"
    case "$proxy" in
        envoy) "$envoy" -c "$work/bootstrap.yaml" --concurrency 1 --log-level error --disable-hot-restart --use-dynamic-base-id >/dev/null 2>&1 & ;;
        outrider) RUST_LOG=error "$outrider" run --config "$work/bootstrap.yaml" --concurrency 1 >/dev/null 2>&1 & ;;
    esac
    local pid=$!
    python3 - <<'PY'
import socket, time
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", 19010), timeout=0.2).close(); break
    except OSError: time.sleep(0.1)
PY
    python3 - <<'PY'
import http.client
conn = http.client.HTTPConnection("127.0.0.1", 19010, timeout=5)
for key in range(1000):
    conn.request("GET", "/", headers={"x-key": f"key-{key}"})
    print(f"key-{key} {conn.getresponse().read().decode()}")
PY
    kill "$pid"; wait "$pid" 2>/dev/null || true
}

echo "| policy | same backend in Envoy 1.40 and Outrider, 10 backends | same, 1 removed | keys moved by the removal: Envoy | Outrider |"
echo "| --- | --- | --- | --- | --- |"
for policy in RING_HASH MAGLEV; do
    minus1=$(echo $ports | cut -d' ' -f2-)
    for proxy in envoy outrider; do
        mapping "$proxy" "$policy" $ports > "$work/$proxy.$policy"
        mapping "$proxy" "$policy" $minus1 > "$work/$proxy.$policy.minus1"
    done
    same() { paste -d' ' "$1" "$2" | awk '$2 == $4' | wc -l; }
    moved() { paste -d' ' "$1" "$2" | awk '$2 != $4' | wc -l; }
    echo "| $policy | $(same "$work/envoy.$policy" "$work/outrider.$policy") of 1000 keys" \
        "| $(same "$work/envoy.$policy.minus1" "$work/outrider.$policy.minus1") of 1000" \
        "| $(moved "$work/envoy.$policy" "$work/envoy.$policy.minus1") of 1000" \
        "| $(moved "$work/outrider.$policy" "$work/outrider.$policy.minus1") of 1000 |"
done
