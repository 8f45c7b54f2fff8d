"""Tables (markdown) and charts (PNG) of one scenario: both proxies, every policy."""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PROXIES = ("envoy", "outrider")
LABEL = {"envoy": "Envoy 1.40", "outrider": "Outrider"}


def ms(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def key_latency(result, scenario):
    """The latency the scenario is judged on: the window's when it has one."""
    return result["window"] if scenario.get("window") else result["latency"]


def share_text(shares, scenario):
    """Each backend's share; with many backends, the ones the scenario names and the
    others' range."""
    named = scenario.get("report_shares")
    if not named or len(shares) <= 8:
        return " / ".join(f"{name} {share:.1f}" for name, share in shares.items())
    others = [share for name, share in shares.items() if name not in named]
    text = " / ".join(f"{name} {shares.get(name, 0.0):.1f}" for name in named)
    return text + (f" / the other {len(others)} {min(others):.1f}–{max(others):.1f}" if others else "")


def table(scenario, results):
    """results: policy → proxy → result (absent: not available)."""
    window = scenario.get("window")
    head = ["policy", "proxy", "req/s", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "errors %"]
    if window:
        head += [f"p99 ms {window['label']}", f"p99.9 ms {window['label']}"]
    if scenario.get("target_shares"):
        head += ["converged after (s)", "shares after settling (%)"]
    else:
        head += ["shares (%)"]
    pods = any(r.get("cpu_utilization") for by_proxy in results.values() for r in by_proxy.values() if r)
    if pods:
        head += ["pods' CPU use / limit (max/mean)"]
    head += ["p99 of each run (ms)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for policy, by_proxy in results.items():
        for proxy in PROXIES:
            r = by_proxy.get(proxy)
            if r is None:
                cells = [policy, LABEL[proxy]] + ["not available"] + [""] * (len(head) - 3)
                lines.append("| " + " | ".join(cells) + " |")
                continue
            lat = r["latency"]
            cells = [policy, LABEL[proxy], f"{r['throughput']:.0f}", ms(lat["p50"]), ms(lat["p95"]), ms(lat["p99"]),
                     ms(lat["p999"]), f"{r['error_rate']:.2f}"]
            if window:
                cells += [ms(r["window"]["p99"]), ms(r["window"]["p999"])]
            shares = r["settled_shares"] if scenario.get("target_shares") else r["shares"]
            text = share_text(shares, scenario)
            if scenario.get("target_shares"):
                converged = r.get("converged_at")
                cells += ["never" if converged is None else str(converged)]
            cells += [text]
            if pods:
                used = r.get("cpu_utilization") or {}
                cells += [" / ".join(f"{name} {u:.2f}" for name, u in used.items())
                          + f" ({r.get('cpu_utilization_spread', 0):.2f})"]
            each = ", ".join(ms(x) for x in r.get("all_p99", []))
            lines.append("| " + " | ".join(cells + [each]) + " |")
    return "\n".join(lines)


def targets(scenario, results):
    """The issue's targets for this scenario, each met or missed, with the numbers."""
    out = []
    best = {}
    for proxy in PROXIES:
        runs = [(key_latency(r[proxy], scenario)["p99"], p) for p, r in results.items() if proxy in r]
        errors = [(r[proxy]["error_rate"], p) for p, r in results.items() if proxy in r]
        best[proxy] = (min(runs), min(errors)) if runs else None
    if best["envoy"] and best["outrider"]:
        (e_p99, e_pol), (e_err, e_epol) = best["envoy"]
        (o_p99, o_pol), (o_err, o_epol) = best["outrider"]
        what = f"p99 {scenario['window']['label']}" if scenario.get("window") else "p99"
        mark = "✔" if o_p99 < e_p99 else "✘"
        out.append(f"- Best {what}: Outrider {ms(o_p99)} ms ({o_pol}) vs Envoy {ms(e_p99)} ms ({e_pol}): "
                   f"{mark} ({(o_p99 / e_p99 - 1) * 100:+.0f} %)")
        if o_err == 0 and e_err == 0:
            out.append("- Best error rate: both 0 %: a tie (nothing to beat)")
        elif round(o_err, 3) == round(e_err, 3):
            out.append(f"- Best error rate: Outrider {o_err:.3f} % ({o_epol}) vs Envoy {e_err:.3f} % ({e_epol}): "
                       "a tie, not beaten ✘")
        else:
            mark = "✔" if o_err < e_err else "✘"
            out.append(f"- Best error rate: Outrider {o_err:.3f} % ({o_epol}) vs Envoy {e_err:.3f} % ({e_epol}): {mark}")
    for policy, r in results.items():
        if "envoy" in r and "outrider" in r:
            key = "settled_shares" if scenario.get("target_shares") else "shares"
            diff = max(abs(r["envoy"][key][n] - r["outrider"][key][n]) for n in r["envoy"][key])
            mark = "✔" if diff <= 3.0 else "✘"
            out.append(f"- Same policy, {policy}: shares differ by at most {diff:.1f} points (target ≤ 3): {mark}")
    return "\n".join(out)


def share_chart(scenario, results, path):
    policies = list(results)
    fig, axes = plt.subplots(len(policies), 2, figsize=(9, 1.7 * len(policies) + 0.6), sharex=True, squeeze=False)
    for row, policy in enumerate(policies):
        for col, proxy in enumerate(PROXIES):
            ax = axes[row][col]
            r = results[policy].get(proxy)
            if row == 0:
                ax.set_title(LABEL[proxy], fontsize=9)
            if col == 0:
                ax.set_ylabel(policy, fontsize=7)
            ax.tick_params(labelsize=7)
            if r is None:
                ax.text(0.5, 0.5, "not available", ha="center", va="center", transform=ax.transAxes, fontsize=8)
                continue
            x = range(len(r["share_series"][0]))
            ax.stackplot(x, r["share_series"], labels=r["share_names"])
            ax.set_ylim(0, 100)
    handles, labels = [], []
    for ax in axes.flat:
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            break
    fig.legend(handles, labels, loc="lower center", ncol=min(10, len(labels)), fontsize=7)
    fig.suptitle(f"{scenario['id']}: share of requests per endpoint, per second (%)", fontsize=9)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    fig.savefig(path, dpi=70)
    plt.close(fig)


def latency_chart(scenario, results, path):
    series = scenario.get("series", ["p50", "p99"])
    per_second_chart(scenario, results, path, "latency per second (ms, log scale)", 1.7,
                     lambda seconds: [(name, [s[name] for s in seconds]) for name in series], log=True)


def error_chart(scenario, results, path):
    """Errors per second, as a share of that second's requests, per policy and proxy."""
    per_second_chart(scenario, results, path, "errors per second (% of that second's requests)", 1.4,
                     lambda seconds: [("", [100.0 * s["errors"] / s["requests"] if s["requests"] else 0.0
                                            for s in seconds])])


def per_second_chart(scenario, results, path, title, row_height, lines, log=False):
    """One panel per policy, Envoy dashed and Outrider solid: `lines(per_second)` gives each
    run's (name, values per second); the scenario's window is shaded."""
    policies = list(results)
    fig, axes = plt.subplots(len(policies), 1, figsize=(9, row_height * len(policies) + 0.6), sharex=True,
                             squeeze=False)
    for row, policy in enumerate(policies):
        ax = axes[row][0]
        ax.set_ylabel(policy, fontsize=7)
        ax.tick_params(labelsize=7)
        if log:
            ax.set_yscale("log")
        for proxy, style in (("envoy", "--"), ("outrider", "-")):
            r = results[policy].get(proxy)
            if r is None:
                continue
            for name, ys in lines(r["per_second"]):
                ax.plot(range(len(ys)), ys, style, label=f"{LABEL[proxy]} {name}".strip(), linewidth=1)
        if scenario.get("window"):
            ax.axvspan(scenario["window"]["from"], scenario["window"]["to"], color="grey", alpha=0.15)
        if not log:
            ax.set_ylim(bottom=0)
        ax.legend(fontsize=6, loc="upper right", ncol=2)
    axes[-1][0].set_xlabel("seconds into the run", fontsize=8)
    fig.suptitle(f"{scenario['id']}: {title}", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=70)
    plt.close(fig)
