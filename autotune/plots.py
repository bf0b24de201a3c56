"""Pictures of a study: the Pareto front (interactive HTML and PNG) and the hypervolume history."""

from __future__ import annotations

import warnings
from functools import partial
from pathlib import Path
from typing import Any

import optuna
import pandas as pd

from autotune.present import short_metric


def trials_frame(rows: list[dict[str, Any]], metrics: list[str], front: set[int]) -> pd.DataFrame:
    df = pd.DataFrame([{
        "number": r["number"], "baseline": r["baseline"], "feasible": r["feasible"],
        "on_front": r["number"] in front, "cause": r["cause"] or "",
        "params": " ".join(f"{k}={v}" for k, v in r["params"].items()) or "(defaults)",
        **{m: r[m] for m in metrics},
    } for r in rows])
    return df


def pareto_html(df: pd.DataFrame, metrics: list[str], path: Path, title: str) -> None:
    import plotly.graph_objects as go

    x, y = metrics[1] if len(metrics) > 1 else metrics[0], metrics[0]
    fig = go.Figure()
    groups = [
        ("infeasible (SLO miss)", df[~df.feasible & (df.cause == "")], "lightgrey", "circle"),
        ("feasible", df[df.feasible & ~df.on_front & ~df.baseline], "steelblue", "circle"),
        ("Pareto front", df[df.on_front & ~df.baseline].sort_values(x), "crimson", "diamond"),
        ("baseline (vLLM defaults)", df[df.baseline & (df.cause == "")], "black", "star"),
    ]
    for name, g, color, symbol in groups:
        if g.empty:
            continue
        fig.add_trace(go.Scatter(
            x=g[x], y=g[y], name=name, mode="markers+lines" if name == "Pareto front"
            else "markers", marker={"color": color, "size": 11, "symbol": symbol},
            text=[f"trial {n}<br>{p}" for n, p in zip(g.number, g.params, strict=True)],
            hovertemplate="%{text}<br>" + f"{x}=%{{x:.2f}}<br>{y}=%{{y:.1f}}<extra></extra>",
        ))
    failed = df[df.cause != ""]
    fig.update_layout(title=f"{title}: {len(df)} trials, {len(failed)} without a measurement "
                      "(no boot, no service, or interrupted)",
                      xaxis_title=short_metric(x), yaxis_title=short_metric(y),
                      template="plotly_white")
    fig.write_html(path, include_plotlyjs="cdn")


def pareto_png(df: pd.DataFrame, metrics: list[str], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, y = metrics[1] if len(metrics) > 1 else metrics[0], metrics[0]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    ok = df[df.cause == ""]
    ax.scatter(ok[~ok.feasible][x], ok[~ok.feasible][y], c="lightgrey", label="SLO miss")
    ax.scatter(ok[ok.feasible][x], ok[ok.feasible][y], c="steelblue", label="feasible")
    f = ok[ok.on_front].sort_values(x)
    ax.plot(f[x], f[y], "D-", c="crimson", label="Pareto front")
    b = ok[ok.baseline]
    ax.scatter(b[x], b[y], marker="*", s=220, c="black", label="baseline (defaults)", zorder=5)
    for _, r in ok.iterrows():
        ax.annotate(str(r.number), (r[x], r[y]), textcoords="offset points", xytext=(4, 4),
                    fontsize=7)
    ax.set_xlabel(short_metric(x))
    ax.set_ylabel(short_metric(y))
    ax.set_title(f"{title}: {len(df)} trials, {len(df) - len(ok)} without a measurement")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def hypervolume_history(study: optuna.Study, path_html: Path) -> pd.DataFrame | None:
    """Optuna's hypervolume history (feasible trials), as HTML and as a table."""
    from optuna.visualization import plot_hypervolume_history

    feasible = [t for t in study.best_trials]
    if len(study.directions) < 2 or not feasible:
        return None
    worst = []
    for i, d in enumerate(study.directions):
        vals = [t.values[i] for t in feasible]
        worst.append(min(vals) * 0.5 if d == optuna.study.StudyDirection.MAXIMIZE
                     else max(vals) * 2.0)
    fig = plot_hypervolume_history(study, reference_point=worst)
    fig.write_html(path_html, include_plotlyjs="cdn")
    tr = fig.data[0]
    return pd.DataFrame({"trial": list(tr.x), "hypervolume": list(tr.y)})


def _objective_value(i: int, t: optuna.trial.FrozenTrial) -> float:
    return float(t.values[i])


def importances(study: optuna.Study, metrics: list[str]) -> dict[str, dict[str, float]]:
    """Parameter importances per objective where Optuna can compute them."""
    out: dict[str, dict[str, float]] = {}
    done = [t for t in study.get_trials(deepcopy=False,
                                        states=(optuna.trial.TrialState.COMPLETE,))
            if t.params and not t.user_attrs.get("failure")]
    if len(done) < 3:
        return out
    for i, m in enumerate(metrics):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "few trials per regime": expected early on
                out[m] = optuna.importance.get_param_importances(
                    study, target=partial(_objective_value, i))
        except (ValueError, RuntimeError, ZeroDivisionError):
            continue  # too few trials sharing a parameter, or no variance yet
    return out
