"""What the commands share: options derived from the pydantic models (so no choice list is
written twice), reading a study file with its command-line overrides, and the MLflow tracker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args, get_origin

import click

from autotune.config.base import parse_model
from autotune.config.capacity import CapacityConfig
from autotune.config.study import SamplerName, StudyConfig, load_study_config
from autotune.config.workload import Endpoint, ProfileConfig, ProfileName

if TYPE_CHECKING:  # imported when used: `autotune --help` need not load Optuna or MLflow
    pass

F = TypeVar("F", bound=Callable[..., Any])


def choice(literal: Any) -> click.Choice[str]:
    """A click.Choice of a Literal type's values."""
    return click.Choice([str(v) for v in get_args(literal)])


class CountOrAuto(click.ParamType[int | str, Any]):
    """A whole number, or auto (CapacityConfig's warm_windows, samples)."""

    name = "INTEGER|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> int | str:
        if value == "auto" or isinstance(value, int):
            return value  # type: ignore[no-any-return]
        try:
            return int(value)
        except ValueError:
            self.fail(f"{value!r} is not a whole number or auto", param, ctx)


COUNT_OR_AUTO = CountOrAuto()

PROFILE_FIELDS = ("input_len", "output_len", "num_prompts", "max_concurrency", "request_rate",
                  "warmup", "seed", "endpoint", "client_processes", "client_cpus",
                  "client_realtime", "path", "sample", "prefix_len", "num_prefixes",
                  "range_ratio", "time_unit", "block_size", "speedup")


def _help(field: str) -> str:
    return ProfileConfig.model_fields[field].description or ""


def profile_options(f: F) -> F:
    opts = [
        click.option("--profile", "profile_name", default="throughput", show_default=True,
                     type=choice(ProfileName), help=_help("name")),
        click.option("--input-len", type=int, help=_help("input_len")),
        click.option("--output-len", type=int, help=_help("output_len")),
        click.option("--num-prompts", type=int, help=_help("num_prompts")),
        click.option("--max-concurrency", type=int, help=_help("max_concurrency")),
        click.option("--request-rate", type=float, help=_help("request_rate")),
        click.option("--warmup", type=int, help=_help("warmup")),
        click.option("--seed", type=int, help=_help("seed")),
        click.option("--endpoint", type=choice(Endpoint), help=_help("endpoint")),
        click.option("--client-processes", help=_help("client_processes")),
        click.option("--client-cpus", help=_help("client_cpus")),
        click.option("--client-realtime/--no-client-realtime", default=None,
                     help=_help("client_realtime")),
        click.option("--path", help=_help("path")),
        click.option("--sample", type=click.Choice(["order", "random"]), help=_help("sample")),
        click.option("--prefix-len", type=int, help=_help("prefix_len")),
        click.option("--num-prefixes", type=int, help=_help("num_prefixes")),
        click.option("--range-ratio", type=float, help=_help("range_ratio")),
        click.option("--time-unit", type=click.Choice(["s", "ms"]), help=_help("time_unit")),
        click.option("--block-size", type=int, help=_help("block_size")),
        click.option("--speedup", type=float, help=_help("speedup")),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def profile_from(kw: dict[str, Any]) -> ProfileConfig:
    data: dict[str, Any] = {"name": kw["profile_name"]}
    data.update({k: kw[k] for k in PROFILE_FIELDS if kw.get(k) is not None})
    return parse_model(ProfileConfig, data, "profile")


# the capacity search's settings as `autotune bench` options, generated from CapacityConfig so
# that bench and study share one set of defaults (the model's) and one help text
CAPACITY_FIELDS = tuple(k for k in CapacityConfig.model_fields if k not in ("axis",
                                                                             "early_stop"))
# option names where a profile option has the field's name (the profile's --warmup is the
# warm-up before a single benchmark)
_RENAMED = {"warmup": "point_warmup"}


def capacity_option_name(field: str) -> str:
    return "--" + _RENAMED.get(field, field).replace("_", "-")


def capacity_options(f: F) -> F:
    for name in reversed(CAPACITY_FIELDS):
        field = CapacityConfig.model_fields[name]
        help_text = f"Capacity: {field.description} [default: {field.default}]"
        if field.annotation is bool:  # --settle / --no-settle; None: the model's default
            opt = capacity_option_name(name)
            f = click.option(f"{opt}/--no-{opt[2:]}", _RENAMED.get(name, name), default=None,
                             help=help_text)(f)
            continue
        kind: Any = int if field.annotation is int else float
        if get_origin(field.annotation) is Literal:
            kind = choice(field.annotation)
        elif set(get_args(field.annotation)) == {int, Literal["auto"]}:
            kind = COUNT_OR_AUTO
        f = click.option(capacity_option_name(name), _RENAMED.get(name, name), type=kind,
                         help=help_text)(f)
    return f


def capacity_given(kw: dict[str, Any]) -> dict[str, Any]:
    """The capacity settings the options gave, by field name."""
    return {k: v for k in CAPACITY_FIELDS if (v := kw.get(_RENAMED.get(k, k))) is not None}


def capacity_from(axis: str, kw: dict[str, Any]) -> CapacityConfig:
    """The capacity settings the options gave, CapacityConfig's defaults for the rest."""
    return parse_model(CapacityConfig, {"axis": axis, **capacity_given(kw)}, "--capacity-axis")


def study_options(f: F) -> F:
    opts = [
        click.option("--config", "config_path", required=True,
                     type=click.Path(path_type=Path), help="Study YAML file."),
        click.option("--study-name", help="Override the study's name."),
        click.option("--storage", help="Optuna storage URL (default: sqlite under mlruns/)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def sampler_option(f: F) -> F:
    return click.option("--sampler", type=choice(SamplerName), help="Sampler.")(f)


def load_cfg(config_path: Path, study_name: str | None, storage: str | None,
             **more: Any) -> StudyConfig:
    return load_study_config(config_path, {"name": study_name, "storage": storage, **more})
