"""A study's report as files: Markdown with every trial's numbers, the Pareto front, where the
time went, and the raw files behind them; plus the Pareto plot. `autotune report` writes it, and
the study pages in docs/results/ are made by it."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import optuna

from autotune.config import weights
from autotune.config.study import StudyConfig
from autotune.measure.stats import interval_name
from autotune.outputs.console import params_text, short_cause, short_metric, speculation_text
from autotune.outputs.tables import capacity_line, change_text, confirm_lines
from autotune.tuning.machines import machines_line
from autotune.tuning.preflight import dropped_note
from autotune.tuning.quality import QUALITY_OK
from autotune.tuning.record import TrialRecord, curve_profiles, study_facts
from autotune.tuning.spend import TRIAL_PHASES, cold_boots, trial_phases
from autotune.tuning.summary import StudySummary, summarize
from autotune.tuning.verdict import verdict_text


@dataclass(frozen=True)
class TimeSplit:
    """Where one trial's wall time went (seconds)."""

    number: int
    label: str
    boot_s: float
    bench_s: float
    stop_s: float
    in_trial_s: float  # wall time in the storage - boot - bench - stop
    between_s: float | None  # from its end to the next trial's start

    @property
    def overhead_s(self) -> float:
        """The tuner's own time: in the trial but outside boot/bench/stop, and until the next
        trial starts (sampling, storage, MLflow logging, progress)."""
        return self.in_trial_s + (self.between_s or 0.0)


def time_split(recs: list[TrialRecord]) -> list[TimeSplit]:
    done = [r for r in recs if r.started is not None and r.completed is not None]
    out = []
    for i, r in enumerate(done):
        assert r.started is not None and r.completed is not None
        wall = (r.completed - r.started).total_seconds()
        tm = r.timings
        boot, bench, stop = (tm.get(k, 0.0) for k in ("boot_s", "bench_s", "stop_s"))
        nxt = done[i + 1] if i + 1 < len(done) else None
        # the gap to the next trial is the tuner's time only within one command run: between
        # two (a study, then `confirm` later) it is the user's pause
        same = nxt is not None and (r.facts.process is None or
                                    nxt.facts.process == r.facts.process)
        gap = (nxt.started - r.completed).total_seconds() \
            if nxt and nxt.started and same else None
        label = "reused" if r.facts.reused_from is not None else r.label()
        out.append(TimeSplit(r.number, label, boot, bench, stop, wall - boot - bench - stop,
                             gap))
    return out


def _f(v: float | None, pct: bool = False) -> str:
    if v is None:
        return ""
    return f"{v * 100:+.1f}%" if pct else f"{v:,.1f}"


