"""From the feasible Pareto front to one configuration: the `vllm serve` line a user pastes, a
vLLM `--config` YAML, and the `vllm bench serve` line that reproduces the measurement. A
shape-only config (random weights, config/weights.py) says so in each: printed, in export.json
(`shape_only`) and as the config YAML's first line."""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

import yaml

from autotune.config import weights
from autotune.config.quality import QUALITY_OK
from autotune.config.study import StudyConfig
from autotune.config.workload import ProfileConfig
from autotune.errors import StudyError
from autotune.outputs.by_load import by_load
from autotune.outputs.console import console
from autotune.server.command import flag_name, serve_argv, shell_join
from autotune.server.machine import launch_env
from autotune.tuning.record import TrialRecord
from autotune.tuning.summary import StudySummary
from autotune.tuning.verdict import verdict_text


def find_trial(summary: StudySummary, number: int) -> TrialRecord:
    """The trial `--trial` names, with its config's pooled values."""
    found = summary.record(number)
    if not found.measured:
        raise StudyError(f"--trial: trial {number} has no measurement ({found.label()}"
                         f"{': ' + found.cause if found.cause else ''})")
    return found


def display_executable(executable: list[str]) -> list[str]:
    """The vLLM the study ran, as a line that runs where it is printed: `vllm` where that is
    the `vllm` on PATH (an activated venv, a system install), else its path (relative to the
    current folder when under it: the README's `.venv/bin/vllm`). After the README's install
    a bare `vllm` is not on PATH (bash: vllm: command not found)."""
    if len(executable) != 1:
        return executable
    exe = Path(executable[0])
    found = shutil.which("vllm")
    if found is not None and exe.name == "vllm" and Path(found).resolve() == exe.resolve():
        return ["vllm"]
    if exe.is_absolute() and exe.is_relative_to(Path.cwd()):
        return [os.path.relpath(exe)]
    return executable


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
    """A file for `vllm serve --config FILE` (kebab-case keys, nested JSON flags as maps),
    opening with a comment where the config is shape only."""
    flags = cfg.server.serve_flags(trial.flags)
    doc: dict[str, Any] = {"model": cfg.server.model}
    doc.update({flag_name(k)[2:]: v for k, v in flags.items() if v is not None})
    said = f"# {weights.STATEMENT}\n" if weights.shape_only(cfg.server, trial.flags) else ""
    return said + yaml.safe_dump(doc, sort_keys=False)


