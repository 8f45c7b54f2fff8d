"""One lab run: the scenario's backends and control plane, one proxy with one policy, and
the load, on one machine. The backends and the load generator share CPU 0, the proxy has
CPU 1 to itself (taskset), when the machine has two CPUs or more.
"""

import json
import os
import signal
import subprocess
import time
import urllib.request

import config
import pods
import two_hop


def cpus(which):
    """taskset prefix for CPU `which` (0: backends and load, 1: proxy), if there is one."""
    if os.cpu_count() and os.cpu_count() >= 2:
        return ["taskset", "-c", str(which)]
    return []


def wait_ready(url, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def stop(process, seconds=15):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def proxy_command(proxy, tools, bootstrap_path):
    if proxy == "envoy":
        return [tools["envoy"], "-c", bootstrap_path, "--concurrency", "1", "--log-level", "error",
                "--disable-hot-restart", "--use-dynamic-base-id"]
    return [tools["outrider"], "run", "--config", bootstrap_path, "--concurrency", "1"]


ECHO_PROTO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "proto", "outrider", "echo", "v1",
                          "echo.proto")


def requests_file(load):
    """Where the load generator logs each request: oha's CSV, or ghz's JSON for gRPC."""
    return "requests.json" if load.get("protocol") == "grpc" else "requests.csv"


def load_command(tools, load, log_path):
    """oha: open loop at a fixed rate with latency correction, or closed loop at a fixed
    number of connections. For gRPC, ghz: unary echo calls from a fixed number of workers,
    rate-limited for an open-loop scenario."""
    if load.get("protocol") == "grpc":
        workers = int(load.get("connections", 50))
        command = [tools["ghz"], "--insecure", "--proto", ECHO_PROTO, "--call", "outrider.echo.v1.Echo/Echo",
                   "-d", '{"payload":"lab"}', "-z", f"{load['seconds']}s", "--concurrency", str(workers),
                   "--connections", str(min(workers, 50)), "--timeout", "30s", "--format", "json", "-o", log_path]
        if load["mode"] == "open":
            command += ["--rps", str(load["rate"])]
        return command + [f"127.0.0.1:{config.LISTEN_PORT}"]
    url = f"http://127.0.0.1:{config.LISTEN_PORT}/"
    command = [tools["oha"], "--no-tui", "--worker-threads", "1", "-z", f"{load['seconds']}s",
               "--output-format", "csv", "-o", log_path]
    if load.get("protocol") == "http2":
        # h2c with prior knowledge: each connection carries one stream at a time.
        command += ["--http2"]
    if load["mode"] == "open":
        command += ["-q", str(load["rate"]), "--latency-correction", "-c", str(load.get("connections", 200))]
    else:
        command += ["-c", str(load["connections"])]
    return command + [url]


# What the grpc-go backend (tests/peers/grpc-orca) is told of each scenario backend: its
# flags, from the scenario's fields. ORCA in any form becomes grpc-go's (the binary trailer
# per call, and OpenRcaService); utilization is always the busy time it measures.
GRPC_GO_FIELDS = {"name", "port", "latency", "jitter", "capacity", "error_rate", "error_status", "fail_fast", "orca",
                  "utilization", "stalls", "warmup", "join_at"}


def grpc_go_command(tools, backend, report_path):
    unknown = set(backend) - GRPC_GO_FIELDS
    if unknown or backend.get("utilization", "busy") != "busy":
        raise RuntimeError(f"backend {backend['name']}: the grpc-go backend cannot do {sorted(unknown) or backend['utilization']}")
    command = [tools["grpc-go-backend"], f"--port={backend['port']}", f"--name={backend['name']}",
               f"--report={report_path}", f"--orca={'true' if 'orca' in backend else 'false'}"]
    for field in ("latency", "jitter"):
        if field in backend:
            command.append(f"--{field}={backend[field]}")
    if "capacity" in backend:
        command.append(f"--capacity={backend['capacity']}")
    if "error_rate" in backend:
        command.append(f"--error-rate={backend['error_rate']}")
    if backend.get("fail_fast"):
        command.append("--fail-fast")
    for stall in backend.get("stalls", []):
        command.append(f"--stall={stall['at']}:{stall['for']}:{stall['latency']}")
    if "warmup" in backend:
        command.append(f"--warmup={backend['warmup']['requests']}:{backend['warmup']['factor']}")
    return command


