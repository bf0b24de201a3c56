"""Pictures of a study: the Pareto front (Optuna's own plot, as HTML and PNG), the hypervolume
history and parameter importances. Only measured trials are drawn: a trial without a
measurement has no values to place."""

from __future__ import annotations

import warnings
from copy import deepcopy
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd
from optuna.trial import FrozenTrial

from autotune.config.workload import SLOConfig
from autotune.measure.stats import median_ci
from autotune.outputs.console import params_text, short_metric
from autotune.tuning.confirm import ConfirmResult, config_boots
from autotune.tuning.record import TrialRecord, records

Pooled = dict[int, dict[str, float]]  # a trial's values as its config's medians (StudySummary)


def measured_study(study: optuna.Study, with_params: bool = False,
                   full_only: bool = False, pooled: Pooled | None = None) -> optuna.Study:
    """An in-memory copy of the study holding only its measured first-pass trials (constraints
    kept; a confirm phase's repeats are drawn as error bars instead); `with_params`: only those
    that sampled parameters (not the baseline); `full_only`: not those whose capacity is a
    bound (a search stopped early), which Optuna's Pareto plot would put on its front;
    `pooled`: each trial's values as its config's medians over its boots (the study summary's),
    so the plot's front is the one every table shows."""
    copy = optuna.create_study(directions=study.directions)
    if study.metric_names:
        copy.set_metric_names(list(study.metric_names))
    trials = first_pass(study, with_params, full_only)
    if pooled:  # on copies: the study's own trials (deepcopy=False) are its storage's cache
        trials = [deepcopy(t) for t in trials]
        for t in trials:
            if t.number in pooled:
                t.values = [pooled[t.number][m] for m in study.metric_names or []]
    copy.add_trials(trials)
    return copy


def trial_counts(recs: list[TrialRecord]) -> str:
    """"12 trials, 2 without a measurement, 6 repeats" for a plot's title."""
    repeats = sum(r.facts.repeat_of is not None for r in recs)
    first = [r for r in recs if r.facts.repeat_of is None]
    return (f"{len(first)} trials, {sum(not r.measured for r in first)} without a measurement"
            + (f", {repeats} repeats (error bars)" if repeats else ""))


def _first_pass(study: optuna.Study) -> list[tuple[FrozenTrial, TrialRecord]]:
    """The measured trials that are not a confirm phase's repeats, with their records."""
    recs = {r.number: r for r in records(study)}
    return [(t, recs[t.number]) for t in study.get_trials(deepcopy=False)
            if recs[t.number].measured and recs[t.number].facts.repeat_of is None]


def first_pass(study: optuna.Study, with_params: bool = False,
               full_only: bool = False) -> list[FrozenTrial]:
    """The measured trials that are not a confirm phase's repeats (the copy's trials, in its
    order: the copy numbers them anew)."""
    return [t for t, r in _first_pass(study)
            if (t.params or not with_params) and not (full_only and r.bound_only)]


def bound_points(study: optuna.Study) -> list[tuple[int, float, float]]:
    """(trial, first objective, second) of the first-pass trials whose capacity is a lower
    bound: drawn apart from the front, which they are not on (tuning.front.front_numbers)."""
    m = list(study.metric_names or [])
    if len(m) < 2:
        return []
    return [(r.number, r.values[m[0]], r.values[m[1]]) for _, r in _first_pass(study)
            if r.bound_only]


def trials_frame(recs: list[TrialRecord], metrics: list[str], front: set[int]) -> pd.DataFrame:
    """One row per trial: number, status, flags and the objectives (empty when not measured);
    the columns stand with no trial too (a study whose only trial failed)."""
    cols = ["number", "status", "baseline", "feasible", "on_front", "cause", "params", *metrics]
    return pd.DataFrame(columns=cols, data=[{
        "number": r.number, "status": r.status.value, "baseline": r.baseline,
        "feasible": r.feasible, "on_front": r.number in front, "cause": r.cause or "",
        "params": params_text(r.params) if not r.baseline else "(vLLM defaults)",
        **{m: r.value(m) for m in metrics},
    } for r in recs])


def _baseline(recs: list[TrialRecord], metrics: list[str]) -> tuple[float, float] | None:
    base = next((r for r in recs if r.baseline and r.measured), None)
    if base is None or len(metrics) < 2:
        return None
    return base.values[metrics[0]], base.values[metrics[1]]


BOUND_LABEL = "capacity a lower bound (search stopped early)"


