"""The server sidecar's load report, per request, end to end: a caller sidecar (OUTBOUND
listener, mutual TLS upstream) in front of a server sidecar (INBOUND listener) in front of
nginx, the same proxy on both sides, a fixed request rate; the CPU time each sidecar
process spent per request, from /proc/<pid>/stat. Three cases, alternately, in rounds:
  outrider reports  the caller asks for load reports (the default), the server adds one
                    to every answer and the caller reads and removes it
  outrider none     the caller's node metadata says OUTRIDER_LOAD_REPORT: off (no ask,
                    so no report; the server still counts its requests)
  envoy             Envoy 1.40 on both sides (no reports: Envoy has none to give)
The server sidecar runs on CPU 1; nginx, the caller and the load on CPU 0.

    bench/.venv/bin/python bench/load-report-cost.py [--rate 2000] [--seconds 15] [--rounds 3]

Needs nginx, oha and openssl; Envoy from bench/install-envoy.sh; Outrider built with
`cargo build --profile dist` (or OUTRIDER_BIN).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lab"))
import two_hop  # noqa: E402

ROOT = os.path.dirname(HERE)
NGINX_PORT = 18080
SERVER_INDEX = 40  # the server sidecar's admin port: two_hop.ADMIN_BASE + this
CALLER_PORT = 19250
CALLER_ADMIN = 19251
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def wait_ready(port):
    for _ in range(200):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"admin :{port} never became ready")


def caller_bootstrap(files, reports):
    metadata = {} if reports else {"OUTRIDER_LOAD_REPORT": "off"}
    hop = two_hop.upstream_transport(files)
    return {
        "node": {"id": "sidecar~127.0.0.1~caller.default~default.svc.cluster.local", "cluster": "caller",
                 "metadata": metadata},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": CALLER_ADMIN}}},
        "static_resources": {
            "listeners": [{
                "name": "outbound", "traffic_direction": "OUTBOUND",
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": CALLER_PORT}},
                "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                    "stat_prefix": "outbound",
                    "route_config": {"name": "r", "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [
                        {"match": {"prefix": "/"}, "route": {"cluster": "server"}}]}]},
                    "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]}}]}],
            }],
            "clusters": [dict({
                "name": "server", "type": "STATIC", "connect_timeout": "1s",
                "load_assignment": {"cluster_name": "server", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
                    "socket_address": {"address": "127.0.0.1",
                                       "port_value": NGINX_PORT + two_hop.SIDECAR_OFFSET}}}}]}]},
            }, **hop)],
        },
    }


def command(proxy, path, envoy, outrider):
    if proxy == "envoy":
        return [envoy, "-c", path, "--concurrency", "1", "--log-level", "error", "--disable-hot-restart",
                "--use-dynamic-base-id"]
    return [outrider, "run", "--config", path, "--concurrency", "1"]


def one(case, args, files, tools, out):
    proxy = "envoy" if case == "envoy" else "outrider"
    server_path = os.path.join(out, "server.json")
    caller_path = os.path.join(out, f"caller-{case}.json")
    with open(server_path, "w") as f:
        json.dump(two_hop.sidecar_bootstrap(SERVER_INDEX, NGINX_PORT, files, False, in_pod=True), f)
    with open(caller_path, "w") as f:
        json.dump(caller_bootstrap(files, case != "outrider none"), f)
    env = dict(os.environ, RUST_LOG="error")
    server = subprocess.Popen(["taskset", "-c", "1"] + command(proxy, server_path, *tools[:2]), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    caller = subprocess.Popen(["taskset", "-c", "0"] + command(proxy, caller_path, *tools[:2]), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(two_hop.ADMIN_BASE + SERVER_INDEX)
        wait_ready(CALLER_ADMIN)
        # Warm the connections, then measure.
        subprocess.run([tools[2], "--no-tui", "-n", "200", "-c", "10", f"http://127.0.0.1:{CALLER_PORT}/"],
                       check=True, capture_output=True)
        s0, c0 = cpu_seconds(server.pid), cpu_seconds(caller.pid)
        result = subprocess.run(
            ["taskset", "-c", "0", tools[2], "--no-tui", "--output-format", "json", "-z", f"{args.seconds}s",
             "-q", str(args.rate), "-c", "50", f"http://127.0.0.1:{CALLER_PORT}/"],
            check=True, capture_output=True, text=True)
        s1, c1 = cpu_seconds(server.pid), cpu_seconds(caller.pid)
        summary = json.loads(result.stdout)
        codes = summary.get("statusCodeDistribution", {})
        requests = sum(codes.values())
        ok = codes.get("200", 0)
        return {"requests": requests, "ok": ok, "server_us": 1e6 * (s1 - s0) / max(1, requests),
                "caller_us": 1e6 * (c1 - c0) / max(1, requests)}
    finally:
        for p in (caller, server):
            p.terminate()
            p.wait(10)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    envoy = os.path.join(HERE, ".envoy", "bin", "envoy")
    outrider = os.environ.get("OUTRIDER_BIN", os.path.join(ROOT, "target", "dist", "outrider"))
    oha = subprocess.run(["sh", "-c", "command -v oha"], capture_output=True, text=True).stdout.strip()
    if not (os.path.exists(envoy) and os.path.exists(outrider) and oha):
        sys.exit("needs bench/.envoy/bin/envoy (bench/install-envoy.sh), outrider (cargo build --profile dist) and oha")
    out = tempfile.mkdtemp(prefix="load-report-cost-")
    files = two_hop.certificates(out)
    nginx = subprocess.Popen(["taskset", "-c", "0", "nginx", "-c", os.path.join(HERE, "nginx.conf"), "-p", "/tmp"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cases = ["outrider reports", "outrider none", "envoy"]
    measured = {case: [] for case in cases}
    try:
        time.sleep(0.5)
        for round_ in range(args.rounds):
            for case in cases:
                r = one(case, args, files, (envoy, outrider, oha), out)
                measured[case].append(r)
                print(f"round {round_ + 1} {case:17} {r['requests']} requests ({r['ok']} ok): server sidecar "
                      f"{r['server_us']:.1f} µs, caller {r['caller_us']:.1f} µs per request", flush=True)
    finally:
        nginx.terminate()
        nginx.wait(10)
    print()
    print("| case | server sidecar CPU µs per request (median of rounds) | caller sidecar | rounds (server) |")
    print("| --- | --- | --- | --- |")
    for case in cases:
        server = sorted(r["server_us"] for r in measured[case])
        caller = sorted(r["caller_us"] for r in measured[case])
        print(f"| {case} | {server[len(server) // 2]:.1f} | {caller[len(caller) // 2]:.1f} | "
              f"{', '.join(f'{x:.1f}' for x in server)} |")


if __name__ == "__main__":
    main()
