"""Shape only: a study whose servers load random weights (vLLM's `--load-format dummy`).

vLLM then fills the model's tensors with random values: the model folder needs only its config
and tokenizer, and throughput and latency are those of the architecture on this workload, but
the outputs are noise. So nothing that depends on the weights means anything (the quality guard
has nothing to compare, a draft is never accepted), and the `vllm serve` line of such a study
serves random weights where it is pasted. A study file asks for it with `server.shape_only:
true` (which sets `load_format: dummy`); `load_format: dummy` in `server.args` or
`server.extra_args` makes a study shape only too. Either way every surface says so: the end of
the study, `export` and its files, the report and MLflow's study run (tag `autotune.shape_only`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DUMMY = "dummy"
TAG = "autotune.shape_only"  # on MLflow's study run of a shape-only study

FIELD_HELP = (
    "Shape only: serve random weights (`--load-format dummy`), for a model whose weights you "
    "do not have or do not want to download: the figures are the architecture's speed on this "
    "workload, the outputs noise, and every surface of the study says so. `load_format: "
    "dummy` in args sets it too; false with it is refused.")

STATEMENT = (
    "shape only: the servers loaded random weights (load_format: dummy), so these figures are "
    "the speed of the model's architecture on this workload, not a check of its outputs (no "
    "quality guard, no draft accepted); the serve line keeps --load-format dummy: drop it to "
    "serve the real weights, and study them before deploying")


def dummy(flags: Mapping[str, Any], extra_args: Sequence[str] = ()) -> bool:
    """Whether these `vllm serve` flags (snake_case) and raw argv load random weights."""
    if flags.get("load_format") == DUMMY:
        return True
    argv = list(extra_args)
    return f"--load-format={DUMMY}" in argv or any(
        a == "--load-format" and b == DUMMY for a, b in zip(argv, argv[1:], strict=False))


def resolve(cls: type, data: Any) -> Any:
    """ServerConfig's check, before its fields: `shape_only: true` sets `load_format: dummy`;
    dummy weights without the field make the server shape only; `shape_only: false` with
    dummy weights, or true with another load format, is a contradiction."""
    if not isinstance(data, dict):
        return data
    args = dict(data.get("args") or {})
    random = dummy(args, data.get("extra_args") or ())
    said = data.get("shape_only")
    if said is True:
        if args.get("load_format", DUMMY) != DUMMY:
            raise ValueError(f"shape_only: true serves random weights, but args.load_format is "
                             f"{args['load_format']!r}; drop one")
        return {**data, "args": {"load_format": DUMMY, **args}}  # first, as a file writes it
    if said is False and random:
        raise ValueError("shape_only: false, but load_format dummy serves random weights; "
                         "drop load_format: dummy to serve the model's own weights")
    return {**data, "shape_only": True} if random else data


def shape_only(server: Any, flags: Mapping[str, Any] | None = None) -> bool:
    """Whether a server config (`ServerConfig`), with a trial's flags over its args, serves
    random weights (a search space's `fixed: {load_format: dummy}` reaches a trial's flags)."""
    return bool(server.shape_only) or dummy(flags or {})
