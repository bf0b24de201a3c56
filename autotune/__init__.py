"""autotune: a Bayesian multi-objective auto-tuner for vLLM serving configurations."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("autotune")  # one place: pyproject.toml
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