def start_grpc_go_backends(scenario, tools, out, logs):
    """One grpc-go backend process per scenario backend; returns (process, report path) pairs."""
    started = []
    for backend in scenario["backends"]:
        report_path = os.path.join(out, f"served-{backend['name']}.json")
        process = subprocess.Popen(cpus(0) + grpc_go_command(tools, backend, report_path),
                                   stdout=subprocess.PIPE, stderr=logs, text=True)
        started.append((process, report_path))
        if not process.stdout.readline().startswith("ready"):
            raise RuntimeError(f"grpc-go backend {backend['name']} did not start; see {out}/processes.log")
    return started


def merge_served(out, grpc_go):
    """served.json from the grpc-go backends' own reports."""
    backends = []
    for _, report_path in grpc_go:
        with open(report_path) as f:
            backends.append(json.load(f))
    config.write_json(os.path.join(out, "served.json"), {"backends": backends})


def has_pods(scenario):
    return any("cpu_limit" in b for b in scenario.get("backends", []))


def start_pods(scenario, scenario_path, tools, out, logs):
    """One lab-backend process per backend, each in its pod's cgroup with the pod's CPU
    limit; returns (process, report path) pairs."""
    import yaml

    with open(scenario_path) as f:
        backends = {b["name"]: b for b in yaml.safe_load(f)["backends"]}
    started = []
    for backend in scenario["backends"]:
        name = backend["name"]
        pods.create(name, backend["cpu_limit"])
        pod_file = os.path.join(out, f"pod-{name}.yaml")
        with open(pod_file, "w") as f:
            yaml.safe_dump({"backends": [backends[name]]}, f, sort_keys=False)
        report_path = os.path.join(out, f"served-{name}.json")
        command = [tools["outrider"], "lab-backend", "--scenario", pod_file, "--report", report_path]
        process = subprocess.Popen(cpus(0) + pods.inside(name, command), stdout=subprocess.PIPE, stderr=logs,
                                   text=True, env=dict(os.environ, RUST_LOG="warn"))
        started.append((process, report_path))
        if not process.stdout.readline().startswith("ready"):
            raise RuntimeError(f"pod {name} did not start; see {out}/processes.log")
    return started


def merge_pods(out, scenario, started, cpu):
    """served.json from the pods' own reports, with each pod's CPU time during the load
    and its limit (Robinhood's figure is their ratio's max/mean)."""
    backends = []
    for (_, report_path), backend in zip(started, scenario["backends"]):
        with open(report_path) as f:
            served = json.load(f)["backends"][0]
        served["cpu_seconds"] = cpu.get(backend["name"])
        served["cpu_limit"] = backend["cpu_limit"]
        backends.append(served)
    config.write_json(os.path.join(out, "served.json"), {"backends": backends, "load_seconds": cpu.get("")})


