#!/usr/bin/env python3
"""Per-request cost of the policy filters, side by side with Envoy 1.40 in one run.

For each variant (no filter; RBAC with 50 policies; JWT verification with RS256 and with
ES256 against an inline JWKS, without and with Envoy's `jwt_cache_config`; a local rate
limit that never limits; Istio's telemetry filters), both proxies run the
very same bootstrap (bench/proxy-bootstrap.yaml's listener and nginx backend, one worker),
one after the other; wrk sends HTTP/1.1 keep-alive requests for a fixed time. The proxy's
own CPU time (utime + stime from /proc) divided by the requests it served gives CPU
microseconds per request, which does not depend on how busy the rest of the machine is.
A filter's cost is its CPU per request minus the no-filter baseline of the same proxy; the
table reports it in microseconds and relative to that baseline, and the Outrider/Envoy
ratio of the relative costs (target: at most 1).

    bench/filter-bench.py [seconds-per-run]

Istio's telemetry filters (`istio.metadata_exchange` and `istio.stats`, on an INBOUND
listener of a node with Istio's metadata, each request carrying a peer's
`x-envoy-peer-metadata`) exist only in Istio's build of Envoy, not in Envoy 1.40: that
variant runs on Outrider alone, and its cost is also given relative to Envoy's no-filter
baseline. FILTER_BENCH_ONLY="no filter,Istio telemetry" runs only the variants whose names
start with one of the comma-separated prefixes.

Needs nginx and wrk (installed from Debian's packages when missing), Envoy
(bench/install-envoy.sh), and PyJWT + cryptography from PyPI to sign the tokens
(installed with pip when missing). Set OUTRIDER_SKIP_BUILD=1 to use an existing dist-profile
build.
"""

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SECS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
PORT = 19000
CONNECTIONS = 20


def sh(*args, **kw):
    return subprocess.run(args, check=True, **kw)


def ensure_tools():
    if not shutil.which("wrk") or not shutil.which("nginx"):
        sh("apt-get", "install", "-y", "-q", "nginx-light", "wrk", env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
           stdout=subprocess.DEVNULL)
    sh("bash", os.path.join(HERE, "install-envoy.sh"), stdout=subprocess.DEVNULL)
    try:
        import jwt  # noqa: F401
        import cryptography  # noqa: F401
    except ImportError:
        sh(sys.executable, "-m", "pip", "install", "--quiet", "pyjwt", "cryptography")
    if not os.environ.get("OUTRIDER_SKIP_BUILD"):
        sh("cargo", "build", "--profile", "dist", "--quiet", cwd=ROOT)


def b64url_uint(n):
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def keys_and_tokens():
    """An RSA and an EC P-256 key, their JWKS, and a valid token for each."""
    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    rn = rsa_key.public_key().public_numbers()
    en = ec_key.public_key().public_numbers()
    jwks = {"keys": [
        {"kty": "RSA", "kid": "rsa", "alg": "RS256", "use": "sig", "n": b64url_uint(rn.n), "e": b64url_uint(rn.e)},
        {"kty": "EC", "kid": "ec", "alg": "ES256", "use": "sig", "crv": "P-256",
         "x": base64.urlsafe_b64encode(en.x.to_bytes(32, "big")).rstrip(b"=").decode(),
         "y": base64.urlsafe_b64encode(en.y.to_bytes(32, "big")).rstrip(b"=").decode()},
    ]}
    claims = {"iss": "https://issuer.example", "sub": "bench", "aud": "bench", "exp": int(time.time()) + 86400}
    rs = jwt.encode(claims, rsa_key, algorithm="RS256", headers={"kid": "rsa"})
    es = jwt.encode(claims, ec_key, algorithm="ES256", headers={"kid": "ec"})
    return json.dumps(jwks), rs, es


