"""Checks that boot servers for a study's chosen config after the study: `export --validate`
(the config and the baseline booted again, interleaved, beside the study: never its trials) and
`export --verify` (the config booted as a stock `vllm serve` and its capacity checked with
`vllm bench serve`), each with the screen `export` shows (`print_validation`,
`print_verification`). They run sessions of their own, so they live here, not in outputs/,
which only formats what was measured.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial
from rich.markup import escape
from rich.table import Table

from autotune.config.study import StudyConfig
from autotune.errors import StudyError
from autotune.measure.stats import gain_ci
from autotune.measure.verify import lines
from autotune.outputs.console import PhaseLines, console, out
from autotune.outputs.export import serve_line
from autotune.outputs.tables import StudyView, gain_text
from autotune.session.open import open_session
from autotune.tuning.confirm import run_repeats
from autotune.tuning.objective import PhaseHook
from autotune.tuning.preflight import Preflight
from autotune.tuning.record import TrialRecord, record_of, records
from autotune.tuning.summary import StudySummary
from autotune.tuning.validation import (
    NOT_HELD,
    UNDECIDED,
    Boot,
    Validation,
    verdict,
    write_run,
)


def scratch_copy(study: optuna.Study) -> optuna.Study:
    """An in-memory study holding every trial of `study` under the same numbers: the
    validation boots on it, so the objective reads the study as it is (a repeat's flags, the
    incumbent) and writes nothing into it."""
    copy = optuna.create_study(directions=study.directions)
    if study.metric_names:
        copy.set_metric_names(list(study.metric_names))
    copy.add_trials(study.get_trials(deepcopy=False))
    return copy


def validate(study: optuna.Study, cfg: StudyConfig, pre: Preflight, requests: list[Any],
             summary: StudySummary, trial: TrialRecord, repeats: int, *,
             max_tpot_ms: float | None = None, on_phase: PhaseHook | None = None,
             on_boot: Callable[[int, Boot], None] | None = None) -> Validation:
    """Boot the baseline and the trial's config again, interleaved (base A base A ...),
    `repeats` times each, beside the study: the boots are trials of a copy of it
    (`scratch_copy`), their files under `validate/run-<time>/`, and the run with its verdict
    is appended to `validate.json` (autotune.tuning.validation); the study itself is left as
    it was. A capacity study searches each boot's capacity anew."""
    base = summary.base
    if base is None:
        raise StudyError("--validate: the study has no measured baseline trial to compare with")
    m0 = summary.metrics[0]
    before = summary.gains.get(trial.number, {}).get(m0)
    if before is None:
        raise StudyError(f"--validate: trial {trial.number} has no {m0} to compare with")
    of = trial.facts.repeat_of if trial.facts.repeat_of is not None else trial.number
    scratch = scratch_copy(study)  # its boots are trials of this copy, never of the study
    first = len(scratch.get_trials(deepcopy=False))
    folder = cfg.study_dir() / "validate" / f"run-{time.strftime('%Y%m%d-%H%M%S')}"

    def on_trial(st: optuna.Study, frozen: FrozenTrial) -> None:
        if on_boot is not None:
            r = record_of(st, frozen)
            on_boot(frozen.number - first, Boot.of_record(
                r, r.facts.repeat_of if r.facts.repeat_of is not None else -1,
                str(folder / f"trial-{frozen.number:04d}")))

    run_repeats(scratch, cfg, pre, requests, [base.number, of] * repeats, on_phase=on_phase,
                on_trial=on_trial, trials_dir=folder)
    new = records(scratch)[first:]
    boots = [Boot.of_record(r, r.facts.repeat_of if r.facts.repeat_of is not None else -1,
                            str(folder / f"trial-{r.number:04d}")) for r in new]
    mine = [b for b, r in zip(boots, new, strict=True) if r.measured and b.of == of]
    theirs = [b for b, r in zip(boots, new, strict=True) if r.measured and b.of == base.number]
    if not mine or not theirs:  # a re-run the machine spoiled decides nothing either way
        spoiled = all(b.status == "unmeasured" for b in boots if not b.values)
        v = Validation(trial.number, base.number, m0, [], before, before, boots,
                       UNDECIDED if spoiled else NOT_HELD,
                       ["a re-run was not measured: " + "; ".join(
                           f"trial {b.of}'s config: {b.status}: {b.cause}" for b in boots
                           if not b.values)], max_tpot_ms)
    else:
        rows = [(m, v, float(np.median([b.values[m] for b in mine]))) for m, v in
                trial.values.items()]
        gain = gain_ci([b.values[m0] for b in mine], [b.values[m0] for b in theirs])
        study_base = summary.boots.get(base.number, {}).get(m0) or [base.values[m0]]
        said, why = verdict(before, gain, [*study_base, *(b.values[m0] for b in theirs)],
                            mine, max_tpot_ms)
        v = Validation(trial.number, base.number, m0, rows, gain, before, boots, said, why,
                       max_tpot_ms)
    write_run(cfg.study_dir() / "validate.json", v)
    return v


