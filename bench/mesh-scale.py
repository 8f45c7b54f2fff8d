#!/usr/bin/env python3
"""A 5 000-service mesh, Envoy 1.40 and Outrider side by side, one worker each.

The configuration is shaped as istiod renders it for a sidecar: N EDS clusters named
`outbound|80||svc-K.ns-J.svc.cluster.local` with Istio's circuit breakers, metadata and
locality-weighted balancing; their N load assignments (M endpoints each, in a locality,
with Istio's workload metadata); one route configuration `80` of N virtual hosts with
Istio's domain spellings (FQDN, short name, `name.ns`, `name.ns.svc`, the service VIP)
and its default retry policy, plus the `allow_any` virtual host `*`; and Istio's stats
matcher in the bootstrap. Two deliveries:

  delta   - Delta ADS from the lab's file-backed control plane (`outrider lab-backend`);
  static  - the same listener, routes, clusters (STATIC, endpoints inline) in a bootstrap.

For each delivery and proxy, one after the other on a fresh process:

  ready_s        - from start until a request for the last virtual host answers 200;
  rss_mib        - resident memory then;
  rps_first      - wrk, HTTP/1.1, 50 connections, to the first virtual host: requests/s;
  rps_last       - the same to the last virtual host;
  rps_cpu_first  - requests per proxy CPU-second (user + system), first virtual host;
  rps_cpu_last   - the same, last virtual host;
  rss_loaded_mib - resident memory after both runs;
  eds_ms         - (delta only) median over several changes of one cluster's endpoints:
                   from the control plane logging the change until a request through
                   that cluster reaches the new endpoint.

    bench/mesh-scale.py --outrider target/dist/outrider --envoy bench/.envoy/bin/envoy \
        [--services 5000] [--endpoints 10] [--duration 10] [--deliveries delta,static]

(bench/mesh-scale.sh installs what is missing, builds Outrider and runs this.)

Needs wrk. Prints markdown tables; standard library only.
"""
import argparse
import datetime
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "lab"))
sys.path.insert(0, here)
import config  # noqa: E402  the lab's ports and bootstrap
from startup import cpu_seconds, rss_kib, stop  # noqa: E402

BACKEND_PORT = 18411
NAMESPACES = 50
TICK = 0.01
EDS_CHANGES = 5

# Istio's bootstrap stats matcher (its inclusion list of prefixes, suffixes and the route
# regex; the same list bench/stats-scale.py uses).
ISTIO_STATS = {"use_all_default_tags": False, "stats_matcher": {"inclusion_list": {"patterns": [
    {"prefix": "reporter="}, {"prefix": "cluster_manager"}, {"prefix": "listener_manager"}, {"prefix": "server"},
    {"prefix": "cluster.xds-grpc"}, {"prefix": "wasm"}, {"suffix": "rbac.allowed"}, {"suffix": "rbac.denied"},
    {"suffix": "shadow_allowed"}, {"suffix": "shadow_denied"}, {"safe_regex": {"regex": "vhost\\..*\\.route\\..*"}},
    {"prefix": "component"}, {"prefix": "istio"}]}}}

HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER = {"name": "envoy.filters.http.router",
          "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}


def service(k):
    """Service k's name, namespace and FQDN."""
    name, namespace = f"svc-{k}", f"ns-{k % NAMESPACES}"
    return name, namespace, f"{name}.{namespace}.svc.cluster.local"


def cluster_name(k):
    return f"outbound|80||{service(k)[2]}"


def host_of(k):
    return service(k)[2]


def vip(k):
    return f"10.{96 + k // 65536}.{k // 256 % 256}.{k % 256}"


def virtual_host(k):
    name, namespace, fqdn = service(k)
    return {
        "name": f"{fqdn}:80",
        "domains": [fqdn, name, f"{name}.{namespace}", f"{name}.{namespace}.svc", vip(k)],
        "routes": [{
            "name": "default",
            "match": {"prefix": "/"},
            "decorator": {"operation": f"{fqdn}:80/*"},
            "route": {
                "cluster": cluster_name(k),
                "timeout": "0s",
                "max_grpc_timeout": "0s",
                "retry_policy": {
                    "retry_on": "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
                    "num_retries": 2,
                    "retry_host_predicate": [{"name": "envoy.retry_host_predicates.previous_hosts", "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"}}],
                    "host_selection_retry_max_attempts": "5",
                    "retriable_status_codes": [503],
                },
            },
        }],
        "include_request_attempt_count": True,
    }


def route_configuration(services):
    allow_any = {"name": "allow_any", "domains": ["*"],
                 "routes": [{"name": "allow_any", "match": {"prefix": "/"},
                             "direct_response": {"status": 502}}]}
    return {"name": "80", "validate_clusters": False, "ignore_port_in_host_matching": True,
            "virtual_hosts": [virtual_host(k) for k in range(services)] + [allow_any]}


