#!/usr/bin/env bash
# Idle memory after traffic of a proxy with one listener and one cluster, configured over
# Delta ADS and from a static bootstrap, side by side with Envoy 1.40 in the same run.
#
#   bench/ads-idle-memory.sh [--runs N] [--idle SECONDS] [--outrider BINARY]
#
# Each run starts a control plane (`outrider lab-backend`, serving
# bench/ads-idle-memory/resources.yaml over ADS, and the backend the cluster points at),
# then each proxy with one worker: Outrider over ADS, Outrider static, Envoy over ADS, Envoy
# static. 2 000 requests go through each (oha, 10 connections), then the proxies idle for
# --idle seconds (default 10) and their resident set is read from /proc (VmRSS, and its
# anonymous and file-backed parts). Needs oha and bench/install-envoy.sh's Envoy.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
runs=3 idle=10 outrider=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --idle) idle="$2"; shift 2 ;;
    --outrider) outrider="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$outrider" ]]; then
  (cd "$root" && cargo build --profile dist --quiet)
  outrider="${CARGO_TARGET_DIR:-$root/target}/dist/outrider"
fi
envoy="$root/bench/.envoy/bin/envoy"
[[ -x "$envoy" ]] || bash "$root/bench/install-envoy.sh"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cp "$root/bench/ads-idle-memory/resources.yaml" "$work/"

xds_cluster='
  - name: xds
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: { http2_protocol_options: {} }
    load_assignment: { cluster_name: xds, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 18100 } } } }] }] }'
# ads.yaml takes listener and cluster from the control plane; static.yaml has the same two
# with the listener on the port given to it.
cat >"$work/ads.yaml" <<YAML
node: { id: idle, cluster: idle }
admin: { address: { socket_address: { address: 127.0.0.1, port_value: 0 } } }
dynamic_resources:
  ads_config: { api_type: DELTA_GRPC, transport_api_version: V3, grpc_services: [{ envoy_grpc: { cluster_name: xds } }] }
  lds_config: { ads: {}, resource_api_version: V3 }
  cds_config: { ads: {}, resource_api_version: V3 }
static_resources:
  clusters:$xds_cluster
YAML
python3 - "$work" <<'PY'
import sys, yaml
work = sys.argv[1]
# The control plane's two resources as static ones, the listener on its own port.
listener, cluster = (
    {k: v for k, v in r.items() if k != "@type"} for r in yaml.safe_load(open(f"{work}/resources.yaml"))["resources"]
)
listener["address"]["socket_address"]["port_value"] = 10101
static = {
    "node": {"id": "idle", "cluster": "idle"},
    "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
    "static_resources": {"listeners": [listener], "clusters": [cluster]},
}
yaml.safe_dump(static, open(f"{work}/static.yaml", "w"))
PY

rss() { # PID: VmRSS, RssAnon, RssFile in MiB
  awk '/^VmRSS|^RssAnon|^RssFile/ { printf "%.1f ", $2 / 1024 }' "/proc/$1/status"
}

echo "run proxy config rss_mib anon_mib file_mib"
for run in $(seq 1 "$runs"); do
  "$outrider" lab-backend --scenario "$root/bench/scenarios/s1-uneven-speed.yaml" \
    --xds-address 127.0.0.1:18100 --resources "$work/resources.yaml" >"$work/control-plane.log" 2>&1 &
  control_plane=$!
  sleep 1
  declare -A pids=()
  for proxy in outrider envoy; do
    for config in ads static; do
      binary="$outrider"; [[ "$proxy" == envoy ]] && binary="$envoy"
      "$binary" -c "$work/$config.yaml" --concurrency 1 --base-id-path "$work/base-id-$proxy-$config" \
        --use-dynamic-base-id --disable-hot-restart --log-path "$work/$proxy-$config.log" >/dev/null 2>&1 &
      pids[$proxy-$config]=$!
    done
    # One pair at a time: each proxy's port (10100 over ADS, 10101 static) is its own.
    sleep 3
    for port in 10100 10101; do
      oha -n 2000 -c 10 --no-tui "http://127.0.0.1:$port/" | grep -q "Success rate:.*100.00%" \
        || { echo "$proxy: requests to $port failed" >&2; exit 1; }
    done
    sleep "$idle"
    for config in ads static; do
      echo "$run $proxy $config $(rss "${pids[$proxy-$config]}")"
      kill "${pids[$proxy-$config]}"
    done
    wait "${pids[$proxy-ads]}" "${pids[$proxy-static]}" 2>/dev/null || true
  done
  kill "$control_plane"; wait "$control_plane" 2>/dev/null || true
done
