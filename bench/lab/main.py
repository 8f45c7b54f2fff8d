"""The scenario lab: `bench/lab.sh SCENARIO|all [--quick]` (see bench/lab.sh).

For each scenario file under bench/scenarios/: every policy it names, through Envoy 1.40
and through Outrider alternately, with the same xDS resources, backends and load; then
the scenario's table and charts, written into bench/RESULTS.md between its markers.
"""

import argparse
import datetime
import glob
import json
import os
import re
import subprocess
import sys

import yaml

import analyse
import config
import pods
import report
import run
import two_hop

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)


def seconds(text):
    match = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|m)\s*", str(text))
    if not match:
        raise ValueError(f"not a duration: {text!r}")
    value, unit = float(match.group(1)), match.group(2)
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0}[unit]


def scaled(text, scale):
    return f"{seconds(text) * scale * 1000:.0f}ms"


def load_scenario(path, scale, out, through_sidecars=False):
    """The scenario for the runner (durations in seconds) and the file the backends read
    (times scaled by `scale` for --quick). `through_sidecars` (--two-hop): each backend
    behind its own sidecar, and no backend sends ORCA."""
    with open(path) as f:
        scenario = yaml.safe_load(f)
    if "backends" not in scenario:
        return scenario, path
    if through_sidecars:
        scenario["two_hop"] = True
        for b in scenario["backends"]:
            b.pop("orca", None)
            b.pop("utilization", None)
    for b in scenario["backends"]:
        for stall in b.get("stalls", []):
            stall["at"], stall["for"] = scaled(stall["at"], scale), scaled(stall["for"], scale)
        if "join_at" in b:
            b["join_at"] = scaled(b["join_at"], scale)
        if "neighbour" in b:
            n = b["neighbour"]
            n["at"], n["for"] = scaled(n["at"], scale), scaled(n["for"], scale)
    os.makedirs(out, exist_ok=True)
    backend_file = os.path.join(out, "scenario.yaml")
    with open(backend_file, "w") as f:
        yaml.safe_dump(scenario, f, sort_keys=False)
    scenario["load"]["seconds"] = round(seconds(scenario["load"]["duration"]) * scale)
    for b in scenario["backends"]:
        if "join_at" in b:
            b["join_at"] = seconds(b["join_at"])
        if "neighbour" in b:
            n = b["neighbour"]
            n["at"], n["for"] = seconds(n["at"]), seconds(n["for"])
    if "window" in scenario:
        w = scenario["window"]
        w["from"], w["to"] = seconds(w["from"]) * scale, seconds(w["to"]) * scale
    return scenario, backend_file


# The protocols a scenario's load can take besides HTTP/1.1: (id suffix, title, what the
# section says).
PROTOCOLS = {
    "http2": ("-h2", "HTTP/2", "HTTP/2 from the client to the backends"),
    "grpc": ("-grpc", "gRPC", "gRPC (unary echo calls, ghz) from the client to the backends"),
    "grpc-go": ("-grpc-go", "gRPC, grpc-go backends",
                "gRPC (unary echo calls, ghz) to backends written with grpc-go 1.83.1 (tests/peers/grpc-orca), "
                "which report ORCA through grpc-go's own orca package: per call in the binary trailer and out of "
                "band, where grpc-go sends the first report when the stream opens and then at most every 30 s "
                "(its minimum, whatever the proxy asks)"),
}


