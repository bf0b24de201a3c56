"""Search spaces as data: `search_spaces/*.yaml` -> typed parameters -> Optuna suggestions -> flags.

A space file:

    name: throughput
    fixed: {load_format: dummy}          # vllm serve flags every trial gets
    parameters:
      max_num_seqs: {type: int, low: 64, high: 1024, log: true}
      kv_cache_dtype: {type: categorical, choices: [auto, fp8]}
      speculative_method:
        type: categorical
        choices: [null, ngram]           # null: leave the flag out (vLLM's default)
        into: speculative_config         # rendered into --speculative-config JSON ...
        key: method                      # ... under this key
      num_speculative_tokens:
        type: int
        low: 1
        high: 5
        into: speculative_config
        when: {speculative_method: [ngram]}   # only sampled when that holds

Parameter names are `vllm serve` flags in snake_case unless `into` names a JSON flag. The built-in
spaces live in the repository's `search_spaces/` folder, shipped in the wheel as the package
`autotune.search_spaces`.
"""

from __future__ import annotations

import itertools
import json
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import optuna
from pydantic import Field, model_validator

from autotune.config.base import StrictModel, parse_model, read_yaml
from autotune.errors import ConfigError

Scalar = str | int | float | bool | None


class _Param(StrictModel):
    into: str | None = Field(None, description="JSON flag (snake_case) this value goes into.")
    key: str | None = Field(None, description="Key inside `into` (default: the parameter name).")
    when: dict[str, list[Scalar]] = Field(
        default_factory=dict, description="Sample only when these parameters have these values."
    )
    description: str | None = None


class IntParam(_Param):
    type: Literal["int"]
    low: int
    high: int
    step: int = 1
    log: bool = False
    grid: list[int] | None = Field(None, description="The values a grid search takes.")

    @model_validator(mode="after")
    def _range(self) -> IntParam:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        _check_grid(self.grid, self.low, self.high)
        if self.log and (self.low < 1 or self.step != 1):
            raise ValueError("log scale needs low >= 1 and step 1")
        return self


class FloatParam(_Param):
    type: Literal["float"]
    low: float
    high: float
    step: float | None = None
    log: bool = False
    grid: list[float] | None = Field(None, description="The values a grid search takes.")

    @model_validator(mode="after")
    def _range(self) -> FloatParam:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        _check_grid(self.grid, self.low, self.high)
        return self


def _check_grid(grid: list[Any] | None, low: float, high: float) -> None:
    if grid is not None:
        if not grid:
            raise ValueError("grid: list at least one value")
        bad = [v for v in grid if not low <= v <= high]
        if bad:
            raise ValueError(f"grid: {bad} outside [{low}, {high}]")


class CategoricalParam(_Param):
    type: Literal["categorical"]
    choices: list[Scalar] = Field(min_length=1)


class BoolParam(_Param):
    type: Literal["bool"]


Param = Annotated[IntParam | FloatParam | CategoricalParam | BoolParam,
                  Field(discriminator="type")]


