"""The user's acceptance profile: how often their drafts are accepted, per speculative method.

On random weights (a shape-only study, `load_format: dummy`) a draft is never accepted, so every
speculative config loses by construction. vLLM can emulate acceptance instead
(`speculative_config.rejection_sample_method: synthetic`): the draft and verify compute run as
they would, and draft tokens are accepted at chosen per-position rates. A study file declares
the profile its real model and draft would show, per method, under `server.acceptance`:

    server:
      shape_only: true
      acceptance:
        draft_model: {mean_length: 2.4, measured_k: 4}  # mean accepted length at K = 4
        eagle: {rates: [0.8, 0.6, 0.45, 0.3]}           # per position, unconditional

`rates[i]` is the probability that the first i+1 draft tokens are all accepted (vLLM's
`synthetic_acceptance_rates`). A trial with K draft tokens gets K rates: the declared ones, and
past them a geometric tail (each further token accepted with the last position's conditional
rate); a mean length measured at K_m is read as one conditional rate a for every position
(1 + a + a^2 + ... + a^K_m = mean_length), the usual model of speculative decoding. Where the
server loads the model's own weights the profile is not applied: the drafts are judged as
they are. A method that drafts from the text (ngram, suffix) cannot be emulated: random weights
write text that never repeats, so it proposes nothing to accept (tuning/speculative.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from autotune.config import weights
from autotune.config.base import StrictModel

SYNTHETIC = "synthetic"
# vLLM's proposers that draft by matching the text's last tokens earlier in it: they draft only
# where the text repeats, which random weights' text does not (a draft model, EAGLE heads or
# MTP draft every step, so a declared profile applies to theirs)
TEXT_DRAFTED = ("ngram", "ngram_gpu", "suffix")
FIELD_HELP = (
    "Shape only: the acceptance your real model and draft show, per speculative method (e.g. "
    "{draft_model: {mean_length: 2.4, measured_k: 4}}, or per-position rates), as `autotune "
    "acceptance` measures it. Speculative trials on random weights then accept drafts at it "
    "(vLLM's synthetic rejection sampling); without one they are left out, since no draft of "
    "random weights is accepted. Not applied where the server loads the model's own weights, "
    "nor to ngram or suffix, which draft from the text and on random weights propose nothing.")
DIGITS = 4  # rates as passed to vLLM


class AcceptanceProfile(StrictModel):
    """One method's acceptance: a mean accepted length at a K, or per-position rates."""

    mean_length: float | None = Field(
        None, ge=1, description="Mean tokens a step emits (the accepted drafts plus the one "
        "the target adds), as vLLM's spec_decode metrics report it; with measured_k.")
    measured_k: int | None = Field(
        None, ge=1, le=32, description="num_speculative_tokens the mean_length was measured at.")
    rates: list[float] | None = Field(
        None, min_length=1, max_length=32, description="Per-position unconditional acceptance "
        "rates: rates[i] is the probability that the first i+1 draft tokens are all accepted "
        "(non-increasing, each in [0, 1]).")
    source: str | None = Field(None, description="Where the profile came from (free text).")

    @model_validator(mode="after")
    def _one_form(self) -> AcceptanceProfile:
        if (self.mean_length is None) == (self.rates is None):
            raise ValueError("give one of mean_length (with measured_k) or rates")
        if self.mean_length is not None:
            if self.measured_k is None:
                raise ValueError("mean_length needs measured_k: the num_speculative_tokens it "
                                 "was measured at")
            if self.mean_length > self.measured_k + 1:
                raise ValueError(f"mean_length {self.mean_length:g} is more than measured_k + "
                                 f"1 = {self.measured_k + 1}: a step emits at most K + 1 tokens")
        if self.rates is not None:
            if self.measured_k is not None:
                raise ValueError("measured_k goes with mean_length; rates give each position")
            if not all(0.0 <= r <= 1.0 for r in self.rates):
                raise ValueError(f"rates must each be in [0, 1], got {self.rates}")
            if any(b > a for a, b in zip(self.rates, self.rates[1:], strict=False)):
                raise ValueError(f"rates must not increase with the position (the first i+1 "
                                 f"tokens all accepted), got {self.rates}")
        return self

    def conditional(self) -> float:
        """The conditional rate past the declared positions (or at every position, for a
        mean length): the last rate over the one before it."""
        if self.rates is not None:
            if len(self.rates) == 1 or self.rates[-2] == 0:
                return self.rates[-1] if len(self.rates) == 1 else 0.0
            return self.rates[-1] / self.rates[-2]
        assert self.mean_length is not None and self.measured_k is not None
        return solve_conditional(self.mean_length, self.measured_k)

    def rates_at(self, k: int) -> list[float]:
        """The K per-position rates a trial with `k` draft tokens gets."""
        a = self.conditional()
        if self.rates is not None:
            out = list(self.rates[:k])
            while len(out) < k:
                out.append(out[-1] * a)
        else:
            out = [a ** (i + 1) for i in range(k)]
        return [round(min(max(r, 0.0), 1.0), DIGITS) for r in out]

    def mean_length_at(self, k: int) -> float:
        """The mean tokens a step emits at `k` draft tokens: 1 + the rates' sum."""
        return 1.0 + sum(self.rates_at(k))

    def text(self) -> str:
        if self.rates is not None:
            return "rates " + ", ".join(f"{r:g}" for r in self.rates)
        return f"mean length {self.mean_length:g} at K = {self.measured_k}"