def run_scenario(path, tools, quick, repeat, keep, protocol=None, only=None, through_sidecars=False):
    scale = 0.5 if quick else 1.0
    suffix, label, described = PROTOCOLS.get(protocol, ("", "HTTP/1.1", "HTTP/1.1"))
    name = os.path.splitext(os.path.basename(path))[0] + suffix + ("-two-hop" if through_sidecars else "")
    out = os.path.join(BENCH, "out", name)
    scenario, backend_file = load_scenario(path, scale, out, through_sidecars)
    if through_sidecars and "command" not in scenario:
        # Its own section: the one-hop results, with the backends' own reports, stay.
        scenario.setdefault("run_as", scenario["id"])
        scenario["id"] += "-2hop"
        scenario["title"] += " (two hops, no application reports)"
        # Out-of-band ORCA is the application's to serve; these backends serve none.
        scenario["policies"] = [p for p in scenario["policies"] if p != "cswrr_oob"]
    if protocol:
        if "command" in scenario:
            print(f"== {scenario['id']}: runs its own command; --{protocol} does not apply", flush=True)
            return None
        # Its own section, charts and runs: the HTTP/1.1 results stay beside it.
        scenario["run_as"] = scenario["id"]
        scenario["id"] += suffix
        scenario["title"] += f" ({label})"
        scenario["load"]["protocol"] = "grpc" if protocol == "grpc-go" else protocol
        if protocol == "grpc-go":
            scenario["backend_impl"] = "grpc-go"
    if scenario.get("two_hop"):
        scenario["certificates"] = two_hop.certificates(out)
    sid = scenario["id"]
    print(f"== {sid}: {scenario['title']}", flush=True)
    if "command" in scenario:
        started = datetime.datetime.now()
        done = subprocess.run(["bash", "-c", scenario["command"]], cwd=ROOT, capture_output=True, text=True)
        print(done.stdout, done.stderr if done.returncode else "", flush=True)
        if done.returncode:
            body = f"`{scenario['command']}` failed (exit status {done.returncode}):\n\n```\n{done.stderr.strip()[-2000:]}\n```"
        else:
            body = f"Output of `{scenario['command']}`:\n\n{done.stdout.strip()}"
        return write_section(scenario, body, started)
    started = datetime.datetime.now()
    runs = {}
    if only:
        scenario["policies"] = [p for p in scenario["policies"] if p in only]
    for policy in scenario["policies"]:
        runs[policy] = {p: [] for p in report.PROXIES if p in config.POLICIES[policy][1]}
        # Envoy and Outrider alternate, run after run.
        for n in range(1, repeat + 1):
            for proxy in runs[policy]:
                run_dir = os.path.join(out, f"{policy}-{proxy}" + (f"-run{n}" if n > 1 else ""))
                print(f"   {policy:26} {proxy:9} run {n}", end=" ", flush=True)
                metrics = os.path.join(run_dir, "metrics.json")
                if keep and os.path.exists(metrics):
                    with open(metrics) as f:
                        result = json.load(f)
                    print("(kept)", end=" ")
                else:
                    loads = run.run_once(scenario, backend_file, proxy, policy, tools, run_dir)
                    result = analyse.analyse(run_dir, scenario)
                    result["loadavg"] = loads
                    with open(metrics, "w") as f:
                        json.dump(result, f)
                lat = report.key_latency(result, scenario)
                print(f"{result['throughput']:7.0f} req/s  p99 {lat['p99']:8.2f} ms  errors {result['error_rate']:6.2f} %  "
                      + " ".join(f"{n}={s:.1f}" for n, s in result["shares"].items()), flush=True)
                runs[policy][proxy].append(result)
    # The machine is shared: of each (policy, proxy)'s runs, the one with the lowest p99
    # is reported (the same rule for both proxies); every run's p99 is listed beside it.
    results = {}
    for policy, by_proxy in runs.items():
        results[policy] = {}
        for proxy, rs in by_proxy.items():
            best = min(rs, key=lambda r: report.key_latency(r, scenario)["p99"])
            best["all_p99"] = [report.key_latency(r, scenario)["p99"] for r in rs]
            results[policy][proxy] = best
    charts = os.path.join(BENCH, "charts")
    os.makedirs(charts, exist_ok=True)
    report.share_chart(scenario, results, os.path.join(charts, f"{sid}-shares.png"))
    report.latency_chart(scenario, results, os.path.join(charts, f"{sid}-latency.png"))
    report.error_chart(scenario, results, os.path.join(charts, f"{sid}-errors.png"))
    load = scenario["load"]
    if protocol in ("grpc", "grpc-go"):
        how = (f"{load['rate']} calls/s from {load.get('connections', 200)} workers (ghz: a rate limit, not an "
               f"open loop: a call waits for a free worker, and its wait is not counted)" if load["mode"] == "open"
               else f"closed loop, {load['connections']} workers (ghz)")
    else:
        how = (f"open loop, {load['rate']} req/s (oha, latency-corrected)" if load["mode"] == "open"
               else f"closed loop, {load['connections']} connections (oha)")
    loads = [x for r in runs.values() for rs in r.values() for res in rs for x in res["loadavg"]]
    notes = "".join(f"- {p}: {config.POLICIES[p][2]}\n" for p in scenario["policies"])
    body = (f"Load: {how}, {load['seconds']} s per run, {described}.{' (--quick: times halved)' if quick else ''} "
            f"{repeat} run(s) of each proxy and policy, alternating; the table shows the run with the lower "
            f"p99{' in the window' if scenario.get('window') else ''}, and the last column every run's. "
            f"Machine load average (1 min) at the start and end of the runs: {min(loads):.1f} to {max(loads):.1f} "
            f"on 2 cores.\n\n"
            f"{notes}\n{report.table(scenario, results)}\n\n{report.targets(scenario, results)}\n\n"
            f"![{sid} shares](charts/{sid}-shares.png)\n![{sid} latency](charts/{sid}-latency.png)\n"
            f"![{sid} errors](charts/{sid}-errors.png)")
    flags = (f" --policies {','.join(scenario['policies'])}" if only else "") + (" --quick" if quick else "") + (f" --runs {repeat}" if repeat > 1 else "") + (f" --{protocol}" if protocol else "") + (" --two-hop" if through_sidecars else "")
    return write_section(scenario, body, started, flags)


