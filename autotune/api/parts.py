"""The measuring parts under the public calls (autotune.api), public for the lab (lab/): its
A/Bs of how a server is launched, its checks of the load generator against `vllm bench serve`,
and its replays of the rules a study applies (the capacity search's bracket, settling a miss,
the certify rule) on recorded points. Each name is defined, typed and documented in its module
(the table below); a name that reads ambiguously out of its module is given a longer one here
(`judge_point` is autotune.measure.capacity.judge). Like autotune.api, importing this module
loads none of them until one is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.api._lazy import faces

_HOMES: dict[str, tuple[str, ...]] = {
    # a vLLM server: its argv, its process group, its environment, its /metrics and its log
    "autotune.server.lifecycle": ("ServerProcess",),
    "autotune.server.command": ("serve_argv", "params_to_args"),
    "autotune.server.process": ("free_port",),
    "autotune.server.machine": ("launch_env",),
    "autotune.server.forkserver": ("fork_server", "stop_fork_servers"),
    "autotune.server.scrape": ("ServerStats", "scrape_url", "scrape_once"),
    "autotune.server.jit": ("LogSpan",),
    "autotune.server.vllm_help": ("vllm_info=get_vllm_info", "check_flags"),
    "autotune.config.study": ("default_executable",),
    "autotune.measure.runner": ("booted", "server_env", "cache_env", "BOOT_ENV", "run_boot"),
    # the load generator: requests, a trace's windows, the client's CPUs, one run
    "autotune.load": ("LoadSettings", "run_load"),
    "autotune.load.record": ("Request", "RequestRecord"),
    "autotune.load.datasets": ("build_requests", "study_requests", "load_tokenizer", "load_trace",
                               "sharegpt_json_for_vllm"),
    "autotune.load.placement": ("client_cpus", "bound_cpus"),
    "autotune.load.replay": ("trace_window=point", "write_vllm_trace"),
    # one load point and the capacity search: metrics, SLO judgements, settling, drift
    "autotune.measure.on_server": ("measure_load=measure", "capacity_on", "write_records"),
    "autotune.measure.metrics": ("compute_metrics", "steady_share"),
    "autotune.measure.capacity": ("LoadPoint", "CapacityResult", "judge_point=judge", "intervals",
                                  "point_seed", "MAX_LATE_READS"),
    "autotune.measure.point": ("request_samples=samples",),
    "autotune.measure.search": ("capacity_search=search",),
    "autotune.measure.settle": ("Settle", "settle_rules=rules"),
    "autotune.measure.drift": ("point_drift",),
    "autotune.config.metric_names": ("QUANTILES",),
    # speculative decoding: the acceptance profile read from vLLM's counters
    "autotune.session.acceptance": ("acceptance_profile_of=profile_of",),
    # the reference client (`vllm bench serve`) and the quality guard
    "autotune.measure.verify": ("Reference", "Target", "capacity_target", "reference_check=verify",
                                "verify_lines=lines"),
    "autotune.measure.reference": ("run_reference", "reference_client", "same_read"),
    "autotune.measure.quality": ("Completion",),
    "autotune.tuning.quality": ("QualityGuard=Guard",),
    # the certify rule and what it prices: gains over boots, pairs, a sitting simulated
    "autotune.measure.stats": ("percentile_ranks",),
    "autotune.measure.censored": ("censored_gain", "CERTIFY_LEVEL"),
    "autotune.tuning.plan": ("Costs", "boots_for", "fit_pairs", "too_few"),
    "autotune.tuning.certify_rule": ("CertifyRule=Rule",),
    "autotune.tuning.certify_sim": ("certify_sitting=sitting", "certify_across=across"),
    "autotune.tuning.machines": ("machine_identity=identity",),
    # what a study shows of a trial, and MLflow's UI
    "autotune.outputs.export": ("serve_line",),
    "autotune.outputs.tables": ("capacity_line",),
    "autotune.outputs.tracking": ("default_tracking_uri",),
    "autotune.outputs.mlflow_ui": ("MlflowUI",),
    "autotune.outputs.mlflow_view": ("runs_url",),
}

if TYPE_CHECKING:
    from autotune.config.metric_names import QUANTILES as QUANTILES
    from autotune.config.study import default_executable as default_executable
    from autotune.load import LoadSettings as LoadSettings
    from autotune.load import run_load as run_load
    from autotune.load.datasets import build_requests as build_requests
    from autotune.load.datasets import load_tokenizer as load_tokenizer
    from autotune.load.datasets import load_trace as load_trace
    from autotune.load.datasets import sharegpt_json_for_vllm as sharegpt_json_for_vllm
    from autotune.load.datasets import study_requests as study_requests
    from autotune.load.placement import bound_cpus as bound_cpus
    from autotune.load.placement import client_cpus as client_cpus
    from autotune.load.record import Request as Request
    from autotune.load.record import RequestRecord as RequestRecord
    from autotune.load.replay import point as trace_window  # noqa: F401
    from autotune.load.replay import write_vllm_trace as write_vllm_trace
    from autotune.measure.capacity import MAX_LATE_READS as MAX_LATE_READS
    from autotune.measure.capacity import CapacityResult as CapacityResult
    from autotune.measure.capacity import LoadPoint as LoadPoint
    from autotune.measure.capacity import intervals as intervals
    from autotune.measure.capacity import judge as judge_point  # noqa: F401
    from autotune.measure.capacity import point_seed as point_seed
    from autotune.measure.censored import CERTIFY_LEVEL as CERTIFY_LEVEL
    from autotune.measure.censored import censored_gain as censored_gain
    from autotune.measure.drift import point_drift as point_drift
    from autotune.measure.metrics import compute_metrics as compute_metrics
    from autotune.measure.metrics import steady_share as steady_share
    from autotune.measure.on_server import capacity_on as capacity_on
    from autotune.measure.on_server import measure as measure_load  # noqa: F401
    from autotune.measure.on_server import write_records as write_records
    from autotune.measure.point import samples as request_samples  # noqa: F401
    from autotune.measure.quality import Completion as Completion
    from autotune.measure.reference import reference_client as reference_client
    from autotune.measure.reference import run_reference as run_reference
    from autotune.measure.reference import same_read as same_read
    from autotune.measure.runner import BOOT_ENV as BOOT_ENV
    from autotune.measure.runner import booted as booted
    from autotune.measure.runner import cache_env as cache_env
    from autotune.measure.runner import run_boot as run_boot
    from autotune.measure.runner import server_env as server_env
    from autotune.measure.search import search as capacity_search  # noqa: F401
    from autotune.measure.settle import Settle as Settle
    from autotune.measure.settle import rules as settle_rules  # noqa: F401
    from autotune.measure.stats import percentile_ranks as percentile_ranks
    from autotune.measure.verify import Reference as Reference
    from autotune.measure.verify import Target as Target
    from autotune.measure.verify import capacity_target as capacity_target
    from autotune.measure.verify import lines as verify_lines  # noqa: F401
    from autotune.measure.verify import verify as reference_check  # noqa: F401
    from autotune.outputs.export import serve_line as serve_line
    from autotune.outputs.mlflow_ui import MlflowUI as MlflowUI
    from autotune.outputs.mlflow_view import runs_url as runs_url
    from autotune.outputs.tables import capacity_line as capacity_line
    from autotune.outputs.tracking import default_tracking_uri as default_tracking_uri
    from autotune.server.command import params_to_args as params_to_args
    from autotune.server.command import serve_argv as serve_argv
    from autotune.server.forkserver import fork_server as fork_server
    from autotune.server.forkserver import stop_fork_servers as stop_fork_servers
    from autotune.server.jit import LogSpan as LogSpan
    from autotune.server.lifecycle import ServerProcess as ServerProcess
    from autotune.server.machine import launch_env as launch_env
    from autotune.server.process import free_port as free_port
    from autotune.server.scrape import ServerStats as ServerStats
    from autotune.server.scrape import scrape_once as scrape_once
    from autotune.server.scrape import scrape_url as scrape_url
    from autotune.server.vllm_help import check_flags as check_flags
    from autotune.server.vllm_help import get_vllm_info as vllm_info  # noqa: F401
    from autotune.session.acceptance import profile_of as acceptance_profile_of  # noqa: F401
    from autotune.tuning.certify_rule import Rule as CertifyRule  # noqa: F401
    from autotune.tuning.certify_sim import across as certify_across  # noqa: F401
    from autotune.tuning.certify_sim import sitting as certify_sitting  # noqa: F401
    from autotune.tuning.machines import identity as machine_identity  # noqa: F401
    from autotune.tuning.plan import Costs as Costs
    from autotune.tuning.plan import boots_for as boots_for
    from autotune.tuning.plan import fit_pairs as fit_pairs
    from autotune.tuning.plan import too_few as too_few
    from autotune.tuning.quality import Guard as QualityGuard  # noqa: F401

    # mypy exports a name imported under another name only when __all__ lists it; at run time
    # faces() below sets __all__ to every name
    __all__ = ["trace_window", "judge_point", "measure_load", "request_samples",
               "capacity_search", "settle_rules", "verify_lines", "reference_check",
               "vllm_info", "acceptance_profile_of", "CertifyRule", "certify_across",
               "certify_sitting", "machine_identity", "QualityGuard"]

if not TYPE_CHECKING:  # at run time each name loads on first use; mypy reads the above
    __all__, __getattr__, __dir__ = faces(__name__, globals(), _HOMES)