def solve_conditional(mean_length: float, k: int) -> float:
    """The a in [0, 1] with 1 + a + ... + a^k = mean_length (bisection)."""
    target = mean_length - 1.0
    if target <= 0:
        return 0.0
    if target >= k:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid ** (i + 1) for i in range(k)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def check_methods(profiles: Mapping[str, Any]) -> Mapping[str, Any]:
    """Method names as vLLM's speculative_config spells them (`ngram`, `draft_model`, ...)."""
    for name in profiles:
        if not name or not name.replace("_", "").isalnum() or name != name.lower():
            raise ValueError(f"acceptance: {name!r} is not a speculative method name (vLLM's "
                             "speculative_config method: ngram, draft_model, eagle, ...)")
    return profiles


def profile_for(method: object, profiles: Mapping[str, AcceptanceProfile]
                ) -> AcceptanceProfile | None:
    """The declared profile random weights can run `method` at: None where there is none, or
    where the method drafts from the text (TEXT_DRAFTED: on random weights it drafts nothing
    to accept), so its trials cannot be judged there."""
    return None if str(method) in TEXT_DRAFTED else profiles.get(str(method))


def synthetic(flags: Mapping[str, Any], profiles: Mapping[str, AcceptanceProfile]
              ) -> dict[str, Any]:
    """`flags` with the trial's speculative_config accepting at its method's declared profile
    (rejection_sample_method synthetic, K rates); unchanged where the trial does not speculate,
    its method has no profile it can run at (profile_for), or its K is not set (vLLM then
    takes it from the draft)."""
    spec = flags.get("speculative_config")
    if not isinstance(spec, Mapping):
        return dict(flags)
    profile = profile_for(spec.get("method"), profiles)
    k = spec.get("num_speculative_tokens")
    if profile is None or not isinstance(k, int) or k < 1 \
            or spec.get("rejection_sample_method") not in (None, SYNTHETIC):
        return dict(flags)
    return {**flags, "speculative_config": {
        **spec, "rejection_sample_method": SYNTHETIC,
        "synthetic_acceptance_rates": profile.rates_at(k)}}


def launch_flags(server: Any, flags: dict[str, Any]) -> dict[str, Any]:
    """The flags a trial's server is started with: on random weights, a speculative config
    accepting at its method's declared profile (`synthetic`); else `flags`. What a user deploys
    is `flags`: the emulation is the study's, not theirs."""
    if server.acceptance and weights.shape_only(server, flags):
        return synthetic(flags, server.acceptance)
    return flags


def described(profiles: Mapping[str, AcceptanceProfile]) -> str:
    return "; ".join(f"{m}: {p.text()}" for m, p in profiles.items())