def verify_capacity(cfg: StudyConfig, trial: TrialRecord, samples: int | None,
                    on_phase: Callable[[str], None], *, capacity: float | None = None,
                    on_run: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`export --verify`: boot the trial's config as a stock `vllm serve` (the deploy line's
    flags and environment, the study's caches) and check its capacity (`capacity`: this one,
    e.g. the median over the config's boots; default: the trial's) with `vllm bench serve`
    (measure/verify.py): it should meet the SLOs at the capacity and miss them tolerance above.
    `on_run` gets each run's verdict as it lands. The JSON lands in the study's folder,
    verify-trial-NNNN/verify.json."""
    from autotune.measure.capacity import stopped_early
    from autotune.measure.on_server import samples_of
    from autotune.measure.runner import booted
    from autotune.measure.verify import Reference, can_judge, capacity_target, verify

    cap, c = cfg.capacity, capacity if capacity is not None else trial.value("capacity")
    if cfg.profiles:
        raise StudyError("--verify: a suite's trial has one capacity per profile; check each "
                         "with lab/reference_check.py")
    if cap is None or c is None:
        raise StudyError("--verify checks a capacity: this study measured none (its config has "
                         "no capacity: section); use --validate")
    target = capacity_target(cap, c)
    c = target.capacity
    if c < (1 if cap.axis == "concurrency" else 1e-9):
        raise StudyError(f"--verify: trial {trial.number} met the SLOs at no load (capacity "
                         f"{c:g}): pick another with --prefer capacity or --trial")
    can_judge(cfg.profile, cfg.slos)
    trace = None
    if cfg.profile.name == "trace":  # read before the boot: a window of it per run
        from autotune.tuning.preflight import study_trace

        trace = study_trace(cfg, cfg.profile)  # what the study's points drew from
        if trace.has_text:
            raise StudyError(f"--verify: {cfg.profile.path} holds prompts as text, and vLLM's "
                             "timed_trace dataset sends prompts built from hash ids only, so "
                             "`vllm bench serve` cannot replay this trace's requests; give "
                             "their input_length (and hash_ids) instead of the text")
    k = samples or samples_of(cap)
    workdir = cfg.study_dir() / f"verify-trial-{trial.number:04d}"
    workdir.mkdir(parents=True, exist_ok=True)
    # stock, as a user deploys it: no fork server (server.preload), whatever the study used
    server = cfg.server.model_copy(update={"preload": False})
    # no failing load above C was measured (the high end passed, or a search stopped early)
    ceiling = c >= cap.high or any(s.fail is None or stopped_early(s.stopped)
                                   for s in trial.facts.searches().values())
    with booted(server, trial.flags, workdir, on_phase) as proc:
        on_phase(f"vllm bench serve at {c:g}" + ("" if ceiling else f" and {target.above():g}")
                 + f" ({k} sample{'s' if k > 1 else ''} each)")
        ref = Reference(cfg.server.executable, proc.base_url, cfg.server.model,
                        cfg.server.tokenizer_dir, cfg.profile.model_copy(
                            update={"warmup": cap.warmup}), proc.log_path, trace)
        doc = verify(ref, target, cfg.slos, k, workdir / "runs", cfg.profile.seed,
                     ceiling=ceiling, on_run=on_run)
    doc = {"trial": trial.number, "serve_command": serve_line(cfg, trial)} | doc
    (workdir / "verify.json").write_text(json.dumps(doc, indent=2) + "\n")
    doc["path"] = str(workdir / "verify.json")
    return doc


def verify_on_server(cfg: StudyConfig, url: str, log_path: Path, capacity: float,
                     samples: int | None, workdir: Path,
                     on_run: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The reference check on a server already up and warm (the certify phase's pick, on its
    last certify boot, a stock `vllm serve` as the study launched it: tuning.plan
    reference_on_boot): `vllm bench serve` at `capacity` only, with fresh samples and no
    warm-up run (the server just served its capacity points). The JSON lands in `workdir`."""
    from autotune.measure.on_server import samples_of
    from autotune.measure.verify import Reference, capacity_target, verify

    cap = cfg.capacity
    if cap is None:
        raise StudyError("the reference check judges a capacity: this study has none")
    trace = None
    if cfg.profile.name == "trace":
        from autotune.tuning.preflight import study_trace

        trace = study_trace(cfg, cfg.profile)
    target = capacity_target(cap, capacity)
    ref = Reference(cfg.server.executable, url, cfg.server.model, cfg.server.tokenizer_dir,
                    cfg.profile.model_copy(update={"warmup": cap.warmup}), log_path, trace)
    workdir.mkdir(parents=True, exist_ok=True)
    doc = verify(ref, target, cfg.slos, samples or samples_of(cap), workdir / "runs",
                 cfg.profile.seed, warmup=0, ceiling=True, on_run=on_run)
    doc["above"] = "not checked: a certification claims the capacity, judged at C"
    (workdir / "verify.json").write_text(json.dumps(doc, indent=2) + "\n")
    doc["path"] = str(workdir / "verify.json")
    return doc