def lb_endpoints(ports, k):
    name, namespace, _ = service(k)
    return [{"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}},
             "metadata": {"filter_metadata": {"istio": {"workload": f"{name};{namespace};{name};v1;Kubernetes"}}},
             "load_balancing_weight": 1} for port in ports]


def load_assignment(k, ports):
    return {"cluster_name": cluster_name(k),
            "endpoints": [{"locality": {"region": "r1", "zone": "z1"}, "lb_endpoints": lb_endpoints(ports, k)}]}


def cluster(k, static_ports=None):
    name, namespace, fqdn = service(k)
    out = {
        "name": cluster_name(k),
        "connect_timeout": "10s",
        "lb_policy": "LEAST_REQUEST",
        "circuit_breakers": {"thresholds": [{"max_connections": 4294967295, "max_pending_requests": 4294967295,
                                             "max_requests": 4294967295, "max_retries": 4294967295,
                                             "track_remaining": True}]},
        "common_lb_config": {"locality_weighted_lb_config": {}},
        "metadata": {"filter_metadata": {"istio": {"services": [{"host": fqdn, "name": name, "namespace": namespace}],
                                                    "default_original_port": 80}}},
    }
    if static_ports is None:
        out["type"] = "EDS"
        out["eds_cluster_config"] = {"eds_config": {"ads": {}, "initial_fetch_timeout": "0s",
                                                    "resource_api_version": "V3"},
                                     "service_name": cluster_name(k)}
    else:
        out["type"] = "STATIC"
        out["load_assignment"] = load_assignment(k, static_ports)
    return out


def listener(route_config=None):
    hcm = {"@type": HCM, "stat_prefix": "outbound_0.0.0.0_80", "http_filters": [ROUTER],
           "use_remote_address": False, "normalize_path": True}
    if route_config is None:
        hcm["rds"] = {"route_config_name": "80", "config_source": {"ads": {}, "initial_fetch_timeout": "0s",
                                                                   "resource_api_version": "V3"}}
    else:
        hcm["route_config"] = route_config
    return {"name": "0.0.0.0_80",
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": config.LISTEN_PORT}},
            "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                            "typed_config": hcm}]}]}


def delta_resources(services, ports, changed=None):
    """The control plane's resources; `changed` = (service, ports) moves one service."""
    t = "type.googleapis.com/envoy.config."
    out = [dict(listener(), **{"@type": t + "listener.v3.Listener"}),
           dict(route_configuration(services), **{"@type": t + "route.v3.RouteConfiguration"})]
    for k in range(services):
        out.append(dict(cluster(k), **{"@type": t + "cluster.v3.Cluster"}))
        mine = changed[1] if changed and changed[0] == k else ports
        out.append(dict(load_assignment(k, mine), **{"@type": t + "endpoint.v3.ClusterLoadAssignment"}))
    return {"resources": out}


def static_bootstrap(services, ports):
    return {
        "node": {"id": "sidecar~127.0.0.1~mesh-1.default~default.svc.cluster.local", "cluster": "mesh"},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": config.ADMIN_PORT}}},
        "static_resources": {"listeners": [listener(route_configuration(services))],
                             "clusters": [cluster(k, ports) for k in range(services)]},
    }


def fetch(port, host, timeout=2):
    """(status, body) of GET / with `host`, or (0, b"") when nothing answers."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request("GET", "/", headers={"host": host})
        response = conn.getresponse()
        out = (response.status, response.read())
        conn.close()
        return out
    except OSError:
        return (0, b"")


def wrk(host, duration):
    out = subprocess.run(["wrk", "-t1", "-c50", f"-d{duration}s", "-H", f"Host: {host}",
                          f"http://127.0.0.1:{config.LISTEN_PORT}/"],
                         capture_output=True, text=True, check=True).stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return requests, int(non2xx.group(1)) if non2xx else 0


def log_time(line):
    """The UTC timestamp a log line of the lab's control plane starts with, as a float."""
    stamp = line.split()[0].rstrip("Z")
    return datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.timezone.utc).timestamp()


def reloads(server_log):
    with open(server_log) as f:
        return [log_time(line) for line in f if "resources reloaded" in line]


def eds_changes(services, ports, new_port, resources_path, server_log):
    """Moves one service between its endpoints and `new_port`, EDS_CHANGES times; each
    time, from the control plane's reload to the first response of the new endpoint."""
    k = services // 2
    host = host_of(k)
    out = []
    for change in range(EDS_CHANGES):
        to_new = change % 2 == 0
        want = b"bnew:" if to_new else b"b"
        before = len(reloads(server_log))
        config.write_json(resources_path, delta_resources(services, ports, (k, [new_port]) if to_new else None))
        conn = http.client.HTTPConnection("127.0.0.1", config.LISTEN_PORT, timeout=5)
        arrived = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            conn.request("GET", "/", headers={"host": host})
            body = conn.getresponse().read()
            if body.startswith(want) and (to_new or not body.startswith(b"bnew:")):
                arrived = time.time()
                break
        conn.close()
        stamps = reloads(server_log)
        if arrived is None or len(stamps) <= before:
            raise RuntimeError("the EDS change did not reach traffic")
        out.append((arrived - stamps[before]) * 1000)
    return statistics.median(out)