def bench_command(profile: ProfileConfig, model: str, tokenizer: str,
                  executable: list[str], dataset_path: str | None = None) -> list[str]:
    """The `vllm bench serve` line for the same workload, against a running server
    (`dataset_path`: the requests the study kept, where it dropped some of a dataset's)."""
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
    elif profile.name == "trace":  # a window of it, as vLLM's timed_trace reads it
        from autotune.measure.reference import trace_args

        argv += trace_args(profile)
    elif profile.name == "dataset":  # vLLM's custom dataset reads the prompt lines
        argv += ["--dataset-name", "custom", "--dataset-path", dataset_path or str(profile.path),
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
        argv += ["--request-rate", f"{profile.request_rate:g}"]  # 24.95, not 24.950000000000003
    if profile.warmup:
        argv += ["--num-warmups", str(profile.warmup)]
    return argv


def at_capacity(cfg: StudyConfig, trial: TrialRecord) -> tuple[ProfileConfig, float] | None:
    """The workload at the trial's capacity, sized as the search sized a point, and that load
    (whole slots on the concurrency axis): the run `export --verify` judges at C (one sample of
    it). None without one capacity to check (no capacity: section, a suite's several, or none
    met)."""
    from autotune.measure.verify import at_load, capacity_target

    cap, c = cfg.capacity, trial.value("capacity")
    if cap is None or cfg.profiles or not c:
        return None
    target = capacity_target(cap, c)
    if target.capacity <= 0:
        return None
    return at_load(cfg.profile.model_copy(update={"warmup": cap.warmup}), target,
                   target.capacity), target.capacity


def trace_window(cfg: StudyConfig, profile: ProfileConfig, sized: bool, where: Path
                 ) -> tuple[ProfileConfig, str | None]:
    """A trace profile's line replays a window of it from its start, written where `vllm bench
    serve --dataset-name timed_trace` reads it: a capacity point's (`sized`: at least
    requests_per_point, min_duration_s of arrivals at the profile's speedup) or num_prompts
    requests. With the note to print when the trace has text, which vLLM cannot send."""
    from autotune.load import replay
    from autotune.tuning.preflight import study_trace

    trace = study_trace(cfg, profile)  # the requests the study's points were drawn from
    cap = cfg.capacity
    win = replay.window(trace, 0, cap.requests_per_point, cap.min_duration_s, profile.speedup) \
        if sized and cap is not None else replay.window(trace, 0, profile.num_prompts, 0.0,
                                                        profile.speedup)
    path = replay.write_vllm_trace(trace, win, where / "trace-window.jsonl")
    note = ("vLLM's timed_trace sends no text: its line replays the window's arrivals and "
            "lengths, the prompts written as text sent as random tokens of their length"
            if trace.has_text else None)
    return profile.model_copy(update={"path": str(path), "num_prompts": len(win.picks)}), note


def export(cfg: StudyConfig, trial: TrialRecord, out_dir: Path | None = None,
           records: list[TrialRecord] | None = None) -> dict[str, Any]:
    """Everything export prints, and the files it writes (config YAML, JSON summary); a
    shape-only config's statement it prints itself (the command prints the rest). In a
    capacity study the `vllm bench serve` line runs at the capacity found: the profile alone
    sets no load there (the search sets it per point), so its line would send every request at
    once. With the study's `records`, where speculation pays by load (outputs/by_load.py)."""
    from autotune.tuning.preflight import read_datasets

    serve = serve_line(cfg, trial)
    checked = at_capacity(cfg, trial)
    mine = export_dir(out_dir, trial) if out_dir is not None else None
    # a dataset whose over-long lines the study dropped: the bench line reads the kept ones
    kept: dict[str, str] = {}
    notes, windows = [], []
    for p, ds in read_datasets(cfg):
        if ds.dropped:
            notes.append(ds.note(str(p.path)))
            if mine is not None:
                kept[p.key] = str(ds.write_kept(mine / f"{p.key}-kept.jsonl"))
    profiles = [checked[0]] if checked else cfg.workloads()
    for i, p in enumerate(profiles):  # a trace: a window of it, as a point replayed one
        if p.name == "trace":
            where = mine or export_dir(cfg.study_dir() / "export", trial)  # the trial's own
            where.mkdir(parents=True, exist_ok=True)
            profiles[i], note = trace_window(cfg, p, checked is not None, where)
            windows += [note] if note else []
    benches = {p.key: shell_join(bench_command(p, cfg.server.model, cfg.server.tokenizer_dir,
                                               cfg.server.executable, kept.get(p.key)))
               for p in profiles}
    result = {
        "trial": trial.number,
        "values": dict(trial.values),
        "flags": trial.flags,
        "serve_command": serve,
        "bench_command": next(iter(benches.values())),
    }
    if notes:
        result["dataset_dropped"] = "; ".join(notes)
        result["dataset_kept_files"] = kept
    if checked is not None:  # the line is one sample at C; --verify judges C and above
        result["bench_load"] = checked[1]
    if windows:
        result["bench_note"] = "; ".join(windows)
    if weights.shape_only(cfg.server, trial.flags):  # random weights: said here, and kept
        result["shape_only"] = weights.STATEMENT
        console.print(weights.STATEMENT, highlight=False, soft_wrap=True, markup=False)
    if trial.speculation:  # vLLM's acceptance counters for a config that speculates
        result["speculation"] = trial.speculation
    if records and (crossing := by_load(cfg, trial, records)) is not None:
        result["by_load"] = crossing
        console.print(f"by load: {crossing['text']}", highlight=False, soft_wrap=True,
                      markup=False)
    q = trial.facts.quality
    if q:  # the guard's verdict as the tables and the report show it
        failed = trial.constraints.get(QUALITY_OK, 0.0) > 0
        result["quality"] = {"verdict": q.get("verdict"), "text": verdict_text(q, failed)}
    if cfg.profiles:  # a suite: one line per profile, and each profile's values
        result["bench_commands"] = benches
        result["profile_metrics"] = {k: trial.metrics[k] for k in cfg.profile_metrics()
                                     if k in trial.metrics}
    if mine is not None:
        # one folder per trial: exporting another config (--prefer, --trial) must not replace
        # the file an earlier export printed
        mine.mkdir(parents=True, exist_ok=True)
        (mine / "vllm-config.yaml").write_text(config_yaml(cfg, trial))
        (mine / "export.json").write_text(json.dumps(result, indent=2) + "\n")
        result["config_path"] = str(mine / "vllm-config.yaml")
    return result


def export_dir(out_dir: Path, trial: TrialRecord) -> Path:
    """Where a trial's export files go under `--out` (default: the study's export/)."""
    return out_dir / f"trial-{trial.number:04d}"
