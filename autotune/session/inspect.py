"""Reading a study that ran, as the commands show it: its summary (`study_summary`), its trials
and its front as tables (`print_trials`, `print_front`), and the chosen config exported
(`export_config`, `autotune export`: the vLLM config file, the serve and bench commands, what
one replica sustains and what a target load takes; with --validate and --verify, the checks
that boot it again, session/checks.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.config.capacity import CapacityConfig
from autotune.config.paths import check_file, check_folder
from autotune.config.study import Preference, StudyConfig
from autotune.errors import ConfigError, NotCertified
from autotune.measure.capacity import capacity_words
from autotune.measure.stats import interval_name, median_ci
from autotune.outputs.console import console, out, speculation_text
from autotune.outputs.deploy import k8s_deployment, sizing
from autotune.outputs.export import export, find_trial
from autotune.outputs.tables import capacity_line, front_tables, gain_text, trials_table
from autotune.session.by_load import loads_option, print_by_load
from autotune.session.checks import print_validation, print_verification
from autotune.tuning.record import TrialRecord
from autotune.tuning.study import open_study
from autotune.tuning.summary import StudySummary, choose, summarize


def study_summary(cfg: StudyConfig) -> StudySummary:
    """The summary of the study `cfg` names, as it stands in its storage: every trial's
    record, the baseline, pooled values with intervals, the front and the recommendation."""
    return summarize(open_study(cfg, create=False), cfg)


def print_trials(cfg: StudyConfig) -> StudySummary:
    """`autotune trials`: every trial, with deltas against the baseline; the pick marked."""
    summary = study_summary(cfg)
    out.print(trials_table(summary, cfg, title=f"study {cfg.name}"))
    out.print(f"recommended: {summary.headline()}", highlight=False, soft_wrap=True)
    return summary


def print_front(cfg: StudyConfig) -> StudySummary:
    """`autotune pareto`: the feasible front on each config's median over its boots; the
    recommendation first, or after it, apart, with why it is not on it."""
    summary = study_summary(cfg)
    for shown in front_tables(summary, cfg):
        out.print(shown, highlight=False, soft_wrap=True)
    out.print(f"recommended: {summary.headline()}", highlight=False, soft_wrap=True)
    return summary


@dataclass(frozen=True)
class ExportOptions:
    """Which config `autotune export` writes (the recommendation, an end of the front, a TPOT
    bound, or a trial), where, and what it does with it beyond (validate, verify, size, k8s)."""

    prefer: Preference | None = None
    max_tpot_ms: float | None = None
    trial: int | None = None
    out_dir: Path | None = None
    validate: bool = False
    repeats: int | None = None
    verify: bool = False
    verify_samples: int | None = None
    target_load: float | None = None
    k8s_path: Path | None = None
    image: str = "vllm/vllm-openai:latest"
    by_load: bool = False
    by_load_loads: str | None = None  # "1,2,4,8"

    def check(self) -> None:
        """One error for options that do not go together, before the study is opened."""
        if self.by_load_loads is not None:
            if not self.by_load:
                raise ConfigError("--by-load-loads: the loads of --by-load; add --by-load")
            loads_option(self.by_load_loads)
        if self.verify_samples is not None and not self.verify:
            raise ConfigError("--verify-samples: counts the samples of --verify; add --verify")
        if self.trial is not None and (self.prefer or self.max_tpot_ms is not None):
            raise ConfigError("--trial picks the config itself; leave out --prefer and "
                              "--max-tpot-ms (or --trial)")
        if self.repeats is not None and not self.validate:
            raise ConfigError("--repeats: counts the boots of --validate; add --validate")
        if self.out_dir is not None:
            check_folder(self.out_dir, "--out")
        if self.k8s_path is not None:
            check_file(self.k8s_path, "--k8s")


def export_config(cfg: StudyConfig, opts: ExportOptions) -> dict[str, Any]:
    """`autotune export`: print the chosen config's `vllm serve` command, config file and bench
    command; for a capacity study, what one replica sustains and what a target load takes;
    then validate and verify it when asked. Returns what export wrote (autotune.outputs.export);
    raises NotCertified where the study's pick, exported, ended uncertified."""
    opts.check()
    summary = study_summary(cfg)
    if opts.target_load is not None and cfg.capacity is None:
        raise ConfigError("--target-load: sizing needs a capacity study (a capacity: section "
                          "in the study file); leave --target-load out")
    trial = chosen(cfg, summary, opts)
    if said := capacity_line(cfg, trial):
        out.print(said, highlight=False, soft_wrap=True)
    res = export(cfg, trial, opts.out_dir or cfg.study_dir() / "export", summary.records)
    print_figures(cfg, summary, trial, res)
    print_commands(cfg, res)
    replicas = None
    if cfg.capacity is not None:
        size = sizing(cfg, trial, opts.target_load, summary.records)
        out.print(size.text(", ".join(s.text() for s in cfg.slos)), highlight=False,
                  soft_wrap=True)
        replicas = size.replicas
    if opts.k8s_path is not None:
        opts.k8s_path.parent.mkdir(parents=True, exist_ok=True)
        opts.k8s_path.write_text(k8s_deployment(cfg, trial, replicas or 1, opts.image))
        console.print(f"Kubernetes Deployment: {opts.k8s_path}", highlight=False)
    if opts.validate:
        print_validation(cfg, open_study(cfg, create=False), summary, trial, opts.repeats or 1,
                         opts.max_tpot_ms)
    if opts.verify:
        print_verification(cfg, trial, opts.verify_samples)
    if opts.by_load:
        print_by_load(cfg, trial, summary.records, loads_option(opts.by_load_loads))
    cert = summary.certification
    if cert is not None and cert.exit_code and trial.number == summary.recommendation.number:
        raise NotCertified(cert.sentence(), cert.exit_code)  # the study's ending, its code too
    return res


