#!/usr/bin/env python3
"""What the stats cost at mesh scale, Envoy 1.40 and Outrider side by side.

The start-up harness's shape (`bench/startup.py`: the lab's file-backed ADS server, Delta
xDS, one listener, one virtual host per cluster), with N EDS clusters of M endpoints each
(ports BACKEND_PORT .. BACKEND_PORT+M-1 on loopback, all served by `outrider lab-backend`).
Each proxy runs twice: with no `stats_config`, and with the stats matcher Istio's bootstrap
template writes by default (its inclusion list of prefixes, suffixes and the route regex).
Once a request for the last cluster's virtual host answers 200, measured:

  series      - samples (non-comment lines) in one `/stats/prometheus` scrape;
  scrape_kib  - that scrape's size;
  rss_mib     - resident memory after the scrape.

    bench/stats-scale.py --outrider target/dist/outrider --envoy bench/.envoy/bin/envoy \
        [--clusters 5000] [--endpoints 10]
"""
import argparse
import http.client
import os
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "lab"))
sys.path.insert(0, here)
import config  # noqa: E402  the lab's ports and bootstrap
from startup import get, rss_kib, stop  # noqa: E402

BACKEND_PORT = 18311
TICK = 0.01

# Istio's `requiredEnvoyStatsMatcherInclusionPrefixes`, RBAC suffixes and route regex, and
# the template's own `reporter=`, `component` and `istio` prefixes
# (tools/packaging/common/envoy_bootstrap.json, pkg/bootstrap/config.go).
ISTIO_STATS_CONFIG = r"""
stats_config:
  use_all_default_tags: false
  stats_matcher:
    inclusion_list:
      patterns:
      - prefix: "reporter="
      - prefix: cluster_manager
      - prefix: listener_manager
      - prefix: server
      - prefix: cluster.xds-grpc
      - prefix: wasm
      - suffix: rbac.allowed
      - suffix: rbac.denied
      - suffix: shadow_allowed
      - suffix: shadow_denied
      - safe_regex: { regex: "vhost\\..*\\.route\\..*" }
      - prefix: component
      - prefix: istio
"""


def resources(clusters, endpoints):
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "scale",
        "rds": {"route_config_name": "routes", "config_source": {"ads": {}, "resource_api_version": "V3"}},
        "http_filters": [{"name": "envoy.filters.http.router",
                          "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}],
    }
    out = [
        {"@type": "type.googleapis.com/envoy.config.listener.v3.Listener", "name": "scale",
         "address": {"socket_address": {"address": "127.0.0.1", "port_value": config.LISTEN_PORT}},
         "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}]},
        {"@type": "type.googleapis.com/envoy.config.route.v3.RouteConfiguration", "name": "routes",
         "virtual_hosts": [{"name": f"svc-{k}", "domains": [f"svc-{k}.local"],
                            "routes": [{"match": {"prefix": "/"}, "route": {"cluster": f"svc-{k}"}}]}
                           for k in range(clusters)]},
    ]
    lb_endpoints = [{"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": BACKEND_PORT + i}}}}
                    for i in range(endpoints)]
    for k in range(clusters):
        out.append({"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": f"svc-{k}", "type": "EDS",
                    "connect_timeout": "1s", "lb_policy": "LEAST_REQUEST",
                    "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}}})
        out.append({"@type": "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
                    "cluster_name": f"svc-{k}", "endpoints": [{"lb_endpoints": lb_endpoints}]})
    return {"resources": out}


def scrape(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("GET", "/stats/prometheus")
    body = conn.getresponse().read()
    conn.close()
    return body


def run_once(command, last_host, limit=300.0):
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while get(config.LISTEN_PORT, "/", last_host) != 200:
            if time.monotonic() - started > limit:
                raise RuntimeError(f"{command[0]} did not route within {limit} s")
            time.sleep(TICK)
        body = scrape(config.ADMIN_PORT)
        series = sum(1 for line in body.split(b"\n") if line and not line.startswith(b"#"))
        return {"series": series, "scrape_kib": len(body) / 1024, "rss_mib": rss_kib(proc.pid) / 1024}
    finally:
        stop(proc)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--outrider", required=True)
    parser.add_argument("--envoy", required=True)
    parser.add_argument("--clusters", type=int, default=5000)
    parser.add_argument("--endpoints", type=int, default=10)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="stats-scale-")
    scenario = os.path.join(work, "scenario.yaml")
    with open(scenario, "w") as f:
        f.write("backends:\n" + "".join(f"  - {{ name: b{i}, port: {BACKEND_PORT + i} }}\n" for i in range(args.endpoints)))
    resources_path = os.path.join(work, "resources.json")
    config.write_json(resources_path, resources(args.clusters, args.endpoints))
    bootstraps = {}
    for matcher, extra in [("none", ""), ("istio", ISTIO_STATS_CONFIG)]:
        bootstraps[matcher] = os.path.join(work, f"bootstrap-{matcher}.yaml")
        with open(bootstraps[matcher], "w") as f:
            f.write(config.bootstrap() + extra)
    server = subprocess.Popen([args.outrider, "lab-backend", "--scenario", scenario,
                               "--xds-address", f"127.0.0.1:{config.XDS_PORT}", "--resources", resources_path],
                              stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "server.log"), "w"))
    commands = {
        "envoy": lambda b: [args.envoy, "-c", b, "--concurrency", "1", "--log-level", "error",
                            "--disable-hot-restart", "--use-dynamic-base-id"],
        "outrider": lambda b: [args.outrider, "run", "--config", b, "--concurrency", "1"],
    }
    results = {}
    try:
        for _ in range(100):
            if get(BACKEND_PORT, "/") == 200:
                break
            time.sleep(0.1)
        last_host = f"svc-{args.clusters - 1}.local"
        for matcher, bootstrap in bootstraps.items():
            for name, command in commands.items():
                results[(name, matcher)] = run_once(command(bootstrap), last_host)
    finally:
        server.terminate()
        server.wait()
    print(f"| {args.clusters} clusters × {args.endpoints} endpoints | stats matcher | Envoy 1.40 | Outrider | Outrider/Envoy |")
    print("| --- | --- | --- | --- | --- |")
    for matcher in bootstraps:
        for measure in ["series", "scrape_kib", "rss_mib"]:
            e, o = results[("envoy", matcher)][measure], results[("outrider", matcher)][measure]
            print(f"| {measure} | {matcher} | {e:.{0 if measure == 'series' else 1}f} | {o:.{0 if measure == 'series' else 1}f} | {o / e:.3f} |")


if __name__ == "__main__":
    main()
