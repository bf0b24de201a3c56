"""Every check that can fail without booting a server, run before the first boot.

The search space parses; the vLLM executable runs and accepts every flag and choice of the space
(`vllm serve --help=all`); the model directory holds what vLLM and the load generator read;
max_model_len can hold the profile; the storage URL and the work directory are usable. Each
failure is one ConfigError naming the field and the fix, and nothing is written.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from autotune.config.hub import is_local, local_dir
from autotune.config.paths import check_folder
from autotune.config.study import (
    PARALLEL_FLAGS,
    StudyConfig,
    gpus_per_replica,
    layout_text,
    model_max_len,
)
from autotune.config.workload import ProfileConfig
from autotune.errors import ConfigError
from autotune.load.trace import Trace
from autotune.load.trace_checks import check_replay_time
from autotune.load.user_dataset import Dataset
from autotune.server.vllm_help import VllmInfo, check_flags, get_vllm_info
from autotune.tuning.search_space import (
    CategoricalParam,
    IntParam,
    SearchSpace,
)
from autotune.tuning.speculative import check_emulation, shape_only_notes, space_of
from autotune.tuning.storage import check_url


@dataclass(frozen=True)
class Preflight:
    space: SearchSpace
    vllm: VllmInfo
    dataset: str | None = None  # what reading a dataset profile's file found
    dropped: int = 0  # requests of a dataset profile's file left out as too long
    max_len: int | None = None  # the tokens a request may hold in every trial (request_limit)
    max_len_source: str = "the model's limit"


def request_limit(cfg: StudyConfig, space: SearchSpace) -> tuple[int | None, str]:
    """The most tokens (prompt + output) a request may hold in every trial of the study, and
    what sets it: the space's `fixed: max_model_len`, else the server's args, else the lowest
    max_model_len the space searches; None: the model's own limit."""
    if space.fixed.get("max_model_len"):
        return (int(space.fixed["max_model_len"]),
                f"search space {space.name!r}: fixed: max_model_len")
    if cfg.server.args.get("max_model_len"):
        return int(cfg.server.args["max_model_len"]), "server.args.max_model_len"
    p = space.parameters.get("max_model_len")
    if isinstance(p, IntParam):
        return p.low, f"search space {space.name!r}: parameters.max_model_len.low"
    if isinstance(p, CategoricalParam):
        nums = [int(c) for c in p.choices if isinstance(c, int | float)]
        if nums:
            return min(nums), f"search space {space.name!r}: parameters.max_model_len.choices"
    return None, "the model's limit"


def preflight(cfg: StudyConfig, space: SearchSpace | None = None) -> Preflight:
    """Every check that can fail without booting a server. A worker passes the space stored
    in the study, so hosts need not hold the same search-space file."""
    if space is None:
        space, left = space_of(cfg.search_space, cfg.server)
        for note in shape_only_notes(cfg.server, space, left):  # once, before a boot
            warnings.warn(note, stacklevel=1)
    check_workdir(cfg.workdir)
    check_url(cfg.storage_url())
    cfg.server.check_executable()
    check_model(cfg.server.model, cfg.server.tokenizer)
    check_model_len(cfg, space)
    check_layout(cfg, space)
    check_multicast(cfg, space)
    if cfg.sampler.name == "grid":
        try:
            space.grid()
        except ValueError as e:
            raise ConfigError(f"sampler.name: grid: search space {space.name!r}: {e}") from None
    max_len, source = request_limit(cfg, space)
    read = read_datasets(cfg, max_len, source)
    dataset = files_note(cfg, read, max_len, source)
    for i, start in enumerate(cfg.starts):
        try:
            space.check_start(start, f"starts.{i}")
        except ValueError as e:
            raise ConfigError(str(e)) from None
    info = get_vllm_info(cfg.server.executable, cfg.server.env)  # ~15 s the first time
    check_emulation(cfg.server, space, info.version)
    flags: dict[str, list[object] | None] = {f: [v] for f, v in space.fixed.items()}
    for name, p in space.parameters.items():
        flag = p.into or name
        choices = space.choices_by_flag().get(name) if not p.into else None
        flags[flag] = list(choices) if choices is not None else None
    # the study file's own values too: a choice or a type vLLM would refuse at every boot
    args: dict[str, list[object] | None] = {f: [v] for f, v in cfg.server.args.items()
                                            if f not in flags}
    problems = []  # each flag named where it is written: the study file's args, or the space
    for where, given in (("server.args", args), (f"search space {space.name!r}", flags)):
        try:
            check_flags(info, given, where)
        except ConfigError as e:
            problems.append(str(e))
    if problems:
        raise ConfigError("\n".join(problems))
    for text in overruled(cfg, space):  # before the first boot; one place: said once a run
        warnings.warn(text, stacklevel=1)
    return Preflight(space, info, dataset, sum(ds.dropped for _, ds in read), max_len, source)