def print_verification(cfg: StudyConfig, trial: TrialRecord, samples: int | None) -> None:
    """`export --verify`: the reference client's verdicts at the capacity and above it."""
    console.print(f"verify: trial {trial.number} as a stock `vllm serve`, checked by `vllm "
                  "bench serve`", highlight=False, markup=False)
    phases = PhaseLines()  # on a log or CI: a line per phase; each run's verdict as it lands
    with console.status("booting") as status:

        def on_phase(p: str) -> None:
            status.update(escape(f"verify: {p}"))
            phases.phase(f"verify: {p}", 0)

        doc = verify_capacity(cfg, trial, samples, on_phase, on_run=lambda line: console.print(
            "  " + line, highlight=False, markup=False))
    for line in lines(doc):
        out.print(line, highlight=False, soft_wrap=True, markup=False)
    console.print(f"written to {doc['path']}", highlight=False)
    if not doc["verdicts_agree"]:
        raise StudyError("--verify: the reference client does not agree with the study's "
                         f"capacity {doc['capacity']:g} (above); see {doc['path']}")


def print_validation(cfg: StudyConfig, st: optuna.Study, summary: StudySummary,
                     trial: TrialRecord, repeats: int, max_tpot_ms: float | None) -> None:
    """`export --validate`: the baseline and the chosen config booted again, interleaved,
    beside the study (validate.json), ending with a verdict; exit 1 when the figure did not
    hold."""
    opened = open_session(cfg, study=st, no_mlflow=True)
    base = summary.base
    console.print(f"validate: vLLM's defaults (trial {base.number if base else '?'}) and "
                  f"trial {trial.number}, {repeats} boot(s) each, interleaved; beside the "
                  "study, not added to it", highlight=False)

    def on_boot(i: int, b: Boot) -> None:
        who = "vLLM's defaults" if base is not None and b.of == base.number else \
            f"trial {b.of}'s config"
        what = ", ".join(f"{m} {v:,.2f}" for m, v in b.values.items()) or \
            f"{b.status}: {b.cause}"
        console.print(f"re-run {i + 1} of {2 * repeats}: {who}: {what}", highlight=False,
                      soft_wrap=True)
        view.progress.advance(view.task)

    with StudyView(2 * repeats, 0, cfg.metric_names()) as view:
        v = validate(st, cfg, opened.pre, opened.requests, summary, trial, repeats,
                     max_tpot_ms=max_tpot_ms, on_boot=on_boot,
                     on_phase=lambda _n, p, flags: view.on_phase(-1, f"re-run: {p}", flags))
    if v.rows:
        t = Table(title="validation (re-runs beside the study)", header_style="bold")
        for col, justify in (("metric", "left"), ("study", "right"),
                             ("re-run median", "right"), ("change", "right")):
            t.add_column(col, justify=justify)  # type: ignore[arg-type]
        for metric, before, after in v.rows:
            t.add_row(metric, f"{before:,.2f}", f"{after:,.2f}",
                      f"{(after - before) / before * 100:+.1f}%" if before else "-")
        out.print(t)
        out.print(f"{v.metric} vs defaults: the study said {gain_text(v.study_gain)}; the "
                  f"re-runs say {gain_text(v.gain)}", highlight=False, soft_wrap=True)
    if cfg.capacity is not None:
        console.print(f"each re-run searched its capacity anew (tolerance "
                      f"{cfg.capacity.tolerance:.0%})", highlight=False)
    for line in v.why:
        out.print(f"  {line}", highlight=False, soft_wrap=True)
    out.print(f"verdict: {v.verdict}", highlight=False)
    console.print(f"written to {cfg.study_dir() / 'validate.json'} (the re-runs' files: "
                  f"{cfg.study_dir() / 'validate'})", highlight=False)
    if v.verdict == NOT_HELD:
        raise StudyError(f"--validate: the study's figure did not hold for trial "
                         f"{trial.number} (above); see {cfg.study_dir() / 'validate.json'}")
