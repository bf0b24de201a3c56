"""Pydantic plumbing shared by every file users write (study files, search spaces): the strict
base model, reading YAML, and turning a ValidationError into one readable error per problem.

Everything that comes from outside is validated with `extra="forbid"`, so a typo in a key is an
error naming that key. Records produced inside autotune are frozen dataclasses instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from autotune.errors import ConfigError


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


M = TypeVar("M", bound=BaseModel)


def format_validation_error(err: ValidationError, source: str) -> str:
    """One readable line per problem: `source: field.path: message (got value)`."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check its spelling)"
        got = f" (got {e['input']!r})" if e["type"] != "missing" and "input" in e else ""
        lines.append(f"{source}: {loc}: {msg}{got}")
    return "\n".join(lines)


def parse_model(cls: type[M], data: Any, source: str) -> M:
    """`cls.model_validate(data)`, with a ConfigError naming `source` and each bad field."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source)) from None


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML file whose top level is a mapping; errors name the file, line and column."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{path}:{where}: malformed YAML: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got "
                          f"{type(data).__name__}")
    return data