def rbac_filter(policies=50):
    """ALLOW with `policies` policies, Istio-shaped (path prefix and method; a header
    principal); the benchmark's request matches only the last one."""
    out = []
    for i in range(policies):
        out.append(f"""
                  policy-{i}:
                    permissions:
                    - and_rules:
                        rules:
                        - url_path: {{ path: {{ prefix: "/api/v{i}/" }} }}
                        - header: {{ name: ":method", string_match: {{ exact: GET }} }}
                    principals:
                    - header: {{ name: x-user, string_match: {{ exact: user-{i} }} }}""")
    return f"""
          - name: envoy.filters.http.rbac
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
              rules:
                action: ALLOW
                policies:{''.join(out)}"""


def jwt_filter(jwks, cache=False):
    """`cache`: Envoy's `jwt_cache_config` (Envoy verifies every token without it; Outrider
    always remembers the signatures a key set verified)."""
    inline = json.dumps(json.dumps(jwks))  # a YAML (JSON) string holding the JWKS
    cache_config = "\n                  jwt_cache_config: { jwt_cache_size: 1000 }" if cache else ""
    return f"""
          - name: envoy.filters.http.jwt_authn
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
              providers:
                bench:
                  issuer: https://issuer.example
                  audiences: [bench]
                  local_jwks: {{ inline_string: {inline} }}{cache_config}
              rules:
              - match: {{ prefix: / }}
                requires: {{ provider_name: bench }}"""


LOCAL_RATELIMIT = """
          - name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: bench
              token_bucket: { max_tokens: 1000000000, tokens_per_fill: 1000000000, fill_interval: 1s }
              filter_enabled: { default_value: { numerator: 100, denominator: HUNDRED } }
              filter_enforced: { default_value: { numerator: 100, denominator: HUNDRED } }"""


ISTIO_TELEMETRY = """
          - name: istio.metadata_exchange
            typed_config:
              "@type": type.googleapis.com/udpa.type.v1.TypedStruct
              type_url: type.googleapis.com/io.istio.http.peer_metadata.Config
              value:
                downstream_discovery: [{ istio_headers: {} }]
                downstream_propagation: [{ istio_headers: {} }]
          - name: istio.stats
            typed_config:
              "@type": type.googleapis.com/stats.PluginConfig
              disable_host_header_fallback: true"""

# The node an Istio sidecar's bootstrap names, and the listener's direction: what the
# telemetry filters report as.
ISTIO_NODE = """node:
  id: sidecar~10.0.3.7~ratings-v1-5d8c7f9b6-x2k4q.bookinfo~bookinfo.svc.cluster.local
  metadata: """ + open(os.path.join(ROOT, "tests/data/istio_peer_metadata/node_metadata.json")).read().replace("\n", " ") + "\n"

# What a peer sidecar sends: Istio's header for that node (tests/data/istio_peer_metadata).
PEER_HEADERS = [
    "x-envoy-peer-metadata: " + open(os.path.join(ROOT, "tests/data/istio_peer_metadata/exchanged.b64")).read().strip(),
    "x-envoy-peer-metadata-id: sidecar~10.0.0.1~productpage-v1-6b746f74dc-9stvs.default~default.svc.cluster.local",
]


def bootstrap(filters, istio=False):
    base = open(os.path.join(HERE, "proxy-bootstrap.yaml")).read()
    if istio:
        base = ISTIO_NODE + base.replace("  - name: ingress\n", "  - name: ingress\n    traffic_direction: INBOUND\n", 1)
    marker = "          http_filters:\n"
    return base.replace(marker, marker + filters.lstrip("\n") + "\n" if filters else marker)


def wait_port(port, seconds=20):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} not listening")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(proxy, config):
    if proxy == "envoy":
        args = [os.path.join(HERE, ".envoy/bin/envoy"), "-c", config, "--concurrency", "1", "--log-level", "error",
                "--disable-hot-restart", "--use-dynamic-base-id"]
        env = os.environ
    else:
        binary = os.environ.get("OUTRIDER_BIN", os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                                                          "dist/outrider"))
        args = [binary, "run", "--config", config, "--concurrency", "1"]
        env = {**os.environ, "RUST_LOG": "error"}
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait_port(PORT)
    time.sleep(0.5)
    return process


