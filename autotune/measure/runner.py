"""One boot: start `vllm serve` with some flags, measure each profile on it (a load point, or a
capacity search under SLOs), stop it, and return one `BootRun`.

This is the whole of a trial minus Optuna: `autotune bench` calls it directly and the study's
objective calls it per trial, for one profile or a suite. Expected failures surface as
`ServerError`s and `LoadError`s with their cause.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autotune.config.capacity import CapacityConfig
from autotune.config.study import ServerConfig
from autotune.config.workload import ProfileConfig, SLOConfig
from autotune.errors import AutotuneError, ServerBootError
from autotune.load.datasets import build_requests
from autotune.load.record import Request
from autotune.measure.capacity import CapacityResult
from autotune.measure.on_server import (
    OnPoint,
    OnRequest,
    Phase,
    capacity_on,
    measure_profile,
    write_records,
)
from autotune.measure.point import Point
from autotune.server.command import serve_argv
from autotune.server.health import still_serving
from autotune.server.lifecycle import ServerProcess
from autotune.server.machine import launch_env, preloads
from autotune.server.process import free_port

PORT_ATTEMPTS = 3
# run on a server that is up once its capacity is known: (its URL, its log, the search) -> a
# document
OnMeasured = Callable[[str, Path, CapacityResult], "dict[str, Any] | None"]


@dataclass(frozen=True)
class Timings:
    """Seconds spent in each part of a trial."""

    boot_s: float = 0.0
    bench_s: float = 0.0
    stop_s: float = 0.0
    total_s: float = 0.0
    guard_s: float = 0.0  # the quality guard's readings, before and after the load
    check_s: float = 0.0  # what `on_measured` ran on the server (a reference check)


@dataclass(frozen=True)
class BootRun:
    """One boot of `vllm serve` and what was measured on it, by profile label: a load point
    each (`points`), or a capacity search each (`capacities`, when a capacity was searched)."""

    argv: list[str]
    params: dict[str, Any]
    timings: Timings
    log_path: str
    points: dict[str, Point] = field(default_factory=dict)
    capacities: dict[str, CapacityResult] = field(default_factory=dict)
    workloads: dict[str, dict[str, Any]] = field(default_factory=dict)  # by label, load mode
    launch: str = "direct"  # "forked" from the preloaded vLLM (autotune.server.forkserver)
    quality: dict[str, Any] | None = None  # what `after` found on the server (the guard's)
    checked: dict[str, Any] | None = None  # what `on_measured` ran on the server (a reference)

    @property
    def point(self) -> Point:
        """The one profile's load point."""
        (pt,) = self.points.values()
        return pt

    @property
    def capacity(self) -> CapacityResult:
        """The one profile's capacity search."""
        (res,) = self.capacities.values()
        return res

    def profile_metrics(self, label: str) -> dict[str, float]:
        """One profile's flat metrics: its point's (and the server's), or its capacity summary."""
        if label in self.capacities:
            return self.capacities[label].summary()
        pt = self.points[label]
        return pt.metrics.flat() | pt.server_stats

    def metrics(self) -> dict[str, float]:
        """Every profile's flat metrics as `<label>/<metric>`."""
        return {f"{k}/{m}": v for k in [*self.points, *self.capacities]
                for m, v in self.profile_metrics(k).items()}

    def to_json(self) -> dict[str, Any]:
        """result.json: argv, flags, timings and log; then the one profile's measurement, or
        each profile's under `profiles`."""
        doc: dict[str, Any] = {"argv": self.argv, "params": self.params,
                               "timings": asdict(self.timings), "log_path": self.log_path,
                               "launch": self.launch}
        each = {k: _profile_json(pt, self.workloads.get(k, {}))
                for k, pt in self.points.items()} | {
            k: {"summary": r.summary(), **r.to_json()} for k, r in self.capacities.items()}
        if len(each) == 1:
            return doc | next(iter(each.values()))
        return doc | {"metrics": self.metrics(), "profiles": each}


def _profile_json(pt: Point, workload: dict[str, Any]) -> dict[str, Any]:
    return {"workload": workload | {"client_processes": pt.settings.processes},
            "metrics": pt.metrics.flat(), "errors": pt.metrics.errors,
            "server_stats": pt.server_stats}


