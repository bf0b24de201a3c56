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
        loc = ".".join(str(p) for p in e["loc"])  # empty: a check on the whole model
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check its spelling)"
        # a whole mapping or list (a model-level check) would repeat the file back: the
        # message names the keys it is about
        got = f" (got {e['input']!r})" if e["type"] != "missing" and "input" in e \
            and not isinstance(e["input"], dict | list) else ""
        lines.append(f"{source}: {loc + ': ' if loc else ''}{msg}{got}")
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
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{path}:{where}: malformed YAML: {problem}") from None
    if data is None:
        raise ConfigError(f"{path}: the file is empty; write its keys (name:, server:, ...) "
                          "as a YAML mapping")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping (key: value lines) at the top level, "
                          f"got a {type(data).__name__}")
    return data


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error: PyYAML
    keeps the last silently, so a second `server:` replaced the first whole."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping (keep one)",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
