"""Samplers replayed against a measured grid, as `autotune replay` runs it (`replay_samplers`):
the table read from the study's storage or a table.json, the samplers run over many seeds
(autotune.tuning.replay), how many trials each took to come near the table's best printed and
written; or, instead, measured configs enqueued again so the table gets repeats
(`enqueue_repeats`)."""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table as RichTable

from autotune.config.metric_names import did_you_mean
from autotune.config.paths import check_folder
from autotune.config.study import StudyConfig
from autotune.errors import StudyError
from autotune.outputs.console import console, out, trial_progress
from autotune.tuning.replay import (
    SAMPLERS,
    Plan,
    SamplerSummary,
    Table,
    plot,
    replay,
    replay_starts,
    table_from_json,
    table_from_study,
)
from autotune.tuning.study import open_study


@dataclass(frozen=True)
class ReplayOptions:
    """What `autotune replay` replays: one objective (default: the study's first), the
    samplers (default: all), over `seeds` seeds of `budget` trials each (default: the table's
    configs), with the study's baseline first and its starts; from the storage or `table`."""

    metric: str | None = None
    seeds: int = 50
    budget: int | None = None
    samplers: str | None = None  # comma-separated
    starts: tuple[str, ...] = ()  # K=V,... each
    baseline: bool = True
    startup: int | None = None
    out_dir: Path | None = None
    table: Path | None = None


def replay_table(cfg: StudyConfig, metric: str | None, path: Path | None) -> Table:
    """The measured table of `metric` (default: the first objective): `path`'s, else the
    study's storage's; an error where no trial measured it."""
    name = metric or cfg.metric_names()[0]
    names = cfg.metric_names()
    if path is not None:
        if name not in names:
            raise StudyError(f"--metric {name}: not an objective of the config"
                             f"{did_you_mean(name, names)} (its objectives: {', '.join(names)})")
        try:
            table = table_from_json(path, cfg.objectives[names.index(name)].direction)
        except ValueError as e:
            raise StudyError(f"--table {path}: {e}") from None
        source = str(path)
    else:
        table = table_from_study(open_study(cfg, create=False), name)
        source = f"study {cfg.name!r}"
    if not any(table.values.values()):
        near = "" if name in names else did_you_mean(name, names)
        raise StudyError(f"{'--metric ' + name + ': ' if metric else ''}{source} has no trial "
                         f"that measured {name} to replay{near} (its objectives: "
                         f"{', '.join(names)})")
    return table


def enqueue_repeats(cfg: StudyConfig, metric: str | None, n: int, config_path: Path) -> int:
    """`autotune replay --repeat N`: enqueue N measured configs again (seeded), so that the
    table gets repeats once the same `autotune study` runs them."""
    table = replay_table(cfg, metric, None)
    st = open_study(cfg, create=False)
    measured = sorted(k for k, v in table.values.items() if v)
    pick = random.Random(len(st.trials)).sample(measured, min(n, len(measured)))
    for k in pick:
        st.enqueue_trial(table.params[k])
    console.print(f"enqueued {len(pick)} configs again; run `autotune study --config "
                  f"{config_path} --n-trials {len(st.trials)}` to measure them",
                  highlight=False)
    return len(pick)


def replay_samplers(cfg: StudyConfig, opts: ReplayOptions) -> dict[str, SamplerSummary]:
    """`autotune replay`: each sampler's trials to come within 2% and 5% of the table's best,
    its median over the seeds, printed (and with `out_dir`, summary.json, table.json and
    curves.png written there)."""
    if opts.out_dir is not None:
        check_folder(opts.out_dir, "--out")
    name = opts.metric or cfg.metric_names()[0]
    table = replay_table(cfg, opts.metric, opts.table)
    names, starts = sampler_names(cfg, table, opts)
    n = opts.budget or len(table.values)
    repeated = sum(len(v) > 1 for v in table.values.values())
    console.print(f"table: {len(table.values)} configs ({sum(not v for v in table.values.values())}"
                  f" infeasible, {repeated} measured more than once), best {table.best:,.2f}, "
                  f"noise {table.noise():.1%}; {opts.seeds} seeds x {n} trials", highlight=False)
    plan = Plan(opts.baseline, tuple(starts))
    if opts.startup is not None:
        plan = dataclasses.replace(plan, startup=opts.startup)
    with trial_progress("replay", len(names) * opts.seeds) as tp:
        res = replay(table, names, opts.seeds, n, on_done=lambda *_: tp.request_done(None),
                     plan=plan)
    t = RichTable(title=f"{cfg.name}: {name}", header_style="bold")
    for col in ("sampler", "median trials to 2%", "median trials to 5%", "within 2% at 16"):
        t.add_column(col, justify="right")
    for s, r in res.items():
        t.add_row(s, *("never" if v is None else f"{v:g}" for v in (
            r.median_trials_to_2pct, r.median_trials_to_5pct)),
            f"{r.share_within_2pct_at_16:.0%}")
    out.print(t)
    if opts.out_dir is not None:
        write_replay(opts.out_dir, cfg, name, table, res, {
            "seeds": opts.seeds, "budget": n, "baseline_first": opts.baseline,
            "starts": starts, "n_startup_trials": plan.startup})
    return res


def sampler_names(cfg: StudyConfig, table: Table, opts: ReplayOptions
                  ) -> tuple[list[str], list[dict[str, Any]]]:
    """The samplers to replay, and the starts tpe-starts replays (none: it is left out)."""
    names = [s.strip() for s in (opts.samplers or ",".join(SAMPLERS)).split(",") if s.strip()]
    bad = [s for s in names if s not in SAMPLERS]
    if bad:
        raise StudyError(f"--samplers: unknown {', '.join(bad)}; known: {', '.join(SAMPLERS)}")
    try:
        starts = replay_starts(table, opts.starts, cfg) if "tpe-starts" in names else []
    except ValueError as e:
        raise StudyError(str(e)) from None
    if not starts and "tpe-starts" in names:
        if opts.samplers:
            raise StudyError("--samplers tpe-starts: no starts to replay; give --start "
                             "K=V,... or `starts:` in the config or its search space")
        names.remove("tpe-starts")
    return names, starts


def write_replay(out_dir: Path, cfg: StudyConfig, name: str, table: Table,
                 res: dict[str, SamplerSummary], run: dict[str, Any]) -> None:
    """summary.json (the table, the run and each sampler's figures), table.json (the table,
    to replay again with --table) and curves.png."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps({
        "study": cfg.name, "metric": name, "direction": table.direction,
        "configs": len(table.values), "repeated": sum(len(v) > 1 for v in table.values.values()),
        "noise": table.noise(), "best": table.best, **run,
        "samplers": {s: {"median_trials_to_2pct": r.median_trials_to_2pct,
                         "median_trials_to_5pct": r.median_trials_to_5pct,
                         "share_within_2pct_at_16": r.share_within_2pct_at_16}
                     for s, r in res.items()}}, indent=2) + "\n")
    (out_dir / "table.json").write_text(json.dumps(
        [{"params": table.params[k], "values": v} for k, v in table.values.items()],
        indent=1, default=str) + "\n")
    plot(res, f"{cfg.name}: {name} ({run['seeds']} seeds)", str(out_dir / "curves.png"))
    console.print(f"written to {out_dir}", highlight=False)
