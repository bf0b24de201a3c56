"""autotune: a Bayesian multi-objective auto-tuner for vLLM serving configurations."""

__version__ = "0.1.0"