def overruled(cfg: StudyConfig, space: SearchSpace) -> list[str]:
    """The study file's server.args values the space overrules, each in one line: a trial's
    flags are the args with the space's fixed and searched values over them (serve_flags),
    so a fixed value wins in every trial and a searched one in each trial that sets it."""
    said, where = [], f"search space {space.name!r}"
    for flag, given in cfg.server.args.items():
        if flag in space.fixed and space.fixed[flag] != given:
            said.append(f"server.args.{flag}: {given!r} is overruled in every trial, the "
                        f"baseline too, by {where} (fixed: {flag}: {space.fixed[flag]!r}); "
                        "drop it from one of them")
        names = [n for n, p in space.parameters.items() if (p.into or n) == flag]
        if names:
            said.append(f"server.args.{flag}: {given!r} is searched by {where} "
                        f"({', '.join('parameters.' + n for n in names)}); a trial that sets "
                        "it overrules this value, which only the baseline and trials leaving it "
                        "unset run with; drop it from server.args, or from the space")
    return said


def check_dataset(cfg: StudyConfig, max_len: int | None = None,
                  source: str | None = None) -> str | None:
    """A dataset or trace profile's file is read in full (a bad line is an error naming it);
    returns what was kept and what was dropped as longer than `max_len` (`source` sets it)."""
    return files_note(cfg, read_datasets(cfg, max_len, source), max_len, source)


def files_note(cfg: StudyConfig, read: list[tuple[ProfileConfig, Dataset]],
               max_len: int | None, source: str | None) -> str | None:
    """What the study's dataset files (`read`) and trace files hold and dropped, in one line."""
    return "; ".join([ds.note(str(p.path)) for p, ds in read]
                     + trace_notes(cfg, max_len, source)) or None


def trace_notes(cfg: StudyConfig, max_len: int | None, source: str | None) -> list[str]:
    """Each trace profile's file read in full (a bad line is an error naming it): what it
    holds and what was dropped as longer than `max_len`; an error where its load points
    would take hours (its time unit, most likely: trace_checks.check_replay_time)."""
    said = source or ("the model's limit" if max_len is None else "max_model_len")
    notes = []
    for p in cfg.workloads():
        if p.name == "trace":
            trace = study_trace(cfg, p, (max_len, said))
            check_replay_time(trace.rate, trace.path, trace.hint, p, cfg.capacity)
            notes.append(trace.note())
    return notes


def study_limit(cfg: StudyConfig, space: SearchSpace | None = None) -> tuple[int | None, str]:
    """`request_limit` of the study's space (`space`: the one stored in the study; default the
    study file's). Every read of a study's dataset or trace applies it, and each trial's
    objective hands it to run_boot: the preflight's note, the trials' requests and capacity
    searches, export's files and --verify's windows hold the same requests."""
    return request_limit(cfg, space or space_of(cfg.search_space, cfg.server)[0])


def study_trace(cfg: StudyConfig, profile: ProfileConfig,
                limit: tuple[int | None, str] | None = None) -> Trace:
    """A trace profile's file as the study reads it: within `limit` (default `study_limit`)."""
    from autotune.load.datasets import load_tokenizer, load_trace

    max_len, source = limit or study_limit(cfg)
    tok_dir = cfg.server.tokenizer_dir
    return load_trace(profile, load_tokenizer(tok_dir), tok_dir, max_len, source)