def start_sidecars(scenario, proxy, tools, out, logs):
    """The backends' own sidecars (the same proxy as the caller), on CPU 0, ready; in
    their backends' pods when the backends have CPU limits."""
    http2 = scenario["load"].get("protocol") in ("http2", "grpc")
    started = []
    for index, backend in enumerate(scenario["backends"]):
        path = os.path.join(out, f"sidecar-{backend['name']}.json")
        config.write_json(path, two_hop.sidecar_bootstrap(index, backend["port"], scenario["certificates"], http2,
                                                           in_pod="cpu_limit" in backend))
        command = proxy_command(proxy, tools, path)
        if "cpu_limit" in backend:
            command = pods.inside(backend["name"], command, own_view=True)
        started.append(subprocess.Popen(cpus(0) + command, stdout=logs, stderr=logs,
                                        env=dict(os.environ, RUST_LOG="error")))
        if not wait_ready(f"http://127.0.0.1:{two_hop.ADMIN_BASE + index}/ready"):
            for process in started:
                stop(process)
            raise RuntimeError(f"{proxy}'s sidecar for {backend['name']} did not become ready; see {out}/processes.log")
    return started


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run_once(scenario, scenario_path, proxy, policy, tools, out):
    """Runs one (proxy, policy) of `scenario`; leaves requests.csv and served.json in `out`.
    Returns the machine's 1-minute load average before and after the load."""
    os.makedirs(out, exist_ok=True)
    resources = os.path.join(out, "resources.json")
    config.write_json(resources, config.resources(scenario, policy, joined=False))
    bootstrap_path = os.path.join(out, "bootstrap.yaml")
    with open(bootstrap_path, "w") as f:
        f.write(config.bootstrap())
    logs = open(os.path.join(out, "processes.log"), "w")
    grpc_go = []
    pod_processes = []
    cpu = {}
    if has_pods(scenario):
        # Each backend runs in its pod; lab-backend is only the control plane.
        pod_processes = start_pods(scenario, scenario_path, tools, out, logs)
        scenario_path = os.path.join(out, "control-plane-only.yaml")
        with open(scenario_path, "w") as f:
            f.write("backends: []\n")
    elif scenario.get("backend_impl") == "grpc-go":
        # The backends are grpc-go processes; lab-backend is only the control plane.
        grpc_go = start_grpc_go_backends(scenario, tools, out, logs)
        scenario_path = os.path.join(out, "control-plane-only.yaml")
        with open(scenario_path, "w") as f:
            f.write("backends: []\n")
    lab = subprocess.Popen(
        cpus(0) + [tools["outrider"], "lab-backend", "--scenario", scenario_path,
                   "--xds-address", f"127.0.0.1:{config.XDS_PORT}", "--resources", resources,
                   "--report", os.path.join(out, "served.json")],
        stdout=subprocess.PIPE, stderr=logs, text=True, env=dict(os.environ, RUST_LOG="warn"))
    proxy_process = None
    sidecars = []
    neighbours = []
    try:
        if not lab.stdout.readline().startswith("ready"):
            raise RuntimeError(f"lab-backend did not start; see {out}/processes.log")
        if scenario.get("two_hop"):
            sidecars = start_sidecars(scenario, proxy, tools, out, logs)
        proxy_process = subprocess.Popen(
            cpus(1) + proxy_command(proxy, tools, bootstrap_path),
            stdout=logs, stderr=logs, env=dict(os.environ, RUST_LOG="error"))
        if not wait_ready(f"http://127.0.0.1:{config.ADMIN_PORT}/ready"):
            raise RuntimeError(f"{proxy} did not become ready; see {out}/processes.log")
        time.sleep(1)
        before = loadavg()
        log_path = os.path.join(out, requests_file(scenario["load"]))
        load = subprocess.Popen(cpus(0) + load_command(tools, scenario["load"], log_path),
                                stdout=logs, stderr=logs)
        # What happens during the load, in time order: joins (EDS adds the endpoints that
        # have a join_at) and a neighbour starting or stopping in a pod.
        events = [(at, "join", None) for at in sorted({b["join_at"] for b in scenario["backends"] if "join_at" in b})]
        for b in scenario["backends"]:
            if "neighbour" in b:
                events.append((b["neighbour"]["at"], "neighbour", b["name"]))
                events.append((b["neighbour"]["at"] + b["neighbour"]["for"], "neighbour gone", b["name"]))
        started = time.time()
        used_before = {b["name"]: pods.cpu_seconds(b["name"]) for b in scenario["backends"] if "cpu_limit" in b}
        for at, event, name in sorted(events, key=lambda e: e[0]):
            time.sleep(max(0.0, at - (time.time() - started)))
            if event == "join":
                config.write_json(resources, config.resources(scenario, policy, joined=True))
            elif event == "neighbour":
                neighbours.append(subprocess.Popen(cpus(0) + pods.neighbour(name), stdout=logs, stderr=logs))
            else:
                stop(neighbours.pop(0), seconds=2)
        load.wait()
        cpu = {name: pods.cpu_seconds(name) - used for name, used in used_before.items()}
        cpu[""] = time.time() - started
        return before, loadavg()
    finally:
        for process in neighbours:
            stop(process, seconds=2)
        if proxy_process:
            stop(proxy_process)
        for sidecar in sidecars:
            stop(sidecar)
        stop(lab)
        for process, _ in pod_processes:
            stop(process)
        if pod_processes:
            merge_pods(out, scenario, pod_processes, cpu)
            for backend in scenario["backends"]:
                pods.remove(backend["name"])
        for process, _ in grpc_go:
            stop(process)
        if grpc_go:
            merge_served(out, grpc_go)
        logs.close()
