"""autotune's public API: the calls a user, a script or the `autotune` command needs, and the
types they take and give, each documented where it is defined. The command line (autotune.cli)
imports only this module and the study file's models (autotune.config); the lab (lab/) this
module and autotune.api.parts, the measuring parts under the calls. Anything else of the
package is internal and may change (pyproject.toml's import contracts hold both to it).

    from pathlib import Path
    from autotune.api import SessionOptions, load_study_config, run_session, study_summary

    cfg = load_study_config("examples/cpu-demo.yaml")
    run_session(cfg, SessionOptions(config_path=Path("examples/cpu-demo.yaml")))
    print(study_summary(cfg).headline())

A study (autotune.session): `run_session` runs or resumes one as `autotune study` does;
`create_study` and `join_study` spread it over workers on several hosts; `confirm_study` boots
the front's top configs and the baseline again. Reading one: `study_summary` (the one answer,
computed once), `print_trials`, `print_front`, `export_config`, `write_study_report`,
`sync_mlflow`, `serve_ui`; the checks that boot the chosen config again: `validate` and
`verify_capacity`. One config on one server: `bench_config`; the acceptance profile of a
speculative method on the model's own weights: `measure_acceptance`. Samplers replayed on a measured
grid: `replay_samplers`. Inputs: `make_tiny_model`, `make_real_model`, `make_trace`.

A name loads from its module on first use: importing this module loads no Optuna, MLflow or
vLLM, so `autotune --help` starts fast and each command loads what it calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.api._lazy import faces

_HOMES: dict[str, tuple[str, ...]] = {
    # the study file (a strict pydantic model per section) and the exception tree
    "autotune.config.study": ("StudyConfig", "ServerConfig", "load_study_config"),
    "autotune.config.workload": ("ProfileConfig", "SLOConfig", "parse_slo"),
    "autotune.config.capacity": ("CapacityConfig",),
    "autotune.config.quality": ("QualityConfig",),
    "autotune.config.base": ("parse_model",),
    "autotune.errors": ("AutotuneError", "ConfigError", "StudyError", "LoadError", "NotCertified"),
    # where autotune prints: console (stderr: progress and notes), out (stdout: results)
    "autotune.outputs.console": ("console", "out"),
    # a study, as the commands run it
    "autotune.session.study": ("run_session", "SessionOptions"),
    "autotune.session.workers": ("create_study", "join_study", "WorkerOptions"),
    "autotune.session.confirm": ("confirm_study",),
    "autotune.session.inspect": ("study_summary", "print_trials", "print_front", "export_config",
                                 "ExportOptions"),
    "autotune.session.checks": ("validate", "verify_capacity"),
    "autotune.tuning.summary": ("StudySummary",),
    "autotune.tuning.record": ("TrialRecord",),
    # one config, samplers replayed, and the inputs a study runs on
    "autotune.session.bench": ("bench_config", "BenchOptions"),
    "autotune.session.acceptance": ("measure_acceptance", "AcceptanceOptions"),
    "autotune.session.replay": ("replay_samplers", "enqueue_repeats", "ReplayOptions"),
    "autotune.session.tools": ("write_study_report", "sync_mlflow", "serve_ui", "make_real_model",
                               "make_trace"),
    "autotune.load.maketrace": ("TraceSpec",),
    "autotune.load.tinymodel": ("make_tiny_model",),
}

if TYPE_CHECKING:
    from autotune.config.base import parse_model as parse_model
    from autotune.config.capacity import CapacityConfig as CapacityConfig
    from autotune.config.quality import QualityConfig as QualityConfig
    from autotune.config.study import ServerConfig as ServerConfig
    from autotune.config.study import StudyConfig as StudyConfig
    from autotune.config.study import load_study_config as load_study_config
    from autotune.config.workload import ProfileConfig as ProfileConfig
    from autotune.config.workload import SLOConfig as SLOConfig
    from autotune.config.workload import parse_slo as parse_slo
    from autotune.errors import AutotuneError as AutotuneError
    from autotune.errors import ConfigError as ConfigError
    from autotune.errors import LoadError as LoadError
    from autotune.errors import NotCertified as NotCertified
    from autotune.errors import StudyError as StudyError
    from autotune.load.maketrace import TraceSpec as TraceSpec
    from autotune.load.tinymodel import make_tiny_model as make_tiny_model
    from autotune.outputs.console import console as console
    from autotune.outputs.console import out as out
    from autotune.session.acceptance import AcceptanceOptions as AcceptanceOptions
    from autotune.session.acceptance import measure_acceptance as measure_acceptance
    from autotune.session.bench import BenchOptions as BenchOptions
    from autotune.session.bench import bench_config as bench_config
    from autotune.session.checks import validate as validate
    from autotune.session.checks import verify_capacity as verify_capacity
    from autotune.session.confirm import confirm_study as confirm_study
    from autotune.session.inspect import ExportOptions as ExportOptions
    from autotune.session.inspect import export_config as export_config
    from autotune.session.inspect import print_front as print_front
    from autotune.session.inspect import print_trials as print_trials
    from autotune.session.inspect import study_summary as study_summary
    from autotune.session.replay import ReplayOptions as ReplayOptions
    from autotune.session.replay import enqueue_repeats as enqueue_repeats
    from autotune.session.replay import replay_samplers as replay_samplers
    from autotune.session.study import SessionOptions as SessionOptions
    from autotune.session.study import run_session as run_session
    from autotune.session.tools import make_real_model as make_real_model
    from autotune.session.tools import make_trace as make_trace
    from autotune.session.tools import serve_ui as serve_ui
    from autotune.session.tools import sync_mlflow as sync_mlflow
    from autotune.session.tools import write_study_report as write_study_report
    from autotune.session.workers import WorkerOptions as WorkerOptions
    from autotune.session.workers import create_study as create_study
    from autotune.session.workers import join_study as join_study
    from autotune.tuning.record import TrialRecord as TrialRecord
    from autotune.tuning.summary import StudySummary as StudySummary

if not TYPE_CHECKING:  # at run time each name loads on first use; mypy reads the above
    __all__, __getattr__, __dir__ = faces(__name__, globals(), _HOMES)