def wrk(headers, seconds):
    args = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s"]
    for h in headers:
        args += ["-H", h]
    args.append(f"http://127.0.0.1:{PORT}/api/v49/items")
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return requests, int(non_2xx.group(1)) if non_2xx else 0


def measure(proxy, filters, headers, tmp, istio=False):
    config = os.path.join(tmp, f"{proxy}.yaml")
    open(config, "w").write(bootstrap(filters, istio))
    process = start(proxy, config)
    try:
        wrk(headers, 2)  # warm-up
        before = cpu_seconds(process.pid)
        requests, bad = wrk(headers, SECS)
        cpu = cpu_seconds(process.pid) - before
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
    if bad:
        raise RuntimeError(f"{proxy}: {bad} of {requests} responses were not 2xx: the filter refused the benchmark")
    return requests / SECS, cpu * 1e6 / requests


def main():
    ensure_tools()
    jwks, rs256, es256 = keys_and_tokens()
    nginx = subprocess.Popen(["nginx", "-c", os.path.join(HERE, "nginx.conf"), "-p", "/tmp"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    variants = [
        ("no filter", "", []),
        ("RBAC, 50 policies", rbac_filter(), ["x-user: user-49"]),
        ("JWT RS256", jwt_filter(json.loads(jwks)), [f"authorization: Bearer {rs256}"]),
        ("JWT ES256", jwt_filter(json.loads(jwks)), [f"authorization: Bearer {es256}"]),
        ("JWT RS256, jwt_cache_config", jwt_filter(json.loads(jwks), cache=True), [f"authorization: Bearer {rs256}"]),
        ("JWT ES256, jwt_cache_config", jwt_filter(json.loads(jwks), cache=True), [f"authorization: Bearer {es256}"]),
        ("local rate limit", LOCAL_RATELIMIT, []),
        ("Istio telemetry (metadata exchange + istio.stats)", ISTIO_TELEMETRY, PEER_HEADERS),
    ]
    only = [p for p in os.environ.get("FILTER_BENCH_ONLY", "").split(",") if p]
    if only:
        variants = [v for v in variants if v[0] == "no filter" or any(v[0].startswith(p) for p in only)]
    outrider_only = {"Istio telemetry (metadata exchange + istio.stats)"}
    results = {}
    try:
        wait_port(18080)
        with tempfile.TemporaryDirectory() as tmp:
            for name, filters, headers in variants:
                for proxy in ("outrider",) if name in outrider_only else ("envoy", "outrider"):
                    results[(name, proxy)] = measure(proxy, filters, headers, tmp, istio=name in outrider_only)
    finally:
        nginx.terminate()
    print(f"wrk -t1 -c{CONNECTIONS} -d{SECS}s, HTTP/1.1 keep-alive, one worker each; CPU µs per request from /proc")
    print()
    print("| variant | Envoy req/s | Envoy CPU µs/req | Envoy filter cost | Outrider req/s | Outrider CPU µs/req "
          "| Outrider filter cost | relative cost Outrider / Envoy |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    base = {p: results[("no filter", p)][1] for p in ("envoy", "outrider")}
    for name, _, _ in variants:
        row = [name]
        relative = {}
        if name in outrider_only:
            rps, cpu = results[(name, "outrider")]
            cost = cpu - base["outrider"]
            row += ["not in Envoy 1.40", "—", "—", f"{rps:,.0f}", f"{cpu:.1f}",
                    f"{cost:+.1f} µs ({cost / base['outrider']:+.0%})", f"cost / Envoy's baseline: {cost / base['envoy']:+.0%}"]
            print("| " + " | ".join(row) + " |")
            continue
        for proxy in ("envoy", "outrider"):
            rps, cpu = results[(name, proxy)]
            cost = cpu - base[proxy]
            relative[proxy] = cost / base[proxy]
            row += [f"{rps:,.0f}", f"{cpu:.1f}", "—" if name == "no filter" else f"{cost:+.1f} µs ({relative[proxy]:+.0%})"]
        if name == "no filter":
            row.append("—")
        elif relative["envoy"] > 0:
            row.append(f"{relative['outrider'] / relative['envoy']:.2f}")
        else:
            row.append("n/a")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
