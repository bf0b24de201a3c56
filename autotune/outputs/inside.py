"""The report's look inside a capacity: the recommended config's TTFT request by request through
its capacity point and the first failing point above it, with each run's median TTFT per fifth
of its arrivals (autotune/measure/drift.py), vLLM's own split of its TTFT and its engine's steps
(the tokens a step carried, the wall time a step).

A flat TTFT says the server kept up through the point; a growing one that a queue was building,
in vLLM's engine queue or outside its engine core: which one is the fix's first question
(`api_server_count` for the second, docs/capacity.md "Where the time went").
"""

from __future__ import annotations

from pathlib import Path

from autotune.config.workload import SLOConfig
from autotune.measure.capacity import LoadPoint, points_file, split_from
from autotune.measure.drift import GROWS, read_runs
from autotune.measure.drift import drift as run_drift
from autotune.server.command import api_servers
from autotune.tuning.record import TrialRecord


def _points(rec: TrialRecord) -> list[tuple[str, LoadPoint]]:
    """The capacity point and the lowest failing load above it, as the search measured them."""
    search = rec.facts.searches().get(None)
    if search is None:
        return []
    out = []
    for name, load in (("capacity", search.capacity), ("missed above", search.fail)):
        p = next((p for p in search.points if p.load == load and (p.passed or name != "capacity")),
                 None)
        if load and p is not None:
            out.append((name, p))
    return out


def _split(p: LoadPoint) -> str:
    s = p.server
    if "server_mean_outside_engine_ms" not in s:
        return "not recorded"
    return (f"{s['server_mean_ttft_ms']:,.0f} ms = queue {s.get('server_mean_queue_ms', 0):,.0f}"
            f" + prefill {s.get('server_mean_prefill_ms', 0):,.0f} + outside the engine "
            f"{s['server_mean_outside_engine_ms']:,.0f}{split_from(s)}")


def _steps(p: LoadPoint, fronts: int) -> str:
    """The engine's steps over the point's last run (autotune/server/scrape.py STEP_TOKENS):
    the tokens a step carried and the wall time a step, to be read against the engine's curve
    of step time over tokens (lab/boot_spread.py): more tokens in the time the curve gives
    them points at a batch that grew, longer than the curve at a slower engine or at idle time
    between steps. `fronts`: the server's API servers (server.command.api_servers); with more
    than one vLLM counts a step once for each that had requests in it; the figures then show as
    not comparable."""
    s = p.server
    if "server_wall_ms_per_step" not in s:
        return "not recorded"
    if fronts > 1:
        return f"not comparable ({fronts} API servers count a step once each)"
    return (f"{s['server_mean_step_tokens']:,.0f} tokens a step, "
            f"{s['server_wall_ms_per_step']:,.1f} ms a step")


def inside_markdown(rec: TrialRecord, trial_dir: Path, slos: list[SLOConfig],
                    out_dir: Path) -> list[str]:
    """The section's lines, and inside_points.png beside the report (nothing without a capacity
    search or its per-request records)."""
    found = [(name, p, points_file(trial_dir, p.load)) for name, p in _points(rec)]
    found = [(n, p, f) for n, p, f in found if f.is_file()]
    if not found:
        return []
    try:
        runs = {p.load: read_runs(f) for _, p, f in found}
    except (OSError, KeyError, ValueError) as e:  # a records file cut short or edited by hand
        return ["", f"## Inside the load points of trial {rec.number}", "",
                f"The per-request records under {trial_dir / 'points'} could not be read "
                f"({type(e).__name__}: {e})."]
    lines = ["", f"## Inside the load points of trial {rec.number}", "",
             "![TTFT through the points](inside_points.png)", "",
             "| point | load | runs | TTFT p50 by fifth of the arrivals, ms (each run) | "
             "vLLM's mean TTFT | vLLM's engine |", "| --- | ---: | ---: | --- | --- | --- |"]
    growing = []
    for name, p, _ in found:
        drifts = [run_drift(r) for r in runs[p.load]]
        cells = "; ".join(" → ".join(f"{v:,.0f}" for v in d.ttft_p50_ms) for d in drifts)
        lines.append(f"| {name} | {p.load:g} | {len(drifts)} | {cells} | {_split(p)} | "
                     f"{_steps(p, api_servers(rec.facts.argv))} |")
        growing += [f"{p.load:g}"] if any((d.growth or 0) >= GROWS for d in drifts) else []
    lines += ["", f"TTFT grew at least {GROWS:g}x from the first fifth of the arrivals to the "
              f"last at load {', '.join(growing)}: a queue was building through the point "
              "(where: vLLM's split in the last column)." if growing else
              "TTFT stayed within "
              f"{GROWS:g}x from the first fifth of the arrivals to the last: no queue built up."]
    _png(found, runs, slos, out_dir / "inside_points.png")
    return lines


def _png(found: list[tuple[str, LoadPoint, Path]],
         runs: dict[float, list[list[tuple[float, float]]]], slos: list[SLOConfig],
         path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(found), figsize=(5.5 * len(found), 4), squeeze=False,
                             sharey=True)
    ttft_slo = next((s.max for s in slos if s.metric.endswith("ttft_ms") and s.max), None)
    for ax, (name, p, _) in zip(axes[0], found, strict=True):
        for i, run in enumerate(runs[p.load]):
            ax.scatter([t for t, _ in run], [v for _, v in run], s=3, alpha=0.5,
                       label=f"run {i + 1}")
        if ttft_slo is not None:
            ax.axhline(ttft_slo, color="red", lw=0.8, ls="--", label="TTFT SLO")
        ax.set_yscale("log")
        ax.set_xlabel("request sent (s from the run's start)")
        ax.set_title(f"{name}: load {p.load:g} ({'met' if p.passed else 'missed'})", fontsize=9)
        ax.legend(fontsize=6, markerscale=3)
    axes[0][0].set_ylabel("TTFT (ms)")
    fig.suptitle("TTFT request by request: flat, the server kept up; growing, a queue built",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
