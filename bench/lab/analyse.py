"""What one run measured: latency percentiles and errors from the load generator's
per-request log (oha CSV, latency-corrected; ghz JSON for gRPC), endpoint shares from the backends' own
per-second counts.
"""

import csv
import datetime
import json

import numpy as np


def read_requests(path):
    """(start s, latency ms, failed) per request."""
    if path.endswith(".json"):
        return read_ghz(path)
    starts, latencies, failed = [], [], []
    with open(path) as f:
        for row in csv.DictReader(f):
            starts.append(float(row["request-start"]))
            latencies.append(float(row["request-duration"]) * 1000.0)
            failed.append(int(row["status"]) >= 500)
    return np.array(starts), np.array(latencies), np.array(failed, dtype=bool)


def read_ghz(path):
    """ghz's JSON report: each call's timestamp, latency (ns) and status; a call fails when
    its status is not OK. Starts are seconds from the first call."""
    with open(path) as f:
        details = json.load(f).get("details") or []
    def seconds(stamp):
        # RFC 3339 with nanoseconds: Python reads microseconds at most.
        head, _, rest = stamp.partition(".")
        digits = "".join(ch for ch in rest if ch.isdigit())
        zone = rest[len(digits):].replace("Z", "+00:00")
        return datetime.datetime.fromisoformat(f"{head}.{digits[:6].ljust(6, '0')}{zone}").timestamp()
    stamps = [seconds(d["timestamp"]) for d in details]
    ends = [s + d["latency"] / 1e9 for s, d in zip(stamps, details)]
    # ghz ends a run by closing its connections under the calls still in flight: they fail
    # with "transport is closing" at the very end. They are the generator stopping, not the
    # proxy failing, and are left out (at most one per worker).
    last = max(ends, default=0.0)
    kept = [i for i, d in enumerate(details)
            if not ("transport is closing" in d.get("error", "") and ends[i] >= last - 0.1)]
    first = min((stamps[i] for i in kept), default=0.0)
    starts = np.array([stamps[i] - first for i in kept])
    latencies = np.array([details[i]["latency"] / 1e6 for i in kept])
    failed = np.array([details[i].get("status", "OK") != "OK" for i in kept], dtype=bool)
    return starts, latencies, failed


def pct(values, q):
    return float(np.percentile(values, q)) if len(values) else float("nan")


def percentiles(latencies):
    return {name: pct(latencies, q) for name, q in (("p50", 50), ("p95", 95), ("p99", 99), ("p999", 99.9))}


def shares(served, first=0, last=None):
    """Each backend's share (%) of the requests served in seconds [first, last)."""
    totals = {b["name"]: sum(b["ok"][first:last]) + sum(b["failed"][first:last]) for b in served["backends"]}
    all_requests = sum(totals.values()) or 1
    return {name: 100.0 * n / all_requests for name, n in totals.items()}


def share_series(served, seconds):
    """Per second: each backend's share (%) of that second's requests."""
    names = [b["name"] for b in served["backends"]]
    counts = np.zeros((len(names), seconds))
    for i, b in enumerate(served["backends"]):
        for s in range(min(seconds, len(b["ok"]))):
            counts[i, s] = b["ok"][s] + b["failed"][s]
    totals = counts.sum(axis=0)
    totals[totals == 0] = 1
    return names, (100.0 * counts / totals).tolist()


def converged_at(served, seconds, target, tolerance):
    """The first second from which every backend's per-second share stays within
    `tolerance` points of `target` (name → %) to the end of the run; None if never."""
    names, series = share_series(served, seconds)
    ok = [all(abs(series[i][s] - target[n]) <= tolerance for i, n in enumerate(names) if n in target)
          for s in range(seconds)]
    for s in range(seconds):
        if all(ok[s:]):
            return s
    return None


def analyse(run_dir, scenario):
    name = "requests.json" if scenario["load"].get("protocol") == "grpc" else "requests.csv"
    starts, latencies, failed = read_requests(f"{run_dir}/{name}")
    with open(f"{run_dir}/served.json") as f:
        served = json.load(f)
    seconds = int(scenario["load"]["seconds"])
    result = {
        "requests": int(len(latencies)),
        "throughput": len(latencies) / seconds,
        "errors": int(failed.sum()),
        "error_rate": 100.0 * failed.sum() / max(1, len(latencies)),
        "latency": percentiles(latencies),
        "shares": shares(served),
    }
    window = scenario.get("window")
    if window:
        inside = (starts >= window["from"]) & (starts < window["to"])
        result["window"] = dict(percentiles(latencies[inside]), requests=int(inside.sum()),
                                error_rate=100.0 * failed[inside].sum() / max(1, inside.sum()))
    per_second = []
    for s in range(seconds):
        mask = (starts >= s) & (starts < s + 1)
        per_second.append(dict(percentiles(latencies[mask]), requests=int(mask.sum()), errors=int(failed[mask].sum())))
    result["per_second"] = per_second
    result["share_names"], result["share_series"] = share_series(served, seconds)
    target = scenario.get("target_shares")
    if target:
        # After the blackout, shares are judged on what the weights settle to.
        result["converged_at"] = converged_at(served, seconds, target, scenario.get("converge_tolerance", 3.0))
        settle = scenario.get("settled_from", seconds // 2)
        result["settled_shares"] = shares(served, settle, seconds)
    if served.get("load_seconds") and all(b.get("cpu_limit") for b in served["backends"]):
        # Pods with CPU limits: each one's CPU use over its limit during the load, and
        # Robinhood's figure, their max over their mean.
        used = {b["name"]: b["cpu_seconds"] / (b["cpu_limit"] * served["load_seconds"]) for b in served["backends"]}
        result["cpu_utilization"] = used
        result["cpu_utilization_spread"] = max(used.values()) / max(1e-9, sum(used.values()) / len(used))
    return result