def read_datasets(cfg: StudyConfig, max_len: int | None = None, source: str | None = None
                  ) -> list[tuple[ProfileConfig, Dataset]]:
    """Each dataset profile with its file as the study reads it: the requests kept and the
    count dropped as longer than `max_len` (None: the study's limit, `study_limit`)."""
    from autotune.load.datasets import load_dataset, load_tokenizer

    found = [p for p in cfg.workloads() if p.name == "dataset"]
    if not found:
        return []
    if max_len is None and source is None:
        max_len, source = study_limit(cfg)
    tok_dir = cfg.server.tokenizer_dir
    tok = load_tokenizer(tok_dir)
    return [(p, load_dataset(p, tok, tok_dir, max_len or cfg.server.args.get("max_model_len"),
                             source)) for p in found]


def dropped_note(cfg: StudyConfig) -> str | None:
    """What a study's dataset profiles dropped before the first boot, in one line (None:
    nothing dropped, or no dataset): the end of a study, the report and export say it."""
    return "; ".join(ds.note(str(p.path)) for p, ds in read_datasets(cfg) if ds.dropped) \
        or None


def _sizes(p: object) -> list[int]:
    """The parallel sizes a parameter of the space can take."""
    if isinstance(p, CategoricalParam):
        return [int(c) for c in p.choices if c is not None]
    if isinstance(p, IntParam):
        return list(range(p.low, p.high + 1, p.step))
    return []


def check_layout(cfg: StudyConfig, space: SearchSpace) -> None:
    """Parallel layouts must fit the GPUs a trial gets (--gpus-per-trial; 1 without it). A
    fixed layout or a single size larger than that is an error; a combination of sizes larger
    than that is left to the trial, which records it infeasible without a boot."""
    have = cfg.gpus_per_trial or 1
    how = f"--gpus-per-trial {cfg.gpus_per_trial}" if cfg.gpus_per_trial else \
        "without --gpus-per-trial"
    fixed = {**cfg.server.args, **space.fixed}
    if gpus_per_replica(fixed) > have:
        raise ConfigError(
            f"server.args: layout {layout_text(fixed)} needs {gpus_per_replica(fixed)} GPUs; "
            f"each trial gets {have} ({how}): raise --gpus-per-trial or shrink the layout")
    knobs = {n: _sizes(p) for n, p in space.parameters.items() if n in PARALLEL_FLAGS}
    for name, sizes in knobs.items():
        big = max(sizes, default=1)
        if big > 1 and (cfg.gpus_per_trial or 0) <= 1:
            raise ConfigError(
                f"search space {space.name!r}: {name} takes sizes up to {big}, but each trial "
                f"gets 1 GPU ({how}): run with --gpus-per-trial {big} (or more) or drop the "
                "larger sizes")
        if big > have:
            raise ConfigError(
                f"search space {space.name!r}: {name} {big} needs {big} GPUs; each trial gets "
                f"{have} ({how}): drop it or raise --gpus-per-trial")
    least = gpus_per_replica(fixed)
    for sizes in knobs.values():
        least *= min(sizes, default=1)
    if least > have:
        raise ConfigError(
            f"search space {space.name!r}: the smallest layout ({', '.join(knobs)}) needs "
            f"{least} GPUs; each trial gets {have} ({how})")


# Set where a host keeps NVLink multicast off (NCCL, PyTorch, NVSHMEM): the two-H200 machines
# here, because a program that uses it can take the host's GPUs out of service.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}


def check_multicast(cfg: StudyConfig, space: SearchSpace,
                    environ: dict[str, str] | None = None) -> None:
    """Tensor parallelism on a host that keeps NVLink multicast off must not get vLLM's fused
    all-reduce + RMSNorm, whose FlashInfer workspace vLLM 0.26.0 builds on multicast ("mnnvl",
    `cuMulticastCreate`) by default for TP > 1 on Hopper. The first two-H200 run did, and its
    tp2 boot crashed (docs/results/multi-gpu-h200x2.md)."""
    env = {**(os.environ if environ is None else environ), **cfg.server.env}
    off = [f"{k}={v}" for k, v in MULTICAST_OFF.items() if env.get(k) == v]
    tp = max([int(cfg.server.args.get("tensor_parallel_size") or 1),
              int(space.fixed.get("tensor_parallel_size") or 1),
              *_sizes(space.parameters.get("tensor_parallel_size"))])
    if not off or tp <= 1:
        return
    cc = cfg.server.args.get("compilation_config")
    passes = cc.get("pass_config") if isinstance(cc, dict) else None
    fused = not (isinstance(passes, dict) and passes.get("fuse_allreduce_rms") is False)
    if fused and env.get("VLLM_FLASHINFER_ALLREDUCE_BACKEND", "auto") in ("auto", "mnnvl"):
        raise ConfigError(
            f"server.args: tensor_parallel_size goes up to {tp} on a host that keeps NVLink "
            f"multicast off ({', '.join(off)}), and vLLM's fused all-reduce + RMSNorm would build "
            "its FlashInfer workspace on multicast: set server.args.compilation_config: "
            "{pass_config: {fuse_allreduce_rms: false}} (measured on two H200s) or server.env "
            "VLLM_FLASHINFER_ALLREDUCE_BACKEND: trtllm (CUDA IPC; not measured here)")


