"""A study's tables and live view: every trial with its change against vLLM's defaults, the
Pareto front, the confirm phase, and the progress of a running study."""

from __future__ import annotations

import statistics
from typing import Any

from optuna.trial import FrozenTrial
from rich.markup import escape
from rich.table import Table

from autotune.config.quality import QUALITY_OK
from autotune.config.study import StudyConfig
from autotune.measure.stats import Gain, interval_name
from autotune.outputs.console import (
    PhaseLines,
    console,
    fmt_value,
    out,
    params_text,
    progress_bar,
    short_cause,
    short_metric,
)
from autotune.tuning.confirm import ConfirmResult
from autotune.tuning.record import Status, TrialRecord
from autotune.tuning.summary import StudySummary
from autotune.tuning.verdict import verdict_text


def gain_text(g: Gain) -> str:
    """A gain as every view prints it: "+75.1%, one measurement" until the config and the
    baseline were both measured more than once, then "+12.4% [+9.8, +15.1], 3 boots" or
    "no significant change (+3.1% [-2.0, +8.3]), 3 boots" (the config's boots, `Gain.n`);
    from too few boots to bound it, `Gain.text` says so and how many would."""
    if g.n < 2 or g.n_base < 2:
        return f"{g.gain * 100:+.1f}%, one measurement"
    if not g.bounded:
        return g.text()
    return f"{g.text()}, {g.n} boots"


def capacity_line(cfg: StudyConfig, rec: TrialRecord | None) -> str | None:
    """What a trial's capacity means, in the words every surface says it in ("trial 3 serves
    your traffic at up to 2.3x its recorded rate within the SLOs (...)"); None outside a
    one-profile capacity study, or for a trial without a capacity."""
    from autotune.measure.capacity import capacity_sentence

    c = None if rec is None else rec.values.get("capacity", rec.metrics.get("capacity"))
    if cfg.capacity is None or cfg.profiles or rec is None or c is None:
        return None
    who = f"vLLM's defaults (trial {rec.number})" if rec.baseline else f"trial {rec.number}"
    return f"{who} {capacity_sentence(cfg.capacity.axis, c, ', '.join(s.text() for s in cfg.slos))}"


def value_text(r: TrialRecord, m: str, v: Any, g: Gain | None) -> str:
    """A trial's value of `m` with its change against the baseline (and, where the change
    pools several boots of the config, their geometric mean, which the change is of). A
    capacity search that stopped early below the incumbent gives a lower bound: "≥42.19,
    stopped early" (no change printed: a bound's change against the baseline's measurement
    would read as a loss). A capacity whose every point measured the load generator reads
    "-, no server verdict"."""
    if v is not None and r.lower_bound(m):
        return f"≥{fmt_value(v)}, stopped early"
    if r.unjudged(m):  # its 0 is no measurement: every point measured the client
        return "-, no server verdict"
    if g is not None and g.n > 1 and g.value is not None:
        # the change is of the config's geometric mean over its boots (stats.gain_ci): show
        # it beside the change, so a boot reading above the baseline's is not read as a loss
        return f"{fmt_value(v)}; geo. mean {fmt_value(g.value)} ({gain_text(g)})"
    return fmt_value(v) + (f" ({gain_text(g)})" if g is not None else "")


def base_figure(g: Gain | None) -> str:
    """The figure every gain divides by, where vLLM's defaults were booted more than once:
    "geo. mean 14,610.58 of 3 boots" (`g`: the summary's gain of the defaults' config, whose
    `base_value` it is); empty for one boot (its value is the figure)."""
    if g is None or g.n_base < 2 or g.base_value is None:
        return ""
    return f"geo. mean {fmt_value(g.base_value)} of {g.n_base} boots"


def base_text(r: TrialRecord, m: str, v: Any, g: Gain | None) -> str:
    """A boot of vLLM's defaults: its value and, where the defaults were booted more than
    once, the geometric mean over every boot that each gain divides by (base_figure)."""
    if v is None or r.lower_bound(m) or not (figure := base_figure(g)):
        return value_text(r, m, v, None)
    return f"{fmt_value(v)}; {figure}"


def change_text(summary: StudySummary, r: TrialRecord, m: str) -> str:
    """The change alone, where the value has a column of its own (the report): the gain and,
    pooled over several boots, the geometric mean it is of; for the defaults' boots the figure
    each gain divides by (base_figure)."""
    g = summary.gains.get(r.number, {}).get(m)
    if is_base(r, summary.records):
        return base_figure(g)
    if g is None:
        return ""
    pooled = g.n > 1 and g.value is not None
    return gain_text(g) + (f"; of geo. mean {fmt_value(g.value)}" if pooled else "")