def pareto_html(study: optuna.Study, path: Path, title: str, pooled: Pooled | None = None
                ) -> None:
    """Optuna's interactive Pareto plot (infeasible trials greyed), with the baseline starred."""
    import plotly.graph_objects as go
    from optuna.visualization import plot_pareto_front

    copy = measured_study(study, full_only=True, pooled=pooled)
    names = [short_metric(m) for m in copy.metric_names or []] or None
    fig = plot_pareto_front(copy, target_names=names)
    base = _baseline(records(study), list(study.metric_names or []))
    if base is not None:
        fig.add_trace(go.Scatter(x=[base[0]], y=[base[1]], mode="markers",
                                 name="baseline (vLLM defaults)",
                                 marker={"symbol": "star", "size": 16, "color": "black"}))
    if bound := bound_points(study):
        fig.add_trace(go.Scatter(x=[b[1] for b in bound], y=[b[2] for b in bound],
                                 mode="markers", name=BOUND_LABEL,
                                 text=[f"trial {b[0]}" for b in bound],
                                 marker={"symbol": "triangle-right-open", "size": 11,
                                         "color": "grey"}))
    fig.update_layout(title=f"{title}: {trial_counts(records(study))} (no boot, no service, "
                      "or interrupted)",
                      template="plotly_white")
    fig.write_html(path, include_plotlyjs="cdn")


def _error_bars(ax: Any, recs: list[TrialRecord], metrics: list[str]) -> None:
    """Each config booted more than once: its median over the boots with the 95% bootstrap
    interval of both objectives, as error bars."""
    if len(metrics) < 2:
        return
    first = True
    for _num, vals in config_boots(recs, metrics[:2]).items():
        (mx, lx, hx), (my, ly, hy) = (median_ci(vals[m]) for m in metrics[:2])
        ax.errorbar([mx], [my], xerr=[[mx - lx], [hx - mx]], yerr=[[my - ly], [hy - my]],
                    fmt="D", ms=5, c="tab:red", capsize=4, zorder=6,
                    label="median of repeated boots, its interval" if first else None)
        first = False