def trials_markdown(recs: list[TrialRecord], summary: StudySummary) -> list[str]:
    """A Markdown table of `recs`; a change against the baseline is the summary's (every boot
    of a config pooled, with its interval once repeats exist); the recommendation and any
    measurement artefact marked, a failure's cause in one line."""
    metrics, front = summary.metrics, set(summary.front)
    head = ["#", "state"]
    for m in metrics:
        head += [short_metric(m), "vs base"]
    head += ["boot s", "bench s", "front", "params / cause"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in recs:
        cells = [str(r.number), r.label() + (" (base)" if r.baseline else "")
                 + (" **★ pick**" if r.number == summary.recommendation.number else "")
                 + (" artefact" if r.number in summary.artefacts else "")]
        for m in metrics:
            if r.lower_bound(m):  # no change against the base: it would read as a loss
                cells += [f"≥{_f(r.values.get(m))}", "stopped early"]
                continue
            cells += [_f(r.values.get(m)), change_text(summary, r, m)]
        what = "vLLM defaults" if r.baseline else (
            f"repeat of trial {r.facts.repeat_of}" if r.facts.repeat_of is not None
            else params_text(r.params))
        if r.cause:
            what += f" -- {short_cause(r.cause, 160)}"
        if r.number in summary.artefacts:
            what += f" -- {summary.artefacts[r.number]}"
        cells += [_f(r.timings.get("boot_s")), _f(r.timings.get("bench_s")),
                  "yes" if r.number in front else "", what.replace("|", "\\|")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def curves_markdown(recs: list[TrialRecord], axis: str, profile: str | None = None
                    ) -> list[str]:
    """Every load point of every capacity search (of `profile`, in a capacity suite), in the
    order measured."""
    lines = [f"| trial | load ({axis}) | verdict | req/s | total tok/s | p99 TTFT ms | "
             "p99 TPOT ms | mean TPOT ms | requests | s | missed |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        for p in r.points(profile):
            m = p.metrics
            lines.append(
                f"| {r.number} | {p.load:g} | {'met' if p.passed else 'missed'} | "
                f"{m['request_throughput']:,.1f} | {m['total_token_throughput']:,.0f} | "
                f"{m['p99_ttft_ms']:,.0f} | {m['p99_tpot_ms']:,.1f} | {m['mean_tpot_ms']:,.1f} | "
                f"{m['completed']:.0f} | {p.seconds:.1f} | {'; '.join(p.misses)} |")
    return lines


def confirm_markdown(path: Path, out_dir: Path) -> list[str]:
    """The confirm phase's table from its `confirm.json`, with its plot."""
    import json

    from autotune.outputs import plots
    from autotune.tuning.confirm import ConfirmResult

    d = json.loads(path.read_text())
    res = ConfirmResult.from_json(d)
    plots.confirm_png(res, out_dir / "confirm.png")
    most = max((len(r.values) for r in res.configs.values()), default=0)
    lines = [f"{res.metric}; noise floor {res.noise_floor:.1%} (the baseline's relative sd "
             "across its boots).", "", "![confirm phase](confirm.png)", "",
             f"| trial | boots | median [{interval_name(most)}] | gain vs defaults [95%] |",
             "|---|---|---|---|"]
    for num, row in res.configs.items():
        lines.append(f"| {num}{' (base)' if num == res.base else ''} | {len(row.values)} | "
                     f"{row.median:,.2f} [{row.ci_low:,.2f}, {row.ci_high:,.2f}] | "
                     f"{row.text} |")
    lines += ["", *confirm_lines(res)]
    return lines


def validation_markdown(path: Path) -> list[str]:
    """Each `export --validate` run from the study's `validate.json`: its re-runs (beside the
    study, not in its tables) and its verdict."""
    from autotune.tuning.validation import read_runs

    runs = read_runs(path)
    if not runs:
        return []
    lines = ["", "## Validation (`export --validate`)", "",
             "Re-runs beside the study, not trials of it: the tables above are the study's.", ""]
    for v in runs:
        lines += [f"- trial {v['trial']} against vLLM's defaults (trial {v['baseline']}): "
                  f"{v['metric']} the study said {v['study_gain']['text']}, the re-runs say "
                  f"{v['gain']['text']} ({len(v['boots'])} boots); **{v['verdict']}**: "
                  + "; ".join(v["why"])]
    return lines


def _iv(x: list[float] | None, fmt: str = ".4g") -> str:
    return f"{x[0]:{fmt}} [{x[1]:{fmt}}, {x[2]:{fmt}}]" if x else "-"


def quality_markdown(recs: list[TrialRecord]) -> list[str]:
    """The quality guard's verdict for each trial it looked at, with its figures and the
    defaults' own floor beside them (docs/quality.md)."""
    rows = [(r, r.facts.quality) for r in recs if r.facts.quality]
    if not rows:
        return []
    lines = ["", "## Quality guard", "", "KL(defaults || config) per token, teacher-forced on "
             "the same texts, with its interval over texts; top-1 agreement counts exact ties "
             "as agreement; the floor is the defaults read against themselves the same way.",
             "", "| # | verdict | KL mean | KL p99 | top-1 agree | task drop | floor KL | "
             "guard s | why |", "|---|---|---|---|---|---|---|---|---|"]
    for r, q in rows:
        failed = r.constraints.get(QUALITY_OK, 0.0) > 0
        kl = q.get("kl") or {}
        task = q.get("task")
        floor = (q.get("floor") or {}).get("kl_mean")
        verdict = q.get("verdict") or ("reference" if q.get("floor") else
                                       ("fails the guard" if failed else "passes")
                                       if q.get("judged") else "not judged")
        why = verdict_text(q, failed).removeprefix(f"{q.get('verdict')}: ")
        seconds = q.get("seconds")
        cells = [str(r.number), verdict, _iv(kl.get("kl_mean")), _iv(kl.get("kl_p99")),
                 _iv(kl.get("top1_agree"), ".3f"),
                 f"{task['drop']:+.3f} [{task['low']:+.3f}, {task['high']:+.3f}]"
                 if task else "-", f"{floor:.2g}" if isinstance(floor, int | float) else "-",
                 f"{seconds:.0f}" if isinstance(seconds, int | float) else "-", why]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return lines


def speculation_markdown(recs: list[TrialRecord], summary: StudySummary) -> list[str]:
    """vLLM's speculative-decoding counters of each trial that drafted (docs/quality.md)."""
    rows = [(r, r.speculation) for r in recs if r.speculation]
    if not rows:
        return []
    lines = ["", "## Speculative decoding", "", "vLLM's counters from `/metrics`: over the "
             "measured load, or over the quality guard's greedy run where the load drafted "
             "nothing.", "", "| # | acceptance | tokens a step | drafts | over |",
             "|---|---|---|---|---|"]
    for r, sp in rows:
        assert sp is not None
        rate, length = sp["acceptance_rate"], sp["mean_accepted_length"]
        star = " ★" if r.number == summary.recommendation.number else ""
        lines.append(f"| {r.number}{star} | {'' if rate is None else f'{rate:.1%}'} | "
                     f"{'' if length is None else f'{length:.2f}'} | "
                     f"{sp['drafts']:,.0f} | {sp['source']} |")
    return lines


def time_markdown(split: list[TimeSplit]) -> list[str]:
    lines = ["| # | state | boot s | bench s | stop s | in-trial s | between s | overhead s |",
             "|---|---|---|---|---|---|---|---|"]
    for s in split:
        lines.append(f"| {s.number} | {s.label} | {s.boot_s:.1f} | {s.bench_s:.1f} | "
                     f"{s.stop_s:.1f} | {s.in_trial_s:.2f} | "
                     f"{'' if s.between_s is None else f'{s.between_s:.2f}'} | "
                     f"{s.overhead_s:.2f} |")
    measured = [s.overhead_s for s in split if s.boot_s > 0]
    if measured:
        lines += ["", f"Tuner overhead per measured trial: mean {statistics.mean(measured):.2f} s, "
                      f"max {max(measured):.2f} s ({len(measured)} trials)."]
    return lines


PHASE_HEADS = {"boot_start": "start", "boot_weights": "weights", "boot_compile": "compile",
               "boot_graphs": "CUDA graphs", "boot_kernel_warmup": "kernel warm-up",
               "boot_engine": "engine init", "boot_unsplit": "boot (not split)",
               "guard": "guard", "warmup": "warm-up", "points": "load points", "stop": "stop",
               "rest": "rest"}


def phases_markdown(recs: list[TrialRecord]) -> list[str]:
    """Each trial's wall seconds by phase (tuning.spend: its boot by the phases vLLM's log
    timed, then the warm-up, the load points, the stop, the rest); phases no trial had left
    out."""
    cold = cold_boots(recs)
    rows = [(r, trial_phases(r, (r.completed - r.started).total_seconds())) for r in recs
            if r.started is not None and r.completed is not None]
    keys = [k for k in TRIAL_PHASES if any(k in p for _, p in rows)]
    if not rows or not keys:
        return []
    lines = ["", "Each trial's seconds by phase (the boot's from vLLM's log; cold: torch.compile "
             "compiled, or the study's first boot):", "",
             "| # | boot | " + " | ".join(PHASE_HEADS[k] for k in keys) + " | wall s |",
             "|---|---|" + "---|" * (len(keys) + 1)]
    for r, p in rows:
        kind = "cold" if r.number in cold else "warm" if r.timings.get("boot_s") else ""
        lines.append(f"| {r.number} | {kind} | "
                     + " | ".join(f"{p[k]:.1f}" if k in p else "" for k in keys)
                     + f" | {sum(p.values()):.1f} |")
    return lines


def write_report(study: optuna.Study, cfg: StudyConfig, out_dir: Path) -> Path:
    """Write `report.md` and `pareto.png` into `out_dir`; return the Markdown's path."""
    from autotune.outputs import plots

    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(study, cfg)
    recs = summary.records
    metrics = cfg.metric_names()
    rec = summary.picked
    spec = [f"- the recommended config's {speculation_text(rec.speculation)}"] \
        if rec is not None and rec.speculation else []
    said = capacity_line(cfg, rec)
    spec = ([f"- {said}"] if said else []) + spec
    if weights.shape_only(cfg.server, rec.flags if rec is not None else None):
        spec = [f"- **{weights.STATEMENT.replace(':', '**:', 1)}", *spec]
    lines = [f"# Study `{cfg.name}`", "", f"**Recommended: {summary.headline()}**", "", *spec,
             f"- vLLM {study_facts(study).vllm_version or '?'}; model `{cfg.server.model}`; "
             f"fixed args `{params_text(cfg.server.args)}`",
             f"- profile `{cfg.profile.name}` ({cfg.profile.num_prompts} prompts, concurrency "
             f"{cfg.profile.max_concurrency or 'all'}); space `{cfg.search_space}`; sampler "
             f"{cfg.sampler.name} (seed {cfg.sampler.seed})",
             "- objectives: " + ", ".join(f"{o.direction} {o.metric}" for o in cfg.objectives)
             + (f"; SLOs: {', '.join(s.text() for s in cfg.slos)}" if cfg.slos else ""),
             f"- {len(recs)} trials, {sum(r.measured for r in recs)} measured; "
             f"storage `{cfg.storage_url()}`", *filter(None, [machines_line(study)]),
             *(f"- measured on the requests kept: {d}" for d in filter(None, [dropped_note(cfg)])),
             "",
             "## Trials", ""]
    lines += trials_markdown(recs, summary)
    lines += quality_markdown(recs)
    lines += speculation_markdown(recs, summary)
    if summary.failures:
        lines += ["", "Not measured, in one line each (the full cause is in each trial's "
                  "record and `result.json`):", ""] + [f"- {f}" for f in summary.failures]
    if len(metrics) >= 2 and any(r.measured for r in recs):
        plots.pareto_png(study, out_dir / "pareto.png", cfg.name,
                         {n: r.values for n, r in summary.pooled.items()})
        lines += ["", "## Pareto front", "", "![Pareto front](pareto.png)", "",
                  "On each config's median over its boots; the recommendation first where it is "
                  "on the front, else after it with the reason.", ""]
        lines += trials_markdown(summary.front_rows, summary)
        if summary.off_front is not None and summary.picked is not None:
            lines += ["", f"{summary.off_front}:", ""]
            lines += trials_markdown([summary.picked], summary)
    confirmed = cfg.study_dir() / "confirm.json"
    if confirmed.is_file():
        lines += ["", "## Confirm phase", ""] + confirm_markdown(confirmed, out_dir)
    lines += validation_markdown(cfg.study_dir() / "validate.json")
    axis = cfg.capacity.axis if cfg.capacity is not None else None
    for prof in curve_profiles(recs) if axis is not None else []:
        assert axis is not None
        name = f"capacity_curves{'-' + prof if prof else ''}.png"
        plots.capacity_overlay_png(recs, cfg.slos, axis, out_dir / name, prof)
        lines += ["", "## Load curves" + (f": {prof}" if prof else ""), "",
                  f"![load curves]({name})", ""]
        lines += curves_markdown(recs, axis, prof)
    if axis is not None and rec is not None:  # a queue building through its points, or not
        from autotune.outputs.inside import inside_markdown

        lines += inside_markdown(rec, cfg.study_dir() / f"trial-{rec.number:04d}", cfg.slos,
                                 out_dir)
    lines += ["", "## Where the time went", ""] + time_markdown(time_split(recs))
    lines += phases_markdown(recs)
    from autotune.tuning.bill import bill

    cost = bill(recs, cfg).lines()
    if cost:
        lines += ["", "## The bill", "", "```", *cost, "```"]
    trial_dirs = sorted(cfg.study_dir().glob("trial-*"))
    if trial_dirs:
        lines += ["", "## Raw files", "",
                  f"Per trial under `{cfg.study_dir()}`: `server.log` (the server's output), "
                  "`result.json` (metrics, argv, timings), `requests.csv` (one row per "
                  f"request); {len(trial_dirs)} trial folders."]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