def chosen(cfg: StudyConfig, summary: StudySummary, opts: ExportOptions) -> TrialRecord:
    """The trial to export, and a line saying how it stands to the recommendation."""
    trial = find_trial(summary, opts.trial) if opts.trial is not None \
        else choose(summary, cfg, opts.prefer, opts.max_tpot_ms)
    rec = summary.recommendation
    if rec.number is not None and trial.number != rec.number:
        console.print(f"note: the study recommends {summary.headline()}; this export is "
                      + (f"trial {opts.trial}" if opts.trial is not None else
                         f"--prefer {opts.prefer}" if opts.prefer else
                         f"--max-tpot-ms {opts.max_tpot_ms}")
                      + f": trial {trial.number}", highlight=False, soft_wrap=True)
    elif rec.number is not None:
        console.print(f"recommended: {summary.headline()}", highlight=False, soft_wrap=True)
    return trial


def print_figures(cfg: StudyConfig, summary: StudySummary, trial: TrialRecord,
                  res: dict[str, Any]) -> None:
    """The config's values (a median with its interval over its boots), its gains over vLLM's
    defaults, a suite's per-profile figures, speculation and the quality guard's verdict."""
    boots = summary.boots.get(trial.number if trial.facts.repeat_of is None
                              else trial.facts.repeat_of, {})

    def shown(m: str, v: float) -> str:
        if len(boots.get(m, [])) < 2:
            return f"{m} {v:,.2f} (one boot)"
        med, lo, hi = median_ci(boots[m])
        return (f"{m} {med:,.2f} [{lo:,.2f}, {hi:,.2f}] (median of {len(boots[m])} boots; "
                f"{interval_name(len(boots[m]))})")

    who = "vLLM's defaults" if trial.baseline else f"trial {trial.number}"
    console.print(f"{who}{f' (trial {trial.number})' if trial.baseline else ''}: "
                  + "; ".join(shown(k, v) for k, v in res["values"].items()), highlight=False,
                  soft_wrap=True)
    gains = summary.gains.get(trial.number, {})
    if gains and not trial.baseline:
        console.print("vs vLLM's defaults: " + "; ".join(
            f"{m} {gain_text(g)}" for m, g in gains.items()), highlight=False)
    if cfg.profiles:  # a suite: each profile's values and change against the baseline
        per = summary.profile_gains.get(trial.number, {})
        for k in summary.profile_metrics:
            if k in trial.metrics:
                vs = f" ({gain_text(per[k])} vs defaults)" if k in per and not trial.baseline \
                    else ""
                console.print(f"  {k} {trial.metrics[k]:,.2f}{vs}", highlight=False)
    if "speculation" in res:
        console.print(speculation_text(res["speculation"]), highlight=False, soft_wrap=True)
    if "quality" in res:  # the guard's verdict, its figures and the floor
        console.print(f"quality: {res['quality']['text']}", highlight=False, soft_wrap=True,
                      markup=False)


def print_commands(cfg: StudyConfig, res: dict[str, Any]) -> None:
    """Where the config file went, the bench command that checks it, and the serve line."""
    console.print(f"vLLM config file: {res['config_path']}", highlight=False)
    cap: CapacityConfig | None = cfg.capacity
    if "bench_load" in res and cap is not None:
        at = capacity_words(cap.axis, res["bench_load"])
        console.print(f"check it at its capacity ({at}, one sample; "
                      "`export --verify` runs the whole check: fresh samples at it and, where "
                      "the search missed above it, one step above) with:", highlight=False)
    else:
        console.print("benchmark it with:", highlight=False)
    if "bench_note" in res:
        console.print(res["bench_note"], highlight=False, soft_wrap=True)
    for label, line in res.get("bench_commands", {"": res["bench_command"]}).items():
        console.print("  " + (f"{label}: " if label else "") + line, highlight=False,
                      soft_wrap=True, markup=False)
    if "dataset_dropped" in res:  # the study measured fewer requests than the file holds
        files = ", ".join(res["dataset_kept_files"].values())
        console.print(f"{res['dataset_dropped']}"
                      + (f"; the line reads the requests kept: {files}" if files else ""),
                      highlight=False, soft_wrap=True, markup=False)
    console.print("serve it with:", highlight=False)
    out.print(res["serve_command"], highlight=False, soft_wrap=True, markup=False)