def write_section(scenario, body, started, flags=""):
    sid = scenario["id"]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    section = (f"### {sid}: {scenario['title']}\n\n{scenario['description'].strip()}\n\n"
               f"Command: `bench/lab.sh {scenario.get('run_as', sid)}{flags}` — {started:%Y-%m-%d %H:%M}, "
               f"commit {commit}.\n\n{body}\n")
    path = os.path.join(BENCH, "RESULTS.md")
    with open(path) as f:
        text = f.read()
    begin, end = f"<!-- lab:{sid}:begin -->", f"<!-- lab:{sid}:end -->"
    block = f"{begin}\n{section}{end}"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scenario", help="S0…S11, a scenario file, or all")
    parser.add_argument("--quick", action="store_true", help="halve every run's duration and scripted times")
    parser.add_argument("--runs", type=int, default=1, help="runs of each proxy and policy; the lowest p99 is reported")
    parser.add_argument("--keep", action="store_true", help="reuse runs already measured under bench/out/")
    parser.add_argument("--policies", help="only these of the scenario's policies (comma-separated); the section says which ran")
    protocol = parser.add_mutually_exclusive_group()
    protocol.add_argument("--http2", action="store_const", const="http2", dest="protocol",
                          help="HTTP/2 (prior knowledge) from the load generator through the proxy to the backends; "
                               "reported as its own section, <id>-h2")
    protocol.add_argument("--grpc", action="store_const", const="grpc", dest="protocol",
                          help="gRPC unary calls (ghz) through the proxy to the backends' echo service; "
                               "reported as its own section, <id>-grpc")
    protocol.add_argument("--grpc-go", action="store_const", const="grpc-go", dest="protocol",
                          help="as --grpc, against backends written with grpc-go that report ORCA with grpc-go's "
                               "orca package (tests/peers/grpc-orca); reported as <id>-grpc-go")
    parser.add_argument("--two-hop", action="store_true",
                        help="each backend behind its own sidecar (the same proxy as the caller) over mutual TLS, "
                             "no backend sending ORCA; reported as its own section, <id>-2hop")
    args = parser.parse_args()
    tools = {"envoy": os.environ["LAB_ENVOY"], "outrider": os.environ["LAB_OUTRIDER"], "oha": os.environ["LAB_OHA"],
             "ghz": os.environ.get("LAB_GHZ", ""), "grpc-go-backend": os.environ.get("LAB_GRPC_GO_BACKEND", "")}
    files = sorted(glob.glob(os.path.join(BENCH, "scenarios", "*.yaml")))
    if args.scenario != "all":
        wanted = args.scenario.lower()
        files = [f for f in files if os.path.basename(f).lower().startswith(wanted + "-") or f == args.scenario]
        if not files:
            sys.exit(f"no scenario {args.scenario!r} under bench/scenarios/")
    for path in files:
        only = set(args.policies.split(",")) if args.policies else None
        with open(path) as f:
            pods_needed = any("cpu_limit" in b for b in yaml.safe_load(f).get("backends", []))
        if pods_needed and not pods.available():
            print(f"{os.path.basename(path)}: SKIPPED: its pods need cgroups this user can create (root)")
            continue
        run_scenario(path, tools, args.quick, args.runs, args.keep, args.protocol, only, args.two_hop)


if __name__ == "__main__":
    main()
