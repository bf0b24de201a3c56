"""`autotune trials`, `autotune pareto`, `autotune export`: read a study, show it, pick a
config from its front."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape
from rich.table import Table

from autotune.cli._options import choice, load_cfg, study_options
from autotune.config.paths import check_file, check_folder
from autotune.config.study import Preference, StudyConfig
from autotune.errors import ConfigError, StudyError
from autotune.outputs.console import console, out

if TYPE_CHECKING:
    import optuna

    from autotune.tuning.record import TrialRecord
    from autotune.tuning.summary import StudySummary


@click.command()
@study_options
def trials(config_path: Path, study_name: str | None, storage: str | None) -> None:
    """Table of every trial, with deltas against the baseline; the recommendation marked."""
    from autotune.outputs.tables import trials_table

    cfg, summary = _summary(config_path, study_name, storage)
    out.print(trials_table(summary, cfg, title=f"study {cfg.name}"))
    out.print(f"recommended: {summary.headline()}", highlight=False, soft_wrap=True)


@click.command()
@study_options
def pareto(config_path: Path, study_name: str | None, storage: str | None) -> None:
    """Table of the feasible Pareto front on each config's median over its boots; the
    recommendation first, or after it, apart, with why it is not on it."""
    from autotune.outputs.tables import front_tables

    cfg, summary = _summary(config_path, study_name, storage)
    for shown in front_tables(summary, cfg):
        out.print(shown, highlight=False, soft_wrap=True)
    out.print(f"recommended: {summary.headline()}", highlight=False, soft_wrap=True)


def _summary(config_path: Path, study_name: str | None, storage: str | None
             ) -> tuple[StudyConfig, StudySummary]:
    from autotune.tuning.study import open_study
    from autotune.tuning.summary import summarize

    cfg = load_cfg(config_path, study_name, storage)
    return cfg, summarize(open_study(cfg, create=False), cfg)


@click.command("export")
@study_options
@click.option("--prefer", type=choice(Preference), help="Instead of the study's "
              "recommendation, this end of the front (on pooled values).")
@click.option("--max-tpot-ms", type=click.FloatRange(min=0, min_open=True),
              help="Best throughput with mean TPOT under this.")
@click.option("--trial", "trial_number", type=int, help="Export this trial instead.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Where to write trial-NNNN/vllm-config.yaml and export.json (default: the "
                   "study's folder/export).")
@click.option("--validate", is_flag=True, help="Boot the baseline and the chosen config again, "
              "interleaved, and re-measure (a capacity study searches each capacity again).")
@click.option("--repeats", type=click.IntRange(min=1),
              help="With --validate: boots of each, interleaved; from 2 the gain gets an "
                   "interval and the study's figure is checked against it.  [default: 1]")
@click.option("--verify", is_flag=True, help="Boot the config as a stock `vllm serve` and "
              "check its capacity with `vllm bench serve`: it should meet the SLOs at the "
              "capacity and miss them tolerance above (capacity studies; exit 1 if not).")
@click.option("--verify-samples", type=click.IntRange(min=1), help="With --verify: fresh "
              "request samples at each load, judged on their median (default: the study's "
              "capacity.samples).")
@click.option("--target-load", type=click.FloatRange(min=0, min_open=True),
              help="Requests/s to serve in all: prints the replicas and GPUs it takes "
                   "(capacity studies).")
@click.option("--k8s", "k8s_path", type=click.Path(path_type=Path),
              help="Write a Kubernetes Deployment of the config here (with --target-load: its "
                   "replica count).")
@click.option("--image", default="vllm/vllm-openai:latest", show_default=True,
              help="Container image of the Deployment.")
def export_cmd(config_path: Path, study_name: str | None, storage: str | None,
               prefer: str | None,
               max_tpot_ms: float | None, trial_number: int | None, out_dir: Path | None,
               validate: bool, repeats: int | None, verify: bool, verify_samples: int | None,
               target_load: float | None,
               k8s_path: Path | None, image: str) -> None:
    """Print the chosen configuration's `vllm serve` command, config file and bench command;
    for a capacity study, what one replica sustains and what a target load takes."""
    from autotune.measure.stats import interval_name, median_ci
    from autotune.outputs.export import export, find_trial
    from autotune.tuning.study import open_study
    from autotune.tuning.summary import choose

    if verify_samples is not None and not verify:
        raise ConfigError("--verify-samples: counts the samples of --verify; add --verify")
    if trial_number is not None and (prefer or max_tpot_ms is not None):
        raise ConfigError("--trial picks the config itself; leave out --prefer and "
                          "--max-tpot-ms (or --trial)")
    if repeats is not None and not validate:
        raise ConfigError("--repeats: counts the boots of --validate; add --validate")
    for path, name in ((out_dir, "--out"), (k8s_path, "--k8s")):
        if path is not None:
            (check_folder if name == "--out" else check_file)(path, name)
    cfg, summary = _summary(config_path, study_name, storage)
    if target_load is not None and cfg.capacity is None:
        raise ConfigError("--target-load: sizing needs a capacity study (a capacity: section "
                          "in the study file); leave --target-load out")
    st = open_study(cfg, create=False)
    trial = find_trial(summary, trial_number) if trial_number is not None \
        else choose(summary, cfg, prefer, max_tpot_ms)  # type: ignore[arg-type]
    rec = summary.recommendation
    if rec.number is not None and trial.number != rec.number:
        console.print(f"note: the study recommends {summary.headline()}; this export is "
                      + (f"trial {trial_number}" if trial_number is not None else
                         f"--prefer {prefer}" if prefer else f"--max-tpot-ms {max_tpot_ms}")
                      + f": trial {trial.number}", highlight=False, soft_wrap=True)
    elif rec.number is not None:
        console.print(f"recommended: {summary.headline()}", highlight=False, soft_wrap=True)
    from autotune.outputs.tables import capacity_line

    if said := capacity_line(cfg, trial):
        out.print(said, highlight=False, soft_wrap=True)
    res = export(cfg, trial, out_dir or cfg.study_dir() / "export")
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
    from autotune.outputs.console import speculation_text
    from autotune.outputs.tables import gain_text

    recs = summary.records
    gains = summary.gains.get(trial.number, {})
    if gains and not trial.baseline:
        console.print("vs vLLM's defaults: " + "; ".join(
            f"{m} {gain_text(g)}" for m, g in gains.items()), highlight=False)
    if cfg.profiles:  # a suite: each profile's values and change against the baseline
        keys = summary.profile_metrics
        per = summary.profile_gains.get(trial.number, {})
        for k in keys:
            if k in trial.metrics:
                vs = f" ({gain_text(per[k])} vs defaults)" if k in per and not trial.baseline \
                    else ""
                console.print(f"  {k} {trial.metrics[k]:,.2f}{vs}", highlight=False)
    if "speculation" in res:
        console.print(speculation_text(res["speculation"]), highlight=False, soft_wrap=True)
    if "quality" in res:  # the guard's verdict, its figures and the floor
        console.print(f"quality: {res['quality']['text']}", highlight=False, soft_wrap=True,
                      markup=False)
    console.print(f"vLLM config file: {res['config_path']}", highlight=False)
    if "bench_load" in res and cfg.capacity is not None:
        from autotune.measure.capacity import capacity_words

        at = capacity_words(cfg.capacity.axis, res["bench_load"])
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
    size = None
    if cfg.capacity is not None:
        from autotune.outputs.deploy import sizing

        size = sizing(cfg, trial, target_load, recs)
        out.print(size.text(", ".join(s.text() for s in cfg.slos)), highlight=False,
                  soft_wrap=True)
    if k8s_path is not None:
        from autotune.outputs.deploy import k8s_deployment

        k8s_path.parent.mkdir(parents=True, exist_ok=True)
        k8s_path.write_text(k8s_deployment(cfg, trial, (size.replicas if size else None) or 1,
                                           image))
        console.print(f"Kubernetes Deployment: {k8s_path}", highlight=False)
    if validate:
        print_validation(cfg, st, summary, trial, repeats or 1, max_tpot_ms)
    if verify:
        print_verification(cfg, trial, verify_samples)
    cert = summary.certification
    if cert is not None and cert.exit_code and trial.number == rec.number:  # its ending too
        from autotune.errors import NotCertified

        raise NotCertified(cert.sentence(), cert.exit_code)


def print_verification(cfg: StudyConfig, trial: TrialRecord, samples: int | None) -> None:
    """`export --verify`: the reference client's verdicts at the capacity and above it."""
    from autotune.measure.verify import lines
    from autotune.outputs.console import PhaseLines
    from autotune.session.checks import verify_capacity

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
    from autotune.outputs.tables import StudyView, gain_text
    from autotune.session.checks import validate
    from autotune.session.open import open_session
    from autotune.tuning.validation import NOT_HELD, Boot

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


COMMANDS = [trials, pareto, export_cmd]
__all__ = ["COMMANDS"]