def run_once(command, services, duration, eds=None, limit=600.0):
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first, last = host_of(0), host_of(services - 1)
    try:
        while fetch(config.LISTEN_PORT, last)[0] != 200:
            if proc.poll() is not None or time.monotonic() - started > limit:
                raise RuntimeError(f"{command[0]} did not route within {limit} s")
            time.sleep(TICK)
        result = {"ready_s": time.monotonic() - started}
        time.sleep(1)
        result["rss_mib"] = rss_kib(proc.pid) / 1024
        for label, host in [("first", first), ("last", last)]:
            cpu = cpu_seconds(proc.pid)
            requests, failed = wrk(host, duration)
            cpu = cpu_seconds(proc.pid) - cpu
            if failed:
                raise RuntimeError(f"{failed} requests to {host} failed")
            result[f"rps_{label}"] = requests / duration
            result[f"rps_cpu_{label}"] = requests / cpu if cpu else 0.0
        result["rss_loaded_mib"] = rss_kib(proc.pid) / 1024
        if eds:
            result["eds_ms"] = eds()
        return result
    finally:
        stop(proc)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--outrider", required=True)
    parser.add_argument("--envoy", required=True)
    parser.add_argument("--services", type=int, default=5000)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--deliveries", default="delta,static")
    parser.add_argument("--proxies", default="envoy,outrider")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="mesh-scale-")
    ports = [BACKEND_PORT + i for i in range(args.endpoints)]
    new_port = BACKEND_PORT + args.endpoints
    scenario = os.path.join(work, "scenario.yaml")
    with open(scenario, "w") as f:
        f.write("backends:\n" + "".join(f"  - {{ name: b{i}, port: {p} }}\n" for i, p in enumerate(ports))
                + f"  - {{ name: bnew, port: {new_port} }}\n")
    resources_path = os.path.join(work, "resources.json")
    config.write_json(resources_path, delta_resources(args.services, ports))
    bootstraps = {"delta": os.path.join(work, "delta.yaml"), "static": os.path.join(work, "static.json")}
    with open(bootstraps["delta"], "w") as f:
        # YAML reads JSON: the stats matcher is appended as one flow mapping.
        f.write(config.bootstrap() + "stats_config: " + json.dumps(ISTIO_STATS) + "\n")
    static = static_bootstrap(args.services, ports)
    static["stats_config"] = ISTIO_STATS
    config.write_json(bootstraps["static"], static)
    server_log = os.path.join(work, "server.log")
    server = subprocess.Popen([args.outrider, "lab-backend", "--scenario", scenario,
                               "--xds-address", f"127.0.0.1:{config.XDS_PORT}", "--resources", resources_path],
                              stdout=subprocess.DEVNULL, stderr=open(server_log, "w"))
    commands = {
        "envoy": lambda b: [args.envoy, "-c", b, "--concurrency", "1", "--log-level", "error",
                            "--disable-hot-restart", "--use-dynamic-base-id"],
        "outrider": lambda b: [args.outrider, "run", "--config", b, "--concurrency", "1"],
    }
    proxies = args.proxies.split(",")
    deliveries = args.deliveries.split(",")
    results = {}
    try:
        for _ in range(100):
            if fetch(BACKEND_PORT, "x")[0] == 200:
                break
            time.sleep(0.1)
        for delivery in deliveries:
            for name in proxies:
                eds = None
                if delivery == "delta":
                    def eds():
                        return eds_changes(args.services, ports, new_port, resources_path, server_log)
                results[(name, delivery)] = run_once(commands[name](bootstraps[delivery]), args.services,
                                                     args.duration, eds)
                config.write_json(resources_path, delta_resources(args.services, ports))
    finally:
        server.terminate()
        server.wait()
    print(f"| {args.services} services × {args.endpoints} endpoints | delivery | "
          + " | ".join({"envoy": "Envoy 1.40", "outrider": "Outrider"}[p] for p in proxies)
          + (" | Outrider/Envoy |" if len(proxies) == 2 else " |"))
    print("| --- | --- |" + " --- |" * (len(proxies) + (len(proxies) == 2)))
    for delivery in deliveries:
        for measure in ["ready_s", "rss_mib", "rss_loaded_mib", "rps_first", "rps_last", "rps_cpu_first",
                        "rps_cpu_last", "eds_ms"]:
            values = [results[(p, delivery)].get(measure) for p in proxies]
            if any(v is None for v in values):
                continue
            row = f"| {measure} | {delivery} | " + " | ".join(f"{v:.1f}" for v in values)
            if len(proxies) == 2:
                row += f" | {values[1] / values[0]:.2f}" if values[0] else " | —"
            print(row + " |")
    print(json.dumps({f"{p}/{d}": r for (p, d), r in results.items()}), file=open(os.path.join(work, "runs.json"), "w"))
    print(f"(runs: {work}/runs.json)")


if __name__ == "__main__":
    main()
