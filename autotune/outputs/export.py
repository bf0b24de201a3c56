"""From the feasible Pareto front to one configuration: the `vllm serve` line a user pastes, a
vLLM `--config` YAML, and the `vllm bench serve` line that reproduces the measurement."""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import yaml

from autotune.config.study import StudyConfig, default_executable
from autotune.config.workload import ProfileConfig
from autotune.errors import StudyError
from autotune.measure.stats import Gain, gain_ci
from autotune.server.command import flag_name, serve_argv, shell_join
from autotune.server.machine import launch_env
from autotune.tuning.confirm import TrialHook, config_gains, run_repeats
from autotune.tuning.objective import PhaseHook
from autotune.tuning.preflight import Preflight
from autotune.tuning.record import TrialRecord, baseline, records
from autotune.tuning.summary import StudySummary


def find_trial(summary: StudySummary, number: int) -> TrialRecord:
    """The trial `--trial` names, with its config's pooled values."""
    found = summary.record(number)
    if not found.measured:
        raise StudyError(f"--trial: trial {number} has no measurement ({found.label()}"
                         f"{': ' + found.cause if found.cause else ''})")
    return found


def display_executable(executable: list[str]) -> list[str]:
    """`vllm` for the default (this venv's) executable, else the configured command."""
    return ["vllm"] if executable == default_executable() else executable


def serve_command(cfg: StudyConfig, trial: TrialRecord) -> list[str]:
    return serve_argv(display_executable(cfg.server.executable), cfg.server.model,
                      cfg.server.serve_flags(trial.flags), cfg.server.extra_args)


def serve_line(cfg: StudyConfig, trial: TrialRecord) -> str:
    """The serve command as a shell line, after the environment the trials' servers had
    (`server.env`): a setting such as VLLM_ALLREDUCE_USE_SYMM_MEM=0 is part of what was
    measured, and the config without it is not the config that was measured."""
    argv = shell_join(serve_command(cfg, trial))
    env = [f"{k}={shlex.quote(v)}" for k, v in launch_env(cfg.server).items()]
    return " ".join([*env, argv])


def config_yaml(cfg: StudyConfig, trial: TrialRecord) -> str:
    """A file for `vllm serve --config FILE` (kebab-case keys, nested JSON flags as maps)."""
    flags = cfg.server.serve_flags(trial.flags)
    doc: dict[str, Any] = {"model": cfg.server.model}
    doc.update({flag_name(k)[2:]: v for k, v in flags.items() if v is not None})
    return yaml.safe_dump(doc, sort_keys=False)


def bench_command(profile: ProfileConfig, model: str, tokenizer: str,
                  executable: list[str]) -> list[str]:
    """The `vllm bench serve` line for the same workload, against a running server."""
    i, o = profile.lengths()
    backend = ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions"] if (
        profile.endpoint == "chat") else ["--backend", "vllm"]
    argv = [*display_executable(executable), "bench", "serve", *backend,
            "--model", model, "--tokenizer", tokenizer]
    if profile.name == "sharegpt":
        from autotune.load.datasets import sharegpt_json_for_vllm

        argv += ["--dataset-name", "sharegpt", "--dataset-path", str(sharegpt_json_for_vllm())]
        if o is not None:
            argv += ["--sharegpt-output-len", str(o)]
    elif profile.name == "dataset":  # vLLM's custom dataset reads the prompt lines
        argv += ["--dataset-name", "custom", "--dataset-path", str(profile.path),
                 "--custom-output-len", str(o or 128)]
    else:
        argv += ["--dataset-name", "random", "--random-input-len", str(i),
                 "--random-output-len", str(o)]
        if profile.prefix_len:  # vLLM's random dataset shares one prefix
            argv += ["--random-prefix-len", str(profile.prefix_len)]
        if profile.range_ratio:
            argv += ["--random-range-ratio", str(profile.range_ratio)]
    argv += ["--ignore-eos", "--num-prompts", str(profile.num_prompts), "--seed",
             str(profile.seed)]
    if profile.max_concurrency:
        argv += ["--max-concurrency", str(profile.max_concurrency)]
    if not math.isinf(profile.request_rate):
        argv += ["--request-rate", str(profile.request_rate)]
    if profile.warmup:
        argv += ["--num-warmups", str(profile.warmup)]
    return argv