def check_model(model: str, tokenizer: str | None = None) -> None:
    """A local model must be a directory with config.json (or a .gguf file), and the load
    generator needs a tokenizer.json (the model's, or `server.tokenizer`'s). A hub id such as
    Qwen/Qwen3-8B has its tokenizer and config found as vLLM finds them, in the hub cache or
    downloaded there (config/hub.py): before the study exists, so a failure leaves none."""
    if is_local(model):
        path = Path(model).expanduser()
        if not path.exists():
            raise ConfigError(f"server.model: {model!r} does not exist (a model directory "
                              "or a model name the server can load)")
        if path.is_dir() and not (path / "config.json").is_file():
            raise ConfigError(f"server.model: {model!r} is not a model vLLM can load: the "
                              "directory has no config.json (point it at the folder with the "
                              "model's config.json and tokenizer)")
        if path.is_file() and path.suffix != ".gguf":
            raise ConfigError(f"server.model: {model!r} is a file; vLLM loads a model directory "
                              "(or a .gguf file)")
    tok = tokenizer or model
    field = "server.tokenizer" if tokenizer else "server.model"
    folder = Path(local_dir(tok, field)).expanduser()
    if tokenizer and not folder.exists():
        raise ConfigError(f"server.tokenizer: {tok!r} does not exist (a folder with the "
                          "model's tokenizer.json, or a hub id)")
    if folder.is_dir() and not (folder / "tokenizer.json").is_file():
        where = "" if is_local(tok) else f" (the hub's files, {folder})"
        raise ConfigError(f"{field}: no tokenizer.json in {tok!r}{where}; the load generator "
                          "needs the model's fast tokenizer file (set server.tokenizer to a "
                          "folder that has one)")


def check_workdir(workdir: str) -> None:
    """The work directory exists as a writable folder, or can be created."""
    check_folder(workdir, "workdir")


def check_model_len(cfg: StudyConfig, space: SearchSpace) -> None:
    for profile in cfg.workloads():
        _check_model_len(cfg, space, profile)


def _check_model_len(cfg: StudyConfig, space: SearchSpace, profile: ProfileConfig) -> None:
    need = profile.required_model_len()
    where, low = None, None
    if "max_model_len" in space.fixed:
        where, low = (f"search space {space.name!r}: fixed: max_model_len",
                      int(space.fixed["max_model_len"]))
    elif "max_model_len" in cfg.server.args:
        where, low = "server.args.max_model_len", int(cfg.server.args["max_model_len"])
    p = space.parameters.get("max_model_len")
    if isinstance(p, IntParam):
        where, low = f"parameters.max_model_len.low ({space.name})", p.low
    elif isinstance(p, CategoricalParam):
        nums = [int(c) for c in p.choices if isinstance(c, int | float)]
        if nums:
            where, low = f"parameters.max_model_len.choices ({space.name})", min(nums)
    if low is None:
        mpe = model_max_len(cfg.server.model)
        if mpe is not None and mpe < need:
            raise ConfigError(f"profile: {profile.key} needs {need} tokens per request "
                              f"but the model allows {mpe} (max_position_embeddings)")
        return
    if low < need:
        raise ConfigError(f"{where}: {low} is shorter than the profile needs ({need} tokens: "
                          f"{profile.key}); raise it to at least {need}")
