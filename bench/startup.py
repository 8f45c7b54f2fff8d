#!/usr/bin/env python3
"""Start-up time to ready with many clusters, Envoy 1.40 and Outrider side by side.

One control plane (`outrider lab-backend --xds-address`, the scenario lab's file-backed ADS
server) serves N EDS clusters with one endpoint each, their N load assignments, one
listener, and a route configuration with one virtual host per cluster (`svc-K.local`), the
shape istiod gives a sidecar. Each proxy is started with the lab's bootstrap (Delta ADS);
measured from the process start:

  ready   - the admin `/ready` answers 200 (Envoy: server LIVE, after its init targets);
  routed  - a request for the last cluster's virtual host through the listener answers 200
            (every resource applied, that cluster's balancer and pool working);
  cpu     - user + system CPU seconds the proxy used until `routed`;
  rss     - resident memory at `routed`.

Runs alternate between the proxies; the table shows each measure's median.

    bench/startup.py --outrider target/dist/outrider --envoy bench/.envoy/bin/envoy \
        [--clusters 1000] [--runs 5]
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lab"))
import config  # noqa: E402  the lab's ports and bootstrap

BACKEND_PORT = 18311
TICK = 0.002


def resources(clusters):
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "startup",
        "rds": {"route_config_name": "routes", "config_source": {"ads": {}, "resource_api_version": "V3"}},
        "http_filters": [{"name": "envoy.filters.http.router",
                          "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}],
    }
    out = [
        {"@type": "type.googleapis.com/envoy.config.listener.v3.Listener", "name": "startup",
         "address": {"socket_address": {"address": "127.0.0.1", "port_value": config.LISTEN_PORT}},
         "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}]},
        {"@type": "type.googleapis.com/envoy.config.route.v3.RouteConfiguration", "name": "routes",
         "virtual_hosts": [{"name": f"svc-{k}", "domains": [f"svc-{k}.local"],
                            "routes": [{"match": {"prefix": "/"}, "route": {"cluster": f"svc-{k}"}}]}
                           for k in range(clusters)]},
    ]
    for k in range(clusters):
        out.append({"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": f"svc-{k}", "type": "EDS",
                    "connect_timeout": "1s", "lb_policy": "LEAST_REQUEST",
                    "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}}})
        out.append({"@type": "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
                    "cluster_name": f"svc-{k}",
                    "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {
                        "address": "127.0.0.1", "port_value": BACKEND_PORT}}}}]}]})
    return {"resources": out}


def get(port, path, host="x"):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        conn.request("GET", path, headers={"host": host})
        status = conn.getresponse().status
        conn.close()
        return status
    except OSError:
        return 0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    return 0


def stop(proc):
    """Ends a proxy: SIGTERM, SIGKILL after 10 s, then a pause so that its ports are free."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    time.sleep(0.5)


def run_once(command, last_host, limit=120.0):
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ready = routed = None
    try:
        while time.monotonic() - started < limit:
            now = time.monotonic() - started
            if ready is None and get(config.ADMIN_PORT, "/ready") == 200:
                ready = now
            if ready is not None and get(config.LISTEN_PORT, "/", last_host) == 200:
                routed = time.monotonic() - started
                break
            time.sleep(TICK)
        if routed is None:
            raise RuntimeError(f"{command[0]} did not route within {limit} s")
        return {"ready_ms": ready * 1000, "routed_ms": routed * 1000,
                "cpu_s": cpu_seconds(proc.pid), "rss_kib": rss_kib(proc.pid)}
    finally:
        stop(proc)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--outrider", required=True)
    parser.add_argument("--envoy", required=True)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="startup-")
    scenario = os.path.join(work, "scenario.yaml")
    with open(scenario, "w") as f:
        f.write(f"backends:\n  - {{ name: svc, port: {BACKEND_PORT} }}\n")
    resources_path = os.path.join(work, "resources.json")
    config.write_json(resources_path, resources(args.clusters))
    bootstrap = os.path.join(work, "bootstrap.yaml")
    with open(bootstrap, "w") as f:
        f.write(config.bootstrap())
    server = subprocess.Popen([args.outrider, "lab-backend", "--scenario", scenario,
                               "--xds-address", f"127.0.0.1:{config.XDS_PORT}", "--resources", resources_path],
                              stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "server.log"), "w"))
    commands = {
        "envoy": [args.envoy, "-c", bootstrap, "--concurrency", "1", "--log-level", "error",
                  "--disable-hot-restart", "--use-dynamic-base-id"],
        "outrider": [args.outrider, "run", "--config", bootstrap, "--concurrency", "1"],
    }
    results = {name: [] for name in commands}
    try:
        for _ in range(100):
            if get(BACKEND_PORT, "/") == 200:
                break
            time.sleep(0.1)
        last_host = f"svc-{args.clusters - 1}.local"
        for _ in range(args.runs):
            for name, command in commands.items():
                results[name].append(run_once(command, last_host))
    finally:
        server.terminate()
        server.wait()
    print(f"| {args.clusters} clusters, median of {args.runs} | Envoy 1.40 | Outrider | Outrider/Envoy |")
    print("| --- | --- | --- | --- |")
    for measure in ["ready_ms", "routed_ms", "cpu_s", "rss_kib"]:
        e = statistics.median(r[measure] for r in results["envoy"])
        o = statistics.median(r[measure] for r in results["outrider"])
        print(f"| {measure} | {e:.2f} | {o:.2f} | {o / e:.2f} |")
    print(json.dumps(results), file=open(os.path.join(work, "runs.json"), "w"))
    print(f"(runs: {work}/runs.json)")


if __name__ == "__main__":
    main()