def export(cfg: StudyConfig, trial: TrialRecord, out_dir: Path | None = None) -> dict[str, Any]:
    """Everything export prints, and the files it writes (config YAML, JSON summary)."""
    serve = serve_line(cfg, trial)
    benches = {p.key: shell_join(bench_command(p, cfg.server.model, cfg.server.tokenizer_dir,
                                               cfg.server.executable))
               for p in cfg.workloads()}
    result = {
        "trial": trial.number,
        "values": dict(trial.values),
        "flags": trial.flags,
        "serve_command": serve,
        "bench_command": next(iter(benches.values())),
    }
    if trial.speculation:  # vLLM's acceptance counters for a config that speculates
        result["speculation"] = trial.speculation
    if cfg.profiles:  # a suite: one line per profile, and each profile's values
        result["bench_commands"] = benches
        result["profile_metrics"] = {k: trial.metrics[k] for k in cfg.profile_metrics()
                                     if k in trial.metrics}
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "vllm-config.yaml").write_text(config_yaml(cfg, trial))
        (out_dir / "export.json").write_text(json.dumps(result, indent=2) + "\n")
        result["config_path"] = str(out_dir / "vllm-config.yaml")
    return result


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
                    on_phase: Callable[[str], None]) -> dict[str, Any]:
    """`export --verify`: boot the trial's config as a stock `vllm serve` (the deploy line's
    flags and environment, the study's caches) and check its capacity with `vllm bench serve`
    (measure/verify.py): it should meet the SLOs at the capacity and miss them tolerance above.
    The JSON lands in the study's folder, verify-trial-NNNN/verify.json."""
    from autotune.measure.capacity import stopped_early
    from autotune.measure.on_server import samples_of
    from autotune.measure.runner import booted
    from autotune.measure.verify import Reference, Target, can_judge, verify

    cap, c = cfg.capacity, trial.value("capacity")
    if cfg.profiles:
        raise StudyError("--verify: a suite's trial has one capacity per profile; check each "
                         "with scripts/reference_check.py")
    if cap is None or c is None:
        raise StudyError("--verify checks a capacity: this study measured none (its config has "
                         "no capacity: section); use --validate")
    if cap.axis == "concurrency":
        c = float(math.floor(c))  # a pooled median may fall between whole slots
    if c < (1 if cap.axis == "concurrency" else 1e-9):
        raise StudyError(f"--verify: trial {trial.number} met the SLOs at no load (capacity "
                         f"{c:g}): pick another with --prefer capacity or --trial")
    can_judge(cfg.profile, cfg.slos)
    k = samples or samples_of(cap)
    workdir = cfg.study_dir() / f"verify-trial-{trial.number:04d}"
    workdir.mkdir(parents=True, exist_ok=True)
    # stock, as a user deploys it: no fork server (server.preload), whatever the study used
    server = cfg.server.model_copy(update={"preload": False})
    per = cap.min_duration_s if cap.axis == "rate" else cap.requests_per_slot
    target = Target(c, cap.axis, cap.tolerance, cap.requests_per_point, per)
    # no failing load above C was measured (the high end passed, or a search stopped early)
    ceiling = c >= cap.high or any(s.fail is None or stopped_early(s.stopped)
                                   for s in trial.facts.searches().values())
    with booted(server, trial.flags, workdir, on_phase) as proc:
        on_phase(f"vllm bench serve at {c:g}" + ("" if ceiling else f" and {target.above():g}")
                 + f" ({k} sample{'s' if k > 1 else ''} each)")
        ref = Reference(cfg.server.executable, proc.base_url, cfg.server.model,
                        cfg.server.tokenizer_dir, cfg.profile.model_copy(
                            update={"warmup": cap.warmup}), proc.log_path)
        doc = verify(ref, target, cfg.slos, k, workdir / "runs", cfg.profile.seed,
                     ceiling=ceiling)
    doc = {"trial": trial.number, "serve_command": serve_line(cfg, trial)} | doc
    (workdir / "verify.json").write_text(json.dumps(doc, indent=2) + "\n")
    doc["path"] = str(workdir / "verify.json")
    return doc
