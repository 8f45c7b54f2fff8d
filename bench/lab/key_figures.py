"""Each scenario's key figure, run by run, for every proxy × policy measured under
bench/out/ (HTTP/1.1 runs), and whether Outrider's adaptive policy beat the best of all the
others in every run (its worst run against each one's best): `bench/.venv/bin/python bench/lab/key_figures.py`.

Key figures (what the adaptive policy is judged on):
  S1: throughput (higher is better) and p99.9 (lower)
  S2: p99 in the stall window (lower; the target is under 100 ms)
  S3: error rate (lower)
  S4: p99 in the 10 s after the new backend joins (lower), with the new backend's share of
      those 10 s beside it: a policy that leaves it unused is not counted as beating one
      that uses it
  S5: p99 (lower) and seconds to converge on the capacity split (lower; never counts last)
  S7: S5's figures through two hops without application reports, and the backends'
      utilization max/mean (Robinhood's figure: each backend's share of the requests over
      its share of the capacity; 1.0 is a split in proportion to capacity)
  S8: p99 (lower), and the pods' CPU use over their CPU limits, max/mean (lower; measured
      from each pod's cgroup over the whole run), and the same figure from the split after
      settling (the second half of the run) over the limits
  S9: p99 while the neighbour takes a pod's CPU (lower)
  S10: p99 in the 10 s after the scale-up (lower)
  S11: p99 (lower)
"""

import glob
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "out")

SCENARIOS = {
    "S1": "s1-uneven-speed",
    "S2": "s2-pause",
    "S3": "s3-black-hole",
    "S4": "s4-scale-up",
    "S5": "s5-uneven-capacity",
    "S7": "s7-two-hop-uneven-capacity",
    "S8": "s8-two-hop-cpu-limits",
    "S9": "s9-two-hop-noisy-neighbour",
    "S10": "s10-two-hop-overload-scale-up",
    "S11": "s11-two-hop-slow-among-50",
}
# S7's backends' capacities (requests at once), as its scenario file has them.
S7_CAPACITY = {"small": 2, "medium": 4, "large": 8}
# S8's pods' CPU limits.
S8_CAPACITY = {"small": 0.1, "medium": 0.2, "large": 0.4}
# A new backend counts as used when it served at least this share (%) of the window.
USED_SHARE = 1.0


def runs(directory):
    """(policy, proxy) → the metrics of each run, in run order."""
    found = {}
    for path in sorted(glob.glob(os.path.join(OUT, directory, "*", "metrics.json"))):
        name = os.path.basename(os.path.dirname(path))
        run = 1
        if "-run" in name:
            name, number = name.rsplit("-run", 1)
            run = int(number)
        policy, proxy = name.rsplit("-", 1)
        with open(path) as f:
            found.setdefault((policy, proxy), {})[run] = json.load(f)
    return {key: [by_run[n] for n in sorted(by_run)] for key, by_run in found.items()}


def window_share(result, name, first=10, last=20):
    names, series = result["share_names"], result["share_series"]
    if name not in names:
        return 0.0
    values = series[names.index(name)][first:last]
    return sum(values) / max(1, len(values))


def utilization_spread(result, capacity, key="shares"):
    """max/mean over backends of (share of requests / share of capacity)."""
    total = sum(capacity.values())
    ratios = [result[key].get(name, 0.0) / 100 / (c / total) for name, c in capacity.items()]
    return max(ratios) / (sum(ratios) / len(ratios))


# scenario → [(label, value of a run, lower is better)]
FIGURES = {
    "S1": [("req/s", lambda r: r["throughput"], False), ("p99.9 ms", lambda r: r["latency"]["p999"], True)],
    "S2": [("p99 ms 12–22 s", lambda r: r["window"]["p99"], True)],
    "S3": [("errors %", lambda r: r["error_rate"], True)],
    "S4": [("p99 ms 10–20 s", lambda r: r["window"]["p99"], True),
           ("new backend's share 10–20 s %", lambda r: window_share(r, "cold"), False)],
    "S5": [("p99 ms", lambda r: r["latency"]["p99"], True),
           ("converged after s", lambda r: r["converged_at"] if r.get("converged_at") is not None else float("inf"), True)],
    "S7": [("p99 ms", lambda r: r["latency"]["p99"], True),
           ("converged after s", lambda r: r["converged_at"] if r.get("converged_at") is not None else float("inf"), True),
           ("utilization max/mean", lambda r: utilization_spread(r, S7_CAPACITY), True)],
    "S8": [("p99 ms", lambda r: r["latency"]["p99"], True),
           ("CPU use / limit max/mean", lambda r: r["cpu_utilization_spread"], True),
           ("settled split / limits max/mean", lambda r: utilization_spread(r, S8_CAPACITY, "settled_shares"), True)],
    "S9": [("p99 ms 10–25 s", lambda r: r["window"]["p99"], True)],
    "S10": [("p99 ms 10–20 s", lambda r: r["window"]["p99"], True)],
    "S11": [("p99 ms", lambda r: r["latency"]["p99"], True)],
}


# S1–S5 through two hops (`--two-hop`): the same figures, from their own runs.
for _sid in ("S1", "S2", "S3", "S4", "S5"):
    SCENARIOS[f"{_sid}-2hop"] = SCENARIOS[_sid] + "-two-hop"
    FIGURES[f"{_sid}-2hop"] = FIGURES[_sid]


def fmt(value):
    if value == float("inf"):
        return "never"
    if abs(value) < 1:
        return f"{value:.3f}"
    # Ratios near 1 (the utilization spreads, whose target is 1.1) need the second decimal.
    return f"{value:.2f}" if abs(value) < 2 else f"{value:.1f}"


def main():
    print("| scenario | figure | proxy × policy | run by run | median | adaptive's worst run better than its best run |")
    print("| --- | --- | --- | --- | --- | --- |")
    for sid, directory in SCENARIOS.items():
        measured = runs(directory)
        adaptive = measured.get(("adaptive", "outrider"))
        if not adaptive:
            continue
        for label, value, lower in FIGURES[sid]:
            judged = not (sid.startswith("S4") and not lower)
            for (policy, proxy), results in sorted(measured.items(), key=lambda kv: (kv[0][0] != "adaptive", kv[0])):
                values = [value(r) for r in results]
                cell = ""
                if judged and policy != "adaptive":
                    mine = [value(r) for r in adaptive]
                    # The adaptive policy's worst run against the other's best run.
                    worst, best = (max(mine), min(values)) if lower else (min(mine), max(values))
                    beaten = worst < best if lower else worst > best
                    if sid.startswith("S4") and any(window_share(r, "cold") < USED_SHARE for r in results):
                        cell = "not compared: leaves the new backend unused"
                    else:
                        cell = ("✔" if beaten else "✘") + f" (worst {fmt(worst)} vs best {fmt(best)})"
                name = "Envoy 1.40" if proxy == "envoy" else "Outrider"
                print(f"| {sid} | {label} | {name} {policy} | {', '.join(fmt(v) for v in values)} | "
                      f"{fmt(statistics.median(values))} | {cell} |")


if __name__ == "__main__":
    main()