def pareto_png(study: optuna.Study, path: Path, title: str, pooled: Pooled | None = None
               ) -> None:
    """The same plot as a PNG (Optuna's matplotlib backend), for reports and MLflow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization.matplotlib import plot_pareto_front

    copy = measured_study(study, full_only=True, pooled=pooled)
    names = [short_metric(m) for m in copy.metric_names or []] or None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the matplotlib backend is "experimental"
        ax = plot_pareto_front(copy, target_names=names)
    base = _baseline(records(study), list(study.metric_names or []))
    if base is not None:
        ax.scatter([base[0]], [base[1]], marker="*", s=220, c="black",
                   label="baseline (defaults)", zorder=5)
    if bound := bound_points(study):
        ax.scatter([b[1] for b in bound], [b[2] for b in bound], marker=">", s=60,
                   facecolors="none", edgecolors="grey", label=BOUND_LABEL, zorder=4)
    for t in first_pass(study):  # annotated with the study's own trial numbers
        v = [pooled[t.number][m] for m in study.metric_names or []] if pooled and \
            t.number in pooled else t.values
        if v and len(v) >= 2:
            ax.annotate(str(t.number), (v[0], v[1]), textcoords="offset points",
                        xytext=(4, 4), fontsize=7)
    recs = records(study)
    _error_bars(ax, recs, list(study.metric_names or []))
    ax.legend(fontsize=8)
    ax.set_title(f"{title}: {trial_counts(recs)}")
    fig = ax.get_figure(root=True)
    assert fig is not None
    fig.set_size_inches(8, 5.5)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def hypervolume_history(study: optuna.Study) -> pd.DataFrame | None:
    """The hypervolume of the feasible measured trials after each trial, computed directly
    (objectives turned into losses; the reference point is half the worst maximized value
    and twice the worst minimized one among feasible trials)."""
    from optuna._hypervolume import compute_hypervolume

    if len(study.directions) < 2:
        return None
    recs = records(study)
    signs = np.array([-1.0 if d == optuna.study.StudyDirection.MAXIMIZE else 1.0
                      for d in study.directions])
    names = list(study.metric_names or [])
    feasible = [r for r in recs if r.feasible]
    if not feasible or not names:
        return None
    vals = np.array([[r.values[m] for m in names] for r in feasible])
    worst = np.where(signs < 0, vals.min(axis=0) * 0.5, vals.max(axis=0) * 2.0)
    ref = worst * signs
    rows, pts = [], []
    for r in recs:
        if r.feasible:
            pts.append(np.array([r.values[m] for m in names]) * signs)
        hv = compute_hypervolume(np.array(pts), ref) if pts else 0.0
        rows.append({"trial": r.number, "hypervolume": float(hv)})
    return pd.DataFrame(rows)


def _objective_value(i: int, t: optuna.trial.FrozenTrial) -> float:
    return float(t.values[i])


def importances(study: optuna.Study, metrics: list[str]) -> dict[str, dict[str, float]]:
    """Parameter importances per objective where Optuna can compute them (measured trials)."""
    out: dict[str, dict[str, float]] = {}
    copy = measured_study(study, with_params=True)
    if len(copy.trials) < 3:
        return out
    for i, m in enumerate(metrics):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "few trials per regime": expected early on
                out[m] = optuna.importance.get_param_importances(
                    copy, target=partial(_objective_value, i))
        except (ValueError, RuntimeError, ZeroDivisionError):
            continue  # too few trials sharing a parameter, or no variance yet
    return out


PANELS = (("total_token_throughput", "total tok/s"), ("p99_ttft_ms", "p99 TTFT ms (log)"),
          ("p99_tpot_ms", "p99 TPOT ms (log)"))


def _curve_axes(slos: list[SLOConfig], axis: str) -> tuple[Any, list[Any]]:
    """Three panels against load: throughput, p99 TTFT, p99 TPOT (their SLOs dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for ax, (metric, label) in zip(axes, PANELS, strict=True):
        ax.set_ylabel(label)
        ax.set_xlabel(f"load ({axis})")
        ax.grid(alpha=0.3)
        if metric != "total_token_throughput":
            ax.set_yscale("log")
        for slo in slos:
            if slo.metric == metric and slo.max is not None:
                ax.axhline(slo.max, ls="--", lw=1, color="black", label=f"SLO {slo.text()}")
    return fig, list(axes)


def _draw(axes: list[Any], rec: TrialRecord, label: str, profile: str | None = None,
          color: Any = None, **kw: Any) -> None:
    pts = rec.curve(profile)
    x = [p.load for p in pts]
    for ax, (metric, _) in zip(axes, PANELS, strict=True):
        ys = [max(p.metrics[metric], 1e-3) for p in pts]
        line = ax.plot(x, ys, "-", color=color, label=label, **kw)
        color = line[0].get_color()
        ax.scatter(x, ys, s=22, zorder=3, color=color,
                   facecolors=[color if p.passed else "white" for p in pts])


def _cap_key(profile: str | None) -> str:
    return f"{profile}/capacity" if profile else "capacity"


def capacity_png(rec: TrialRecord, slos: list[SLOConfig], axis: str, path: Path,
                 profile: str | None = None) -> None:
    """One trial's load curve (of `profile`, in a capacity suite): throughput, p99 TTFT and
    p99 TPOT against load, SLO lines dashed, failing points hollow, the capacity marked."""
    import matplotlib.pyplot as plt

    fig, axes = _curve_axes(slos, axis)
    _draw(axes, rec, f"trial {rec.number}" + (f" ({profile})" if profile else ""), profile)
    cap = rec.metrics.get(_cap_key(profile), 0.0)
    for ax in axes:
        if cap:
            ax.axvline(cap, color="green", lw=1, label=f"capacity {cap:g}")
    axes[1].legend(fontsize=7)
    what = "vLLM defaults" if rec.baseline else params_text(rec.params)
    fig.suptitle(f"trial {rec.number}: {what}"[:160], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def capacity_overlay_png(recs: list[TrialRecord], slos: list[SLOConfig], axis: str,
                         path: Path, profile: str | None = None) -> None:
    """Every trial's load curve (of `profile`, in a capacity suite) on one figure (the study's
    parent run): failing points hollow, each trial labelled with its capacity ("≥" for a search
    stopped early below the incumbent)."""
    import matplotlib.pyplot as plt

    fig, axes = _curve_axes(slos, axis)
    drawn = [r for r in recs if r.curve(profile)]
    # tab20's 20 colours: matplotlib's default cycle repeats after 10 trials
    colors = [plt.get_cmap("tab20")(i) for i in range(20)]
    for i, r in enumerate(drawn):
        bound = "≥" if r.lower_bound(_cap_key(profile)) else ""  # stopped early
        label = f"{r.number}{' (base)' if r.baseline else ''}: " \
                f"{bound}{r.metrics.get(_cap_key(profile), 0):.4g}"
        _draw(axes, r, label, profile, color=colors[i % len(colors)],
              lw=1.8 if r.baseline else 1.0)
    axes[0].legend(fontsize=6, title="trial: capacity", title_fontsize=7, ncol=2)
    fig.suptitle("load curves of every trial" + (f", profile {profile}" if profile else "")
                 + " (hollow: the SLOs missed)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def confirm_png(res: ConfirmResult, path: Path) -> None:
    """The confirm phase: every boot of each config as a dot, its median with its order-statistic
    interval as an error bar, and the baseline's median and noise floor as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = []
    for i, (num, row) in enumerate(res.configs.items()):
        vals = row.values
        ax.scatter([i] * len(vals), vals, s=18, c="grey", alpha=0.7, zorder=2)
        ax.errorbar([i], [row.median], yerr=[[row.median - row.ci_low],
                                             [row.ci_high - row.median]],
                    fmt="o", capsize=6, c="black" if num == res.base else "tab:blue", zorder=3)
        labels.append(f"trial {num}" + (" (base)" if num == res.base else "")
                      + ("" if not row.text else "\n" + row.text.replace(" (", "\n(")))
    if res.base in res.configs:
        med = res.configs[res.base].median
        ax.axhspan(med * (1 - res.noise_floor), med * (1 + res.noise_floor), color="grey",
                   alpha=0.15, label=f"baseline median ± noise floor ({res.noise_floor:.1%})")
        ax.legend(fontsize=8)
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylabel(short_metric(res.metric))
    ax.set_title(f"confirm phase: {res.repeats} more boots each, interleaved "
                 "(median, order-statistic interval: the range below 6 boots)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
