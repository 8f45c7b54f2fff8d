#!/usr/bin/env bash
# One pod's mesh processes, their memory: Outrider alone (`outrider sidecar --istio-agent`,
# which does istio-agent's job in-process) against Istio's pilot-agent running Envoy 1.40,
# both against the same real istiod (pilot-discovery, file mode, no Kubernetes) acting as the
# mesh's CA and xDS server over TLS. Each pod is measured idle, right after traffic over
# istiod-issued mutual TLS, and 10 s later; the medians go into bench/RESULTS.md.
#
#   bench/agent-memory.sh                    3 runs of each setup, alternating; writes RESULTS.md
#   bench/agent-memory.sh --runs 1 --no-write    one run of each, table printed only
#   bench/agent-memory.sh --requests 20000 --concurrency 10   (the defaults)
#   bench/agent-memory.sh --only istio --runs 1 --no-write    one setup (outrider or istio)
#   OUTRIDER_BIN=path bench/agent-memory.sh  that binary instead of building target/dist/outrider
#
# Needs root (a network namespace: Istio's ports are fixed, so everything runs in one made
# here, only `lo` up, deleted at exit), iproute2, openssl and python3. Installs the rest:
# Envoy (bench/install-envoy.sh), pilot-discovery and pilot-agent (tests/peers/build.sh istio,
# needs Go), oha (cargo install), Outrider (cargo build --profile dist, copied aside).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
helper="$here/agent-memory/helper.py"

runs=3 requests=20000 concurrency=10 write=1 only=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --runs) runs="$2"; shift 2 ;;
        --requests) requests="$2"; shift 2 ;;
        --concurrency) concurrency="$2"; shift 2 ;;
        --no-write) write=0; shift ;;
        --only) only="$2"; shift 2 ;;
        *) sed -n '2,16p' "$0"; exit 2 ;;
    esac
done
invocation="bench/agent-memory.sh"
[[ "$runs" == 3 ]] || invocation+=" --runs $runs"
[[ "$requests" == 20000 ]] || invocation+=" --requests $requests"
[[ "$concurrency" == 10 ]] || invocation+=" --concurrency $concurrency"