class SearchSpace(StrictModel):
    name: str
    description: str | None = None
    fixed: dict[str, Any] = Field(default_factory=dict,
                                  description="vllm serve flags (snake_case) for every trial.")
    parameters: dict[str, Param] = Field(min_length=1)
    starts: list[dict[str, Any]] = Field(
        default_factory=list, description="Configs (parameter values) measured right after the "
        "baseline: the field's known-good settings. A parameter left out of a start is sampled.")

    @model_validator(mode="after")
    def _conditions(self) -> SearchSpace:
        names = list(self.parameters)
        both = sorted(set(self.fixed) & (set(names) | set(self.searched_flags())))
        if both:  # which value a trial gets would depend on the merge order
            raise ValueError(f"fixed.{both[0]}: also searched under parameters; keep each "
                             "flag in one of fixed: or parameters:")
        for name, p in self.parameters.items():
            for dep, values in p.when.items():
                if dep not in self.parameters:
                    raise ValueError(f"parameters.{name}.when: unknown parameter {dep!r} "
                                     f"(known: {', '.join(names)})")
                if names.index(dep) > names.index(name):
                    raise ValueError(f"parameters.{name}.when: {dep!r} must come before {name!r}")
                dep_p = self.parameters[dep]
                if isinstance(dep_p, CategoricalParam | BoolParam):
                    allowed = dep_p.choices if isinstance(dep_p, CategoricalParam) else [
                        False, True]
                    bad = [v for v in values if v not in allowed]
                    if bad:
                        raise ValueError(f"parameters.{name}.when.{dep}: {bad} not among "
                                         f"{dep}'s choices {allowed}")
        for i, start in enumerate(self.starts):
            self.check_start(start, f"starts.{i}")
        return self

    def study_starts(self, own: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The configs a study measures right after the baseline: the study file's own
        `starts:` first (chosen for this study: on a budget that pays two trials, its first
        start is the one that runs), then this space's, each config once."""
        out: list[dict[str, Any]] = []
        for start in [*own, *self.starts]:
            if start not in out:
                out.append(start)
        return out

    def check_start(self, start: dict[str, Any], where: str) -> None:
        """Raise ValueError unless every value of `start` is one this space can sample."""
        for name, value in start.items():
            p = self.parameters.get(name)
            if p is None:
                raise ValueError(f"{where}: {name!r} is not a parameter of the space (its "
                                 f"parameters: {', '.join(self.parameters)})")
            ok = (value in p.choices if isinstance(p, CategoricalParam)
                  else isinstance(value, bool) if isinstance(p, BoolParam)
                  else isinstance(value, int | float) and not isinstance(value, bool)
                  and p.low <= value <= p.high)
            if not ok:
                allowed = (p.choices if isinstance(p, CategoricalParam) else "true or false"
                           if isinstance(p, BoolParam) else f"{p.low} to {p.high}")
                raise ValueError(f"{where}.{name}: {value!r} is not among its values "
                                 f"({allowed})")

    # -- sampling ------------------------------------------------------------------------------
    def active(self, name: str, values: dict[str, Any]) -> bool:
        return all(
            dep in values and values[dep] in allowed
            for dep, allowed in self.parameters[name].when.items()
        )

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Sample every active parameter; returns {parameter name: value}."""
        values: dict[str, Any] = {}
        for name, p in self.parameters.items():
            if not self.active(name, values):
                continue
            if isinstance(p, IntParam):
                values[name] = trial.suggest_int(name, p.low, p.high, step=p.step, log=p.log)
            elif isinstance(p, FloatParam):
                values[name] = trial.suggest_float(name, p.low, p.high, step=p.step, log=p.log)
            elif isinstance(p, CategoricalParam):
                values[name] = trial.suggest_categorical(name, p.choices)
            else:
                values[name] = trial.suggest_categorical(name, [False, True])
        return values

    def to_flags(self, values: dict[str, Any]) -> dict[str, Any]:
        """Parameter values -> `vllm serve` flag values (snake_case), JSON flags assembled.

        `None` values are left out; a JSON flag whose values are all left out is left out.
        """
        flags: dict[str, Any] = {}
        for name, value in values.items():
            p = self.parameters.get(name)
            if value is None:
                continue
            if isinstance(value, float):
                value = round(value, 10)  # a stepped float: 0.85, not 0.8500000000000001
            if p is not None and p.into:
                flags.setdefault(p.into, {})[p.key or name] = value
            else:
                flags[name] = value
        return flags

    def grid(self) -> list[dict[str, Any]]:
        """Every config of a grid search: the product of each parameter's values (choices,
        False/True, or an int or float parameter's `grid:` list), a parameter left out where
        its `when:` does not hold, duplicates removed. ValueError names a parameter without
        grid values."""
        axes: list[tuple[str, list[Any]]] = []
        for name, p in self.parameters.items():
            if isinstance(p, CategoricalParam):
                axes.append((name, list(p.choices)))
            elif isinstance(p, BoolParam):
                axes.append((name, [False, True]))
            elif p.grid is None:
                raise ValueError(f"parameters.{name}: a grid search needs its values; add "
                                 f"grid: [...] (values between {p.low} and {p.high})")
            else:
                axes.append((name, list(p.grid)))
        configs: list[dict[str, Any]] = []
        seen: set[str] = set()
        for combo in itertools.product(*(values for _, values in axes)):
            values: dict[str, Any] = {}
            for (name, _), v in zip(axes, combo, strict=True):
                if self.active(name, values):
                    values[name] = v
            key = json.dumps(values, sort_keys=True, default=str)
            if key not in seen:
                seen.add(key)
                configs.append(values)
        return configs

    def flag_names(self) -> set[str]:
        """Every `vllm serve` flag (snake_case) this space can set."""
        return set(self.searched_flags()) | set(self.fixed)

    def searched_flags(self) -> list[str]:
        """The flags its parameters set, in the parameters' order (a JSON flag once: MLflow
        logs a trial's flags by these names)."""
        return list(dict.fromkeys(p.into or n for n, p in self.parameters.items()))

    def choices_by_flag(self) -> dict[str, list[Scalar]]:
        return {
            n: [c for c in p.choices if c is not None]
            for n, p in self.parameters.items()
            if isinstance(p, CategoricalParam) and not p.into
        }


def _spaces_dir() -> Path:
    """The built-in spaces: the installed package's, or a source checkout's search_spaces/
    when autotune runs from one without being installed (as on the GPU machine)."""
    try:
        return Path(str(resources.files("autotune.search_spaces")))
    except ModuleNotFoundError:
        return _CHECKOUT_SPACES


# a source checkout's built-in spaces: search_spaces/ beside the autotune/ package
_CHECKOUT_SPACES = Path(__file__).resolve().parents[2] / "search_spaces"


def _builtin(name: str) -> Path | None:
    f = _spaces_dir() / f"{name}.yaml"
    return f if f.is_file() else None


def load_search_space(path: str | Path) -> SearchSpace:
    """Read and validate a search space file (or a built-in one by name); errors name the file,
    field and line."""
    p = Path(path)
    if not p.exists():
        found = _builtin(str(path))
        if found is None:
            raise ConfigError(f"search space {str(path)!r} not found (a YAML file, or one of: "
                              f"{', '.join(builtin_spaces())})")
        p = found
    return parse_model(SearchSpace, read_yaml(p), str(p))


def with_draft_models(space: SearchSpace, models: list[str]) -> SearchSpace:
    """`space` with speculative method draft_model over `models` beside its other methods:
    `speculative_model` (each of them) right after `speculative_method`, and the method's
    `num_speculative_tokens` sampled for it too. ConfigError when the space has no
    `speculative_method` and `num_speculative_tokens` to extend, or names draft models itself."""
    models = list(dict.fromkeys(models))
    if not models:
        return space
    method = space.parameters.get("speculative_method")
    k = space.parameters.get("num_speculative_tokens")
    where = f"server.draft_models: the search space {space.name!r}"
    if not isinstance(method, CategoricalParam) or not method.into or k is None \
            or "speculative_method" not in k.when:
        raise ConfigError(f"{where} has no speculative_method (with num_speculative_tokens) "
                          "to add draft_model to (see search_spaces/latency.yaml, or leave "
                          "draft_models out)")
    if "draft_model" in method.choices or "speculative_model" in space.parameters:
        raise ConfigError(f"{where} searches draft_model itself: list the draft models in "
                          "one place (its speculative_model choices, or server.draft_models)")
    params: dict[str, Any] = {}
    for name, p in space.parameters.items():
        if name == "num_speculative_tokens":
            p = p.model_copy(update={"when": {**p.when, "speculative_method": [
                *p.when["speculative_method"], "draft_model"]}})
        params[name] = p
        if name == "speculative_method":
            params[name] = p.model_copy(update={"choices": [*method.choices, "draft_model"]})
            params["speculative_model"] = CategoricalParam(
                type="categorical", choices=list(models), into=method.into, key="model",
                when={"speculative_method": ["draft_model"]})
    return space.model_copy(update={"parameters": params})


def study_space(search_space: str, draft_models: list[str]) -> SearchSpace:
    """The space a study searches: its file (or built-in) with server.draft_models added."""
    return with_draft_models(load_search_space(search_space), draft_models)


def builtin_spaces() -> list[str]:
    return sorted(f.stem for f in _spaces_dir().glob("*.yaml"))
