"""`autotune trials`, `autotune pareto`, `autotune export`: read a study, show it, pick a
config from its front."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from autotune.cli._options import choice, load_cfg, study_options
from autotune.cli.study import print_tables
from autotune.errors import StudyError
from autotune.export import Preference
from autotune.present import console, out, trial_progress, trials_table


@click.command()
@study_options
def trials(config_path: Path, study_name: str | None, storage: str | None) -> None:
    """Table of every trial, with deltas against the baseline."""
    from autotune.results import records
    from autotune.study import open_study

    cfg = load_cfg(config_path, study_name, storage)
    st = open_study(cfg, create=False)
    out.print(trials_table(records(st), cfg.metric_names(), title=f"study {cfg.name}",
                           extra=cfg.profile_metrics()))


@click.command()
@study_options
def pareto(config_path: Path, study_name: str | None, storage: str | None) -> None:
    """Table of the feasible Pareto front."""
    from autotune.results import front
    from autotune.study import open_study

    cfg = load_cfg(config_path, study_name, storage)
    st = open_study(cfg, create=False)
    out.print(trials_table(front(st), cfg.metric_names(), title="Pareto front (feasible)",
                           extra=cfg.profile_metrics()))


@click.command("export")
@study_options
@click.option("--prefer", type=choice(Preference), default="knee", show_default=True,
              help="Which end of the front to take.")
@click.option("--max-tpot-ms", type=float, help="Best throughput with mean TPOT under this.")
@click.option("--trial", "trial_number", type=int, help="Export this trial instead.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Where to write vllm-config.yaml (default: the study's folder).")
@click.option("--validate", is_flag=True, help="Boot the chosen config again and re-measure "
              "(a capacity study searches its capacity again).")
@click.option("--target-load", type=click.FloatRange(min=0, min_open=True),
              help="Requests/s to serve in all: prints the replicas and GPUs it takes "
                   "(capacity studies).")
@click.option("--k8s", "k8s_path", type=click.Path(path_type=Path),
              help="Write a Kubernetes Deployment of the config here (with --target-load: its "
                   "replica count).")
@click.option("--image", default="vllm/vllm-openai:latest", show_default=True,
              help="Container image of the Deployment.")
def export_cmd(config_path: Path, study_name: str | None, storage: str | None, prefer: str,
               max_tpot_ms: float | None, trial_number: int | None, out_dir: Path | None,
               validate: bool, target_load: float | None, k8s_path: Path | None,
               image: str) -> None:
    """Print the chosen configuration's `vllm serve` command, config file and bench command;
    for a capacity study, what one replica sustains and what a target load takes."""
    from autotune.export import choose, export, find_trial
    from autotune.export import validate as do_validate
    from autotune.study import open_study

    cfg = load_cfg(config_path, study_name, storage)
    st = open_study(cfg, create=False)
    trial = find_trial(st, trial_number) if trial_number is not None else \
        choose(st, cfg, prefer, max_tpot_ms)  # type: ignore[arg-type]
    res = export(cfg, trial, out_dir or cfg.study_dir() / "export")
    vals = ", ".join(f"{k} {v:,.2f}" for k, v in res["values"].items())
    console.print(f"trial {trial.number} ({vals})", highlight=False)
    if cfg.profiles:  # a suite: each profile's values and change against the baseline
        from autotune.results import baseline, metric_deltas, records

        keys = cfg.profile_metrics()
        d = metric_deltas(trial, baseline(records(st)), keys)
        for k in keys:
            if k in trial.metrics:
                vs = f" ({d[k] * 100:+.1f}% vs defaults)" if k in d else ""
                console.print(f"  {k} {trial.metrics[k]:,.2f}{vs}", highlight=False)
    console.print(f"vLLM config file: {res['config_path']}", highlight=False)
    console.print("benchmark it with:", highlight=False)
    for label, line in res.get("bench_commands", {"": res["bench_command"]}).items():
        console.print("  " + (f"{label}: " if label else "") + line, highlight=False,
                      soft_wrap=True, markup=False)
    console.print("serve it with:", highlight=False)
    out.print(res["serve_command"], highlight=False, soft_wrap=True, markup=False)
    size = None
    if cfg.capacity is not None:
        from autotune.deploy import sizing

        size = sizing(cfg, trial, target_load)
        out.print(size.text(", ".join(s.text() for s in cfg.slos)), highlight=False,
                  soft_wrap=True)
    elif target_load is not None:
        raise StudyError("--target-load: sizing needs a capacity study (a capacity: section)")
    if k8s_path is not None:
        from autotune.deploy import k8s_deployment

        k8s_path.parent.mkdir(parents=True, exist_ok=True)
        k8s_path.write_text(k8s_deployment(cfg, trial, (size.replicas if size else None) or 1,
                                           image))
        console.print(f"Kubernetes Deployment: {k8s_path}", highlight=False)
    if validate and cfg.capacity is not None:
        from autotune.export import validate_capacity

        with trial_progress("validate", 0) as tp:
            cv = validate_capacity(cfg, trial, on_phase=tp.phase)
        rerun = cv.rerun.capacity
        change = (rerun - cv.study_capacity) / cv.study_capacity * 100 if cv.study_capacity \
            else 0.0
        out.print(f"capacity: study {cv.study_capacity:g}, re-run {rerun:g} ({change:+.1f}%; "
                  f"{len(cv.rerun.points)} load points, tolerance "
                  f"{cfg.capacity.tolerance:.0%}); files in {cv.run_dir}", highlight=False)
    elif validate:
        with trial_progress("validate", cfg.profile.num_prompts) as tp:
            v = do_validate(cfg, trial, on_phase=tp.phase, on_request=tp.request_done)
        t = Table(title="validation", header_style="bold")
        for col, justify in (("metric", "left"), ("study", "right"), ("re-run", "right"),
                             ("change", "right")):
            t.add_column(col, justify=justify)  # type: ignore[arg-type]
        for metric, before, after in v.rows:
            t.add_row(metric, f"{before:,.2f}", f"{after:,.2f}",
                      f"{(after - before) / before * 100:+.1f}%" if before else "-")
        out.print(t)


COMMANDS = [trials, pareto, export_cmd]
__all__ = ["COMMANDS", "print_tables"]