say() { echo "agent-memory: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
[[ "$(id -u)" == 0 ]] || fail "run as root (ip netns)"
for tool in ip openssl python3; do
    command -v "$tool" >/dev/null || fail "$tool is required"
done

# --- What it runs ------------------------------------------------------------------------
bash "$here/install-envoy.sh" >/dev/null
envoy="$here/.envoy/bin/envoy"
bash "$root/tests/peers/build.sh" istio >/dev/null
peers="${OUTRIDER_PEERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/outrider/peers}"
pilot_discovery="$peers/bin/pilot-discovery" pilot_agent="$peers/bin/pilot-agent"
template="$peers/build/istio/istio-src/tools/packaging/common/envoy_bootstrap.json"
for f in "$pilot_discovery" "$pilot_agent" "$template"; do
    [[ -e "$f" ]] || fail "$f missing (tests/peers/build.sh istio needs Go)"
done
command -v oha >/dev/null || cargo install oha --locked --quiet
oha="$(command -v oha)"
if [[ -z "${OUTRIDER_BIN:-}" ]]; then
    (cd "$root" && cargo build --profile dist --quiet)
    # What the binary was built from (read now: a commit made while this runs is not in it).
    commit="$(git -C "$root" rev-parse --short HEAD)"
    [[ -z "$(git -C "$root" status --porcelain -- src Cargo.toml Cargo.lock build.rs)" ]] ||
        commit+=" with uncommitted changes under src/"
else
    commit="$(git -C "$root" rev-parse --short HEAD), Outrider from OUTRIDER_BIN=$OUTRIDER_BIN"
fi

work="$(mktemp -d /tmp/agent-memory.XXXXXX)"
netns="agent-memory-$$"
# A private copy, so a build started while this runs cannot swap the binary under it.
mkdir -p "$work/bin"
cp "${OUTRIDER_BIN:-${CARGO_TARGET_DIR:-$root/target}/dist/outrider}" "$work/bin/outrider"
outrider="$work/bin/outrider"

pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    ip netns del "$netns" 2>/dev/null || true
    if [[ "${keep_work:-0}" == 1 ]]; then say "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_ns() { ip netns exec "$netns" "$@"; }
# start LOG CWD COMMAND...: COMMAND in the namespace, in a process group of its own
# (`ip netns exec` and `env` exec it: the pid is the command's own); its pid in $started.
start() {
    local log="$1" dir="$2"
    shift 2
    (cd "$dir" && exec setsid ip netns exec "$netns" "$@" </dev/null >"$log" 2>&1) &
    started=$!
    pids+=("$started")
}
# stop PID: SIGTERM to its group, bounded wait, then SIGKILL.
stop() {
    local pid="$1" i
    kill -TERM -- "-$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        python3 -c 'import time; time.sleep(0.1)'
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
# wait_port PORT SECS: until something listens on 127.0.0.1:PORT in the namespace.
wait_port() {
    local port="$1" secs="$2" i
    for ((i = 0; i < secs * 10; i++)); do
        in_ns bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null && return 0
        python3 -c 'import time; time.sleep(0.1)'
    done
    return 1
}

ip netns add "$netns"
ip -n "$netns" link set lo up

# --- istiod's CA (ROOT_CA_DIR) and the service-account token ------------------------------
mkdir -p "$work/cacerts" "$work/jwks" "$work/istiod/config"
(
    cd "$work/cacerts"
    cat >root.cnf <<'X'
[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_root
[dn]
O = Outrider bench
CN = Outrider bench root CA
[v3_root]
basicConstraints = critical, CA:true
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
X
    cat >ica.cnf <<'X'
[req]
distinguished_name = dn
prompt = no
[dn]
O = Outrider bench
CN = Outrider bench istiod CA
L = istiod
[v3_ica]
basicConstraints = critical, CA:true, pathlen:0
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
subjectAltName = URI:spiffe://cluster.local/ns/istio-system/sa/istiod
X
    openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out root-key.pem
    openssl req -x509 -new -key root-key.pem -sha256 -days 30 -config root.cnf -out root-cert.pem
    openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out ca-key.pem
    openssl req -new -key ca-key.pem -config ica.cnf -out ca.csr
    openssl x509 -req -in ca.csr -CA root-cert.pem -CAkey root-key.pem -CAcreateserial -sha256 -days 30 \
        -extfile ica.cnf -extensions v3_ica -out ca-cert.pem 2>/dev/null
    cat ca-cert.pem root-cert.pem >cert-chain.pem
    rm -f root-key.pem ca.csr root.cnf ica.cnf root-cert.srl
) >/dev/null
issuer="https://outrider.bench/issuer" kid="outrider-bench-key" jwks_port=18088
key="$root/tests/data/jwt-rsa-test-key.pem"
python3 "$helper" jwks "$key" "$kid" "$work/jwks/jwks.json"
python3 "$helper" token "$key" "$kid" "$issuer" "system:serviceaccount:default:default" "$work/istio-token"

# --- istiod's config: the pod's outbound port loops back to its own STRICT inbound port ---
outbound=9080 inbound=9081 app=8081
host="app.default.svc.cluster.local"
cat >"$work/istiod/config/mesh.yaml" <<X
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: { name: app, namespace: default }
spec:
  hosts: [$host]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - { number: $outbound, name: http, protocol: HTTP, targetPort: $inbound }
  endpoints:
  - address: 127.0.0.1
    serviceAccount: default
    labels: { app: app, security.istio.io/tlsMode: istio }
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: { name: app, namespace: default }
spec:
  host: $host
  trafficPolicy:
    tls: { mode: ISTIO_MUTUAL }
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: { name: app, namespace: default }
spec:
  workloadSelector: { labels: { app: app } }
  ingress:
  - port: { number: $inbound, protocol: HTTP, name: http }
    defaultEndpoint: 127.0.0.1:$app
  egress:
  - hosts: ["./*"]
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: { name: app, namespace: default }
spec:
  selector: { matchLabels: { app: app } }
  mtls: { mode: STRICT }
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: deny-admin, namespace: default }
spec:
  selector: { matchLabels: { app: app } }
  action: DENY
  rules:
  - to: [{ operation: { paths: ["/admin*"] } }]
X
: >"$work/istiod/mesh.yaml"

# --- istiod, its JWKS, the pod's application: in the namespace for the whole run ----------
start "$work/jwks.log" "$work/jwks" python3 -m http.server --bind 127.0.0.1 "$jwks_port"
start "$work/backend.log" "$work" python3 "$helper" backend "$app"
jwt_rule="{\"issuer\":\"$issuer\",\"jwks_uri\":\"http://127.0.0.1:$jwks_port/jwks.json\",\"audiences\":[\"istio-ca\"]}"
# istiod's working directory holds no ./var/run/secrets: that would replace its serving
# certificate or be read as its own token. Upstream Envoy 1.40 lacks the extensions of
# Istio's own Envoy build (istio/proxy) that istiod would otherwise put in the listeners and
# clusters (`istio.metadata_exchange`: io.istio.http.peer_metadata and
# envoy.tcp.metadataexchange; `istio.alpn`) and rejects them: istiod is told to leave them out,
# for both pods alike, so that both are sent the same configuration.
start "$work/istiod.log" "$work/istiod" env \
    POD_NAMESPACE=istio-system REVISION=default ENABLE_CA_SERVER=true \
    ROOT_CA_DIR="$work/cacerts" JWT_RULE="$jwt_rule" ISTIOD_CUSTOM_HOST=localhost,127.0.0.1 \
    PILOT_ENABLE_METADATA_EXCHANGE=false PILOT_ENABLE_ALPN_FILTER=false \
    "$pilot_discovery" discovery --registries= --configDir="$work/istiod/config" \
    --meshConfig="$work/istiod/mesh.yaml" --clusterID=Kubernetes \
    --grpcAddr=127.0.0.1:15010 --secureGRPCAddr=127.0.0.1:15012 --httpAddr=127.0.0.1:18080 \
    --httpsAddr=127.0.0.1:15017 --monitoringAddr=127.0.0.1:15014 --log_output_level=default:info
istiod_pid=$started
for port in "$jwks_port" "$app" 15012 15010; do
    wait_port "$port" 60 || { keep_work=1; tail -n 30 "$work/istiod.log" >&2; fail "nothing listens on $port"; }
done
say "istiod ready (pid $istiod_pid); work directory $work"

# --- One pod ------------------------------------------------------------------------------
# pod_dir SETUP RUN: a scratch working directory with the token and the mesh root where the
# agent looks (./var/run/secrets/…, relative, as Istio's injection mounts them at /).
pod_dir() {
    local dir="$work/$1-$2"
    mkdir -p "$dir/var/run/secrets/tokens" "$dir/var/run/secrets/istio" "$dir/etc/istio/proxy"
    cp "$work/istio-token" "$dir/var/run/secrets/tokens/istio-token"
    cp "$work/cacerts/root-cert.pem" "$dir/var/run/secrets/istio/root-cert.pem"
    echo "$dir"
}
pod_env=(
    POD_NAME=app-0 POD_NAMESPACE=default INSTANCE_IP=127.0.0.1 SERVICE_ACCOUNT=default
    ISTIO_META_INTERCEPTION_MODE=NONE ISTIO_METAJSON_LABELS='{"app":"app"}' ISTIO_META_CLUSTER_ID=Kubernetes
    ISTIO_META_WORKLOAD_NAME=app CA_ADDR=127.0.0.1:15012 ISTIOD_SAN=istiod.istio-system.svc
)

measure() { python3 "$helper" mem "$1"; }

# run_pod SETUP RUN: starts the pod, measures, sends the traffic, measures, stops it; one
# JSON line into $work/results.jsonl.
run_pod() {
    local setup="$1" run="$2" dir pid ready_s idle traffic after summary handshakes t0 load
    dir="$(pod_dir "$setup" "$run")"
    t0="$(date +%s.%N)"
    case "$setup" in
        outrider)
            start "$dir/pod.log" "$dir" env "${pod_env[@]}" \
                PROXY_CONFIG='{"discoveryAddress":"127.0.0.1:15012"}' \
                "$outrider" sidecar --bootstrap ./etc/istio/proxy/outrider-bootstrap.json --istio-agent --concurrency 2
            ;;
        istio)
            # Istio's defaults, spelled out; the stats matcher keeps Envoy's `ssl.handshake`
            # counters (Istio's bootstrap drops them otherwise), the check that the loop is mTLS.
            start "$dir/pod.log" "$dir" env "${pod_env[@]}" \
                PROXY_CONFIG="{\"binaryPath\":\"$envoy\",\"discoveryAddress\":\"127.0.0.1:15012\",\"controlPlaneAuthPolicy\":\"MUTUAL_TLS\",\"concurrency\":2,\"proxyStatsMatcher\":{\"inclusionSuffixes\":[\"ssl.handshake\"]}}" \
                PILOT_CERT_PROVIDER=istiod JWT_POLICY=third-party-jwt \
                "$pilot_agent" proxy sidecar --domain default.svc.cluster.local --templateFile "$template"
            ;;
    esac
    pid=$started
    if ! ready_s="$(in_ns python3 "$helper" ready "$pid" "$t0" "$outbound" "$host" 120)"; then
        keep_work=1
        tail -n 40 "$dir/pod.log" >&2
        fail "$setup run $run never became ready (log: $dir/pod.log)"
    fi
    say "$setup run $run: ready after ${ready_s} s"
    sleep 10 # the idle settle time
    idle="$(measure "$pid")"
    load="$(cut -d' ' -f1 /proc/loadavg)"
    in_ns "$oha" -n "$requests" -c "$concurrency" --no-tui --output-format json --host "$host" \
        "http://127.0.0.1:$outbound/" >"$dir/oha.json" || { keep_work=1; fail "oha failed ($setup run $run)"; }
    traffic="$(measure "$pid")"
    summary="$(python3 "$helper" oha "$dir/oha.json")"
    # The loop is mutual TLS with the certificates istiod issued: both ends count handshakes.
    handshakes="$(in_ns python3 "$helper" tls "$inbound" "$outbound")"
    sleep 10 # the settle time after traffic
    after="$(measure "$pid")"
    stop "$pid"
    printf '{"setup":"%s","run":%s,"ready_s":%s,"idle":%s,"traffic":%s,"after":%s,"oha":%s,"tls":%s,"load":%s}\n' \
        "$setup" "$run" "$ready_s" "$idle" "$traffic" "$after" "$summary" "$handshakes" "$load" >>"$work/results.jsonl"
    python3 - "$summary" "$handshakes" "$setup" "$run" "$requests" <<'PY' || { keep_work=1; fail "the traffic through the $setup pod, run $run, failed"; }
import json, sys
s, tls, setup, run, requests = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
print(f"agent-memory: {setup} run {run}: {s['ok']}/{s['total']} 2xx, {s['rps']:.0f} req/s, codes {s['codes']}, "
      f"errors {s['errors']}; TLS handshakes inbound {tls['inbound']}, outbound {tls['outbound']}", file=sys.stderr)
sys.exit(0 if s["ok"] == requests and s["total"] == requests and tls["inbound"] > 0 and tls["outbound"] > 0 else 1)
PY
}

for ((run = 1; run <= runs; run++)); do
    if ((run % 2)); then order=(outrider istio); else order=(istio outrider); fi
    for setup in "${order[@]}"; do
        [[ -z "$only" || "$only" == "$setup" ]] || continue
        run_pod "$setup" "$run"
    done
done

versions="Envoy $("$envoy" --version | grep -o '[0-9a-f]\{40\}/[^ ]*'); pilot-agent and pilot-discovery"
versions+=" built from istio.io/istio $(grep -o 'istio.io/istio v[^ ]*' "$root/tests/peers/istio/go.mod" | head -n1 | cut -d' ' -f2)"
versions+=" (tests/peers/build.sh); $(nproc) CPUs"
report=(python3 "$helper" report --command "$invocation" --date "$(date -u +%Y-%m-%d)" --commit "$commit"
    --versions "$versions"
    --requests "$requests" --concurrency "$concurrency" --results "$here/RESULTS.md")
if ((write)); then
    # The raw measurements beside the script: `helper.py report … FILE` redraws the section.
    cp "$work/results.jsonl" "$here/agent-memory/results.jsonl"
else
    report+=(--no-write)
fi
"${report[@]}" "$work/results.jsonl"
