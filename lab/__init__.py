"""The lab: what reproduces the project's published results, beside the product (lab/README.md).
A package so that its scripts run as `python -m lab.<name>` from the repository root and the
import contracts (pyproject.toml) can read it: it imports autotune only through autotune.api
and autotune.api.parts."""