def cache_env(root: Path) -> dict[str, str]:
    """Where a boot's reusable work goes, all under one root that every trial (and every worker
    on the host) shares and that a study can carry to another machine: vLLM's torch.compile
    cache (VLLM_CACHE_ROOT), and the JIT caches that otherwise land in the home directory or
    /tmp (Triton's kernels, Inductor's, FlashInfer's modules, the CUDA driver's PTX cache)."""
    return {"VLLM_CACHE_ROOT": str(root), "TRITON_CACHE_DIR": str(root / "triton"),
            "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
            "FLASHINFER_WORKSPACE_BASE": str(root / "flashinfer"),
            "CUDA_CACHE_PATH": str(root / "cuda")}


# `vllm serve` starts its engine process with spawn unless told otherwise, and the new
# interpreter imports vLLM and torch again: 20-29 s of each warm boot on the H100 (the API
# server's config line to the engine's first line, docs/results/trial-cost-h100). fork is vLLM's
# own default outside its CLI, and vLLM still picks spawn where fork is unsafe (CUDA already
# initialized in the parent; its CPU platform always spawns). Part of the preloaded launch
# only (machine.preloads): a stock `vllm serve` keeps vLLM's own engine start.
BOOT_ENV = {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}


def cache_root(server: ServerConfig, workdir: Path) -> Path:
    """The caches' one root for a boot in `workdir`: server.cache_root, default
    <workdir>/../vllm-cache (shared by a study's trials)."""
    return Path(server.cache_root or workdir.parent / "vllm-cache")


def server_env(server: ServerConfig, workdir: Path) -> dict[str, str]:
    """The server's environment: the caches under one root shared by trials (`cache_env`;
    server.cache_root, default <workdir>/vllm-cache) and, for a preloaded launch, BOOT_ENV,
    then ours, then the config's (`launch_env`). A JIT cache the user's environment already
    places stays where it is; VLLM_CACHE_ROOT is always the study's."""
    cache = cache_root(server, workdir)
    boot = BOOT_ENV if preloads(server) else {}
    return {**cache_env(cache), **boot, **os.environ, **launch_env(server),
            "VLLM_CACHE_ROOT": str(cache)}



@contextmanager
def booted(server: ServerConfig, params: Mapping[str, Any], workdir: Path, phase: Phase,
           while_booting: Callable[[], None] = lambda: None) -> Iterator[ServerProcess]:
    """A healthy `vllm serve` with the fixed args plus `params`, stopped on the way out.
    `while_booting` runs once the process has started (work to overlap with the boot)."""
    argv = serve_argv(server.executable, server.model, server.launch_flags(dict(params)),
                      server.extra_args)
    phase("booting")
    for attempt in range(PORT_ATTEMPTS):
        proc = ServerProcess(argv, log_path=workdir / "server.log", port=free_port(server.host),
                             host=server.host, env=server_env(server, workdir),
                             preload=server.executable if preloads(server) else None,
                             preload_log=workdir.parent / "vllm-forkserver.log")
        try:
            proc.start()
            if attempt == 0:
                while_booting()
            proc.wait_healthy(server.boot_timeout_s)
            break
        except ServerBootError as e:
            proc.stop()
            # the port was free when the kernel gave it, but another process took it before
            # vLLM bound it: boot again on another port
            if "address already in use" in (e.cause or "").lower() and \
                    attempt + 1 < PORT_ATTEMPTS:
                phase("booting (port taken, another port)")
                continue
            raise
        except BaseException:
            proc.stop()
            raise
    try:
        yield proc
    finally:
        proc.stop()


def _serving(proc: ServerProcess) -> Callable[[], None]:
    """After each run of a trial's capacity search: the server's process exited (its cause from
    the log first), or its engine died under the API server (server.health): either ends the
    trial with that cause, not with a capacity read from a dead server's failed requests."""
    serving = still_serving(proc.base_url, advice=f"its log: {proc.log_path}",
                            log_path=str(proc.log_path))

    def check() -> None:
        proc.check_alive()
        serving()
    return check


def _labelled(phase: Phase, label: str) -> Phase:
    return lambda x: phase(f"{label}: {x}")