def cell_text(summary: StudySummary, r: TrialRecord, m: str, v: Any,
              gains: dict[int, dict[str, Gain]] | None = None) -> str:
    """A trial's cell for `m`, as the tables and the live line both print it: the defaults'
    boots with the figure each gain divides by, any other config with its gain (the
    summary's, or a suite's per-profile `gains`)."""
    g = (summary.gains if gains is None else gains).get(r.number, {}).get(m)
    return base_text(r, m, v, g) if is_base(r, summary.records) else value_text(r, m, v, g)


def is_base(r: TrialRecord, recs: list[TrialRecord]) -> bool:
    """The baseline trial, or a repeat of it (no gain to print against itself)."""
    return r.baseline or (r.facts.repeat_of is not None and any(
        b.number == r.facts.repeat_of and b.baseline for b in recs))


GAIN_CAPTION = ("change vs the baseline: every boot of a config against every boot of the "
                "baseline's (ratio of geometric means, each row's shown once it has several "
                "boots); [95% t-interval on the logs] once both were measured more than once")


def trials_table(summary: StudySummary, cfg: StudyConfig, title: str = "Trials",
                 rows: list[TrialRecord] | None = None, width: int | None = None) -> Table:
    """Every trial (or `rows`): status, objectives with their change against the baseline (and
    a suite's per-profile values), boot and benchmark seconds, flags, and the cause of a
    failure; the recommended config marked "★ pick", an artefact "artefact". A change pools
    every boot of the same flags: one measurement, or a median with its interval (the
    summary's gains). Laid out for `width` columns (default: the output console's; 100 when
    piped)."""
    metrics, extra = summary.metrics, summary.profile_metrics
    recs = summary.records if rows is None else rows
    gains = summary.profile_gains if extra else summary.gains
    pick = summary.recommendation.number
    cert = summary.certification
    certified = (f"; the pick's {metrics[0]}: its certified interval over boots "
                 f"({cert.gain['coverage']:.0%}, docs/certify.md)"
                 if cert is not None and cert.gain else "")
    t = Table(title=title, header_style="bold", caption=GAIN_CAPTION + certified
              + (f"\n★ recommended: {summary.headline()}" if pick is not None else ""))
    t.add_column("#", justify="right")
    t.add_column("state")
    # 19 columns for the borders, 48 for #, state, seconds and one flag whole
    # (enable_chunked_prefill=False), the rest shared by the metrics, whose cells wrap
    # between words (a value is one word); narrower than 100, the flags' cell gives way too,
    # so nothing is cropped
    full = width or out.width
    flags_min = 28 if full >= 100 else max(12, full - 19 - 20 - 12 * len(metrics + extra))
    share = max(12, (full - 19 - 20 - flags_min) // max(len(metrics + extra), 1))
    for m in metrics + extra:  # two header lines: the name whole, then "(vs base)"
        t.add_column(f"{short_metric(m)}\n(vs base)", justify="right", max_width=share)
    t.add_column("boot/load\ns", justify="right")
    # wide enough for one flag whole (enable_chunked_prefill=False); longer ones fold
    t.add_column("flags set / cause", overflow="fold", min_width=flags_min)
    for r in recs:
        state = STATUS_STYLE.get(r.status, "{}").format(r.label())
        if r.baseline:
            state += " (base)"
        if r.number in summary.artefacts:
            state += " [red]artefact[/red]"
        cells = [str(r.number) + ("[bold]★[/bold]" if r.number == pick else ""), state]
        for m in metrics + extra:
            v = r.values.get(m, r.metrics.get(m) if m in extra else None)
            cells.append(cell_text(summary, r, m, v, gains))
        tm = r.timings
        cells.append(f"{tm.get('boot_s', 0):.1f}/{tm.get('bench_s', 0):.1f}" if tm else "-")
        text = escape(f"repeat of trial {r.facts.repeat_of}" if r.facts.repeat_of is not None
                      else params_text(r.params))
        q = r.facts.quality
        failed = r.constraints.get(QUALITY_OK, 0.0) > 0
        said = verdict_text(q, failed) if q else ""
        # the guard's verdict on a line of its own (with the floor), the measurement's after
        cause = (r.cause or "").removeprefix(f"quality: {said}").lstrip("; ") if said \
            else (r.cause or "")
        shown = short_cause(cause, 200) if cause else ""
        if shown:
            text += f"\n[red]{escape(shown)}[/red]"
        if r.number in summary.artefacts:
            text += f"\n[red]{escape(summary.artefacts[r.number])}[/red]"
        if said:
            style = "red" if failed else "default"
            text += f"\n[{style}]quality: {escape(short_cause(said, 400))}[/{style}]"
        cells.append(text)
        t.add_row(*cells)
    return t


FRONT_TITLE = "Pareto front (feasible, pooled values)"
OFF_FRONT_TITLE = "Recommended, not on the Pareto front"


def front_tables(summary: StudySummary, cfg: StudyConfig, title: str = FRONT_TITLE,
                 width: int | None = None) -> list[Table | str]:
    """The feasible front (its members only), then, where the recommendation is not on it,
    the recommended config in a table of its own and the line saying why (the summary's
    `off_front`): what `pareto` and the end of a study print."""
    shown: list[Table | str] = [trials_table(summary, cfg, title=title,
                                             rows=summary.front_rows, width=width)]
    if summary.off_front is not None and summary.picked is not None:
        shown += [trials_table(summary, cfg, title=OFF_FRONT_TITLE, rows=[summary.picked],
                               width=width), summary.off_front]
    return shown


STATUS_STYLE = {Status.OK: "[green]{}[/green]", Status.SLO_MISS: "[yellow]{}[/yellow]",
                Status.INFEASIBLE: "[red]{}[/red]", Status.ERROR: "[red]{}[/red]"}


class StudyView:
    """Live progress of a study: an overall bar and the current trial's phase, with the time
    into the trial and what a trial took so far; where output is not a terminal (a log file,
    CI, nohup), one timestamped line per phase instead (outputs/console.py PhaseLines)."""

    def __init__(self, total: int, done: int, metrics: list[str],
                 cfg: StudyConfig | None = None) -> None:
        self.metrics = metrics
        self.cfg = cfg  # for the bill so far, printed with each trial
        self.progress = progress_bar()
        self.task = self.progress.add_task("study", total=total, completed=done)
        self.lines = PhaseLines()
        self.took: list[float] = []  # seconds of the measured trials seen, for the estimate

    def __enter__(self) -> StudyView:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def on_phase(self, number: int, phase: str, flags: dict[str, Any]) -> None:
        what = f"trial {number}: {phase}" if number >= 0 else phase
        typical = statistics.median(self.took) if self.took else None
        since = self.lines.phase(what, number if number >= 0 else None, typical)
        self.progress.update(self.task, description=escape(what), since=since,
                             typical=typical)

    def on_running(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def step(self, text: str) -> None:
        """A step of the study beyond its trials (the certify phase), as its own line."""
        console.print(text, highlight=False, soft_wrap=True)

    def on_trial(self, summary: StudySummary, trial: FrozenTrial) -> None:
        self.progress.advance(self.task)
        self.took = [r.timings["total_s"] for r in summary.records
                     if r.measured and "total_s" in r.timings][1:] or self.took
        rec = next(r for r in summary.records if r.number == trial.number)
        if rec.measured:  # its cells as the trials table prints them
            parts = [f"{m} " + cell_text(summary, rec, m, v) for m, v in rec.values.items()]
            msg = ", ".join(parts)
            if rec.status == Status.SLO_MISS:
                msg = f"[yellow]{rec.label()}[/yellow]: " + msg
        elif rec.cause:
            msg = f"[red]{rec.label()}[/red]: {escape(short_cause(rec.cause, 150))}"
        else:
            msg = rec.label()
        what = f"repeat of trial {rec.facts.repeat_of}" if rec.facts.repeat_of is not None \
            else params_text(trial.params)
        cost = ""
        if self.cfg is not None:
            from autotune.tuning.bill import bill

            b = bill(summary.records, self.cfg)
            cost = f" [dim](bill so far {b.total:.1f} {b.unit})[/dim]"
        console.print(f"trial {trial.number}: {msg}  [dim]{escape(what)}[/dim]{cost}",
                      highlight=False)


def confirm_table(res: ConfirmResult) -> Table:
    """The confirm phase: each config's boots, median and interval, and gain."""
    t = Table(title=f"confirm: {res.metric} (noise floor {res.noise_floor:.1%}, the "
              "baseline's relative sd across its boots)", header_style="bold")
    n = max((len(r.values) for r in res.configs.values()), default=0)
    for col in ("trial", "boots", f"median [{interval_name(n)}]", "gain vs defaults [95%]"):
        t.add_column(col, justify="right")
    for num, row in res.configs.items():
        t.add_row(str(num) + (" (base)" if num == res.base else ""), str(len(row.values)),
                  f"{row.median:,.2f} [{row.ci_low:,.2f}, {row.ci_high:,.2f}]", row.text)
    return t


def confirm_lines(res: ConfirmResult) -> list[str]:
    """Which first-pass winners survived on the first objective (the recommendation, over
    every objective, is the study summary's: the `deploy:` line)."""
    lines = []
    for num, row in res.configs.items():
        if num == res.base or row.gain is None:
            continue
        first = row.values[0] / res.configs[res.base].values[0] - 1 \
            if res.base in res.configs else None
        verdict = ("better beyond the noise" if row.survives else "worse beyond the noise"
                   if row.gain.significant else "within the noise")
        lines.append(f"trial {num}: first pass {first * 100:+.1f}% (one measurement each); "
                     f"after {len(row.values)} boots {row.text}: {verdict}"
                     if first is not None else f"trial {num}: {row.text}")
    if res.by_point_estimate is not None:  # the recommendation is the summary's (deploy:)
        lines.append(f"on {res.metric}'s medians alone, the pick would be trial "
                     f"{res.by_point_estimate}")
    return lines
