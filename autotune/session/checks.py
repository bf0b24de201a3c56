"""Checks that boot servers for a study's chosen config after the study: `export --validate`
(the config and the baseline booted again, interleaved, as repeat trials of the study) and
`export --verify` (the config booted as a stock `vllm serve` and its capacity checked with
`vllm bench serve`). They run sessions of their own, so they live here, not in outputs/, which
only formats what was measured.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna

from autotune.config.study import StudyConfig
from autotune.errors import StudyError
from autotune.measure.stats import Gain, gain_ci
from autotune.outputs.export import serve_line
from autotune.tuning.confirm import TrialHook, config_gains, run_repeats
from autotune.tuning.objective import PhaseHook
from autotune.tuning.preflight import Preflight
from autotune.tuning.record import TrialRecord, baseline, records


@dataclass(frozen=True)
class Validation:
    """A chosen config and the baseline booted again, interleaved: each objective's study value
    and the median of the re-runs, the gain of the first objective measured by the re-runs
    alone (with its interval from two re-runs each), and the gain the study had printed."""

    trial: int
    base: int
    metric: str
    rows: list[tuple[str, float, float]]  # objective, study value, median of the re-runs
    gain: Gain  # the re-runs only
    study_gain: Gain  # every boot before the validation (`n`: the chosen config's boots)
    boots: list[int]  # the validation's trials

    @property
    def inside(self) -> bool | None:
        """Whether the study's gain lies inside the re-runs' interval (None without one)."""
        if self.gain.n < 2 or self.gain.n_base < 2:
            return None
        return self.gain.low <= self.study_gain.gain <= self.gain.high


def validate(study: optuna.Study, cfg: StudyConfig, pre: Preflight, requests: list[Any],
             trial: TrialRecord, repeats: int, *, on_phase: PhaseHook | None = None,
             on_trial: TrialHook | None = None) -> Validation:
    """Boot the baseline and the trial's config again, interleaved (base A base A ...),
    `repeats` times each, as repeat trials of the study (so nothing measured is lost and every
    view pools them); a capacity study searches each boot's capacity anew."""
    recs = records(study)
    base = baseline(recs)
    if base is None:
        raise StudyError("--validate: the study has no measured baseline trial to compare with")
    metrics = cfg.metric_names()
    before = config_gains(recs, metrics).get(trial.number, {})
    first = len(study.get_trials(deepcopy=False))
    run_repeats(study, cfg, pre, requests, [base.number, trial.number] * repeats,
                on_phase=on_phase, on_trial=on_trial)
    new = [r for r in records(study)[first:] if r.measured]
    mine = [r for r in new if r.facts.repeat_of == trial.number]
    theirs = [r for r in new if r.facts.repeat_of == base.number]
    if not mine or not theirs:
        raise StudyError("--validate: a re-run was not measured (see `autotune trials`)")
    rows = [(m, v, float(np.median([r.values[m] for r in mine]))) for m, v in
            trial.values.items()]
    m0 = metrics[0]
    gain = gain_ci([r.values[m0] for r in mine], [r.values[m0] for r in theirs])
    return Validation(trial.number, base.number, m0, rows, gain, before[m0],
                      [r.number for r in new])


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
                         "with bench/reference_check.py")
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
        from autotune.load.datasets import load_tokenizer, load_trace

        tok_dir = cfg.server.tokenizer_dir
        trace = load_trace(cfg.profile, load_tokenizer(tok_dir), tok_dir,
                           cfg.server.args.get("max_model_len"))
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
