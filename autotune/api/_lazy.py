"""Names that load on first use: a face module lists each public name under the module that
defines it ("public=home" where the public name differs), and `faces` gives it the
`__getattr__` and `__dir__` that load a name from its home when it is first asked for (PEP 562)
and keep it. Importing a face loads none of its homes."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def faces(module: str, namespace: dict[str, Any], homes: dict[str, tuple[str, ...]]
          ) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """(`__all__`, `__getattr__`, `__dir__`) of the face `module` whose globals are
    `namespace`, for the names in `homes` ({home module: names})."""
    where: dict[str, tuple[str, str]] = {}
    for home, names in homes.items():
        for entry in names:
            public, _, attr = entry.partition("=")
            where[public] = (home, attr or public)

    def getattr_(name: str) -> Any:
        try:
            home, attr = where[name]
        except KeyError:
            raise AttributeError(f"module {module!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(home), attr)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *where})

    return sorted(where), getattr_, dir_
