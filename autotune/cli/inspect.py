"""`autotune trials`, `autotune pareto`, `autotune export`: read a study, show it, pick a
config from its front."""

from __future__ import annotations

from pathlib import Path

import click

from autotune import api
from autotune.cli._options import choice, load_cfg, study_options
from autotune.config.study import Preference


@click.command()
@study_options
def trials(config_path: Path, study_name: str | None, storage: str | None) -> None:
    """Table of every trial, with deltas against the baseline; the recommendation marked."""
    api.print_trials(load_cfg(config_path, study_name, storage))


@click.command()
@study_options
def pareto(config_path: Path, study_name: str | None, storage: str | None) -> None:
    """Table of the feasible Pareto front on each config's median over its boots; the
    recommendation first, or after it, apart, with why it is not on it."""
    api.print_front(load_cfg(config_path, study_name, storage))


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
@click.option("--by-load", is_flag=True, help="Where speculation stops paying, measured: boot "
              "the config and the best one of the other kind (speculative or not) again and "
              "measure both at one ladder of loads, low loads included; where a line is "
              "found, also the one server that serves both sides of it (K by batch size) "
              "(capacity studies; docs/speculative.md).")
@click.option("--by-load-loads", metavar="L1,L2,...", help="With --by-load: these loads "
              "(default: 5 from capacity.low to the higher capacity).")
def export_cmd(config_path: Path, study_name: str | None, storage: str | None,
               prefer: str | None,
               max_tpot_ms: float | None, trial_number: int | None, out_dir: Path | None,
               validate: bool, repeats: int | None, verify: bool, verify_samples: int | None,
               target_load: float | None,
               k8s_path: Path | None, image: str, by_load: bool,
               by_load_loads: str | None) -> None:
    """Print the chosen configuration's `vllm serve` command, config file and bench command;
    for a capacity study, what one replica sustains and what a target load takes."""
    opts = api.ExportOptions(prefer, max_tpot_ms, trial_number, out_dir,  # type: ignore[arg-type]
                             validate, repeats, verify, verify_samples, target_load, k8s_path,
                             image, by_load, by_load_loads)
    opts.check()  # the options first, then the study file
    api.export_config(load_cfg(config_path, study_name, storage), opts)


COMMANDS = [trials, pareto, export_cmd]
__all__ = ["COMMANDS"]