def run_boot(server: ServerConfig, profiles: Sequence[ProfileConfig], params: Mapping[str, Any],
             workdir: Path, *, capacity: CapacityConfig | None = None,
             slos: Sequence[SLOConfig] = (), starts: Mapping[str, float] | None = None,
             stop_below: float | None = None, requests: list[Request] | None = None,
             on_phase: Phase | None = None, on_request: OnRequest | None = None,
             on_point: OnPoint | None = None,
             before: Callable[[str], dict[str, Any]] | None = None,
             after: Callable[[str], dict[str, Any]] | None = None,
             on_measured: OnMeasured | None = None,
             max_len: int | None = None, warm_enough: int = 0) -> BootRun:
    """Boot `vllm serve` with the fixed args plus `params`, measure each profile in turn, stop it.

    Without `capacity`, each profile's requests (`requests`, for a single profile, or drawn
    while vLLM boots) run after their warm-up. With it, each profile's capacity is searched
    (from `starts[label]` when given, stopping early below `stop_below`). `before` runs on the
    server's URL once it is healthy, before any load (the quality guard's reference, read
    cold), `after` once the measurement is done (the guard's reading); `on_measured` then gets
    the URL, the log and the capacity found while the server is still up (the certify phase's
    reference check on the pick's last certify boot: tuning.certify), its result kept as
    `checked` and its seconds as `check_s`. A dataset's or a trace's requests longer than
    `max_len` tokens are left out, as the study's preflight left them out
    (tuning.preflight.study_limit; default: the server's max_model_len, else the model's).
    `warm_enough`: a config that ran warm before on these caches warms in at most this many
    windows unless a kernel compiles (tuning.warmup; 0: as `capacity` says). Files go under
    `<workdir>/<label>/` when there are several profiles; `result.json` is the
    `BootRun`."""
    t_start = time.monotonic()
    phase = on_phase or (lambda _p: None)
    max_len = max_len or server.args.get("max_model_len")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    many = len(profiles) > 1
    # Draw the workload while vLLM boots; a bad tokenizer path waits for the server's own
    # verdict, which names the real problem when the model path itself is wrong.
    pending: list[AutotuneError] = []
    reqs: dict[str, list[Request]] = {}
    if requests is not None and not many:
        reqs[profiles[0].key] = requests

    def draw() -> None:
        if capacity is not None:  # each point draws its own requests
            return
        try:
            for p in profiles:
                if p.key not in reqs:
                    reqs[p.key] = build_requests(p, server.tokenizer_dir, max_len)
        except AutotuneError as e:
            pending.append(e)

    points: dict[str, Point] = {}
    capacities: dict[str, CapacityResult] = {}
    workloads: dict[str, dict[str, Any]] = {}
    with booted(server, params, workdir, phase, draw) as proc:
        assert proc.started_at is not None and proc.healthy_at is not None
        boot_s = proc.healthy_at - proc.started_at
        if pending:
            raise pending[0]
        guard_s = 0.0
        if before is not None:
            phase("recording the quality reference")
            t_guard = time.monotonic()
            before(proc.base_url)
            guard_s += time.monotonic() - t_guard
        t_bench = time.monotonic()
        for p in profiles:
            where = workdir / p.key if many else workdir
            where.mkdir(parents=True, exist_ok=True)
            label = _labelled(phase, p.key) if many else phase
            if capacity is not None:
                capacities[p.key] = capacity_on(
                    proc.base_url, server.model, server.tokenizer_dir, p, capacity, list(slos),
                    where, start=(starts or {}).get(p.key), stop_below=stop_below,
                    on_phase=label, on_point=on_point, alive=proc.alive,
                    check=_serving(proc), log_path=proc.log_path, max_len=max_len,
                    warm_enough=warm_enough)
            else:
                label("benchmarking")
                pt = measure_profile(proc, server.model, p, reqs[p.key],
                                     label=p.key if many else "", on_request=on_request)
                write_records(pt.records, where / "requests.csv")
                points[p.key] = pt
                i_len, o_len = p.lengths()
                workloads[p.key] = {"profile": p.name, "input_len": i_len, "output_len": o_len,
                                    "num_prompts": p.num_prompts,
                                    "max_concurrency": p.max_concurrency,
                                    "request_rate": str(p.request_rate), "seed": p.seed}
        bench_s = time.monotonic() - t_bench
        checked, check_s = None, 0.0
        if on_measured is not None and capacity is not None and len(capacities) == 1:
            t_check = time.monotonic()
            checked = on_measured(proc.base_url, proc.log_path, next(iter(capacities.values())))
            check_s = time.monotonic() - t_check
        found = None
        if after is not None:
            phase("checking outputs")
            t_guard = time.monotonic()
            found = after(proc.base_url)
            guard_s += time.monotonic() - t_guard
        phase("stopping")
        t_stop = time.monotonic()
    run = BootRun(proc.argv, dict(params), Timings(boot_s, bench_s, time.monotonic() - t_stop,
                                                  time.monotonic() - t_start, guard_s, check_s),
                  str(proc.log_path), points, capacities, workloads, proc.launch, found,
                  checked)
    (workdir / "result.json").write_text(json.dumps(run.to_json(), indent=2, default=str) + "\n")
    return run
