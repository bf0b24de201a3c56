"""Pure functions from parameters to `vllm serve` argv, and back to a pasteable shell line.

Parameter names are `vllm serve` flags in snake_case (`max_num_seqs` <-> `--max-num-seqs`), so a
reader can grep either side. Values: `None` leaves the flag out (vLLM's default), `True` gives
`--flag`, `False` gives `--no-flag` (vLLM's boolean flags are argparse BooleanOptionalAction),
dicts and lists become JSON (as `--speculative-config '{"method": "ngram", ...}'` expects).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any


def flag_name(param: str) -> str:
    """`max_num_seqs` -> `--max-num-seqs`."""
    return "--" + param.strip("-").replace("_", "-")


def param_name(flag: str) -> str:
    """`--max-num-seqs` -> `max_num_seqs`."""
    return flag.lstrip("-").replace("-", "_")


# vLLM's short names of the flags read back from an argv (`vllm serve --help=all`)
SHORT_FLAGS = {"-asc": "api_server_count", "-dp": "data_parallel_size"}


def arg_value(argv: Sequence[str], param: str) -> str | None:
    """The value `vllm serve` takes for `param` from `argv`, as argparse reads it: the last of a
    repeated flag, `--flag value` or `--flag=value`, `_` or `-` in a long name, vLLM's short
    names (SHORT_FLAGS). None when absent or given no value."""
    found = None
    for i, a in enumerate(argv):
        name, eq, value = a.partition("=")
        if SHORT_FLAGS.get(name, param_name(name) if name.startswith("--") else None) == param:
            found = value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return found


def api_servers(argv: Sequence[str] | None) -> int:
    """How many API server processes a `vllm serve` argv starts: --api-server-count, else
    vLLM's default, one per data-parallel engine (--data-parallel-size). vLLM's other defaults
    (one with an external load balancer, ...) read as more."""
    def count(param: str) -> int | None:
        value = arg_value(argv or [], param)
        return int(value) if value and value.isdigit() else None
    return count("api_server_count") or count("data_parallel_size") or 1


def params_to_args(params: Mapping[str, Any]) -> list[str]:
    """Render parameters as `vllm serve` arguments, in the mapping's order."""
    args: list[str] = []
    for name, value in params.items():
        flag = flag_name(name)
        if value is None:
            continue
        if value is True:
            args.append(flag)
        elif value is False:
            args.append("--no-" + flag[2:])
        elif isinstance(value, Mapping | list | tuple):
            args += [flag, json.dumps(value, separators=(",", ":"), sort_keys=True)]
        else:
            args += [flag, str(value)]
    return args


def serve_argv(
    executable: Sequence[str], model: str, params: Mapping[str, Any], extra_args: Sequence[str] = ()
) -> list[str]:
    """`[*executable, "serve", model, *flags, *extra_args]`: the argv a server is started with."""
    return [*executable, "serve", model, *params_to_args(params), *extra_args]


def shell_join(argv: Sequence[str]) -> str:
    """The argv as a line a user can paste into a POSIX shell."""
    return shlex.join(argv)
