"""Teacher-forced divergence between two servers' next-token distributions over the same text
(docs/quality.md): per position, the KL divergence of the config's distribution from the
defaults', whether both pick the same top token, and the change in the log-probability of the
text's own next token; per prompt (the unit an interval resamples), and pooled with percentile
bootstrap intervals over prompts. Pure: the readings come from vLLM's `prompt_logprobs` (top-k
per position, plus the text's own token), read by `measure.quality`.

Top-k truncation, handled as a coarse-graining: at each position the tokens whose log-probability
both servers report (their two top-k lists' intersection, and the text's own token) are kept one
by one, and everything else is lumped into one "rest" bucket whose mass is 1 minus the kept mass,
on each side. Both distributions are coarse-grained over the same partition, so the KL of the
coarse-grained pair is a true KL of two distributions and, by the data-processing inequality,
never more than the full-vocabulary KL: the guard's KL is a lower bound, exact when the top-k
lists hold all the mass. The mean rest mass is reported beside it (`rest_mass`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# the least mass a "rest" bucket is given: vLLM returns float32 log-probabilities, and a top-k
# sum read back from them is off by up to ~1e-7 a term; below this a bucket is rounding, not mass
REST_FLOOR = 1e-6
BOOTSTRAP = 2000  # resamples of the prompts for an interval
SEED = 0  # the intervals are a pure function of the readings


@dataclass(frozen=True)
class Position:
    """One server's reading at one position of a text: its top-k log-probabilities (token id ->
    nats) and the log-probability of the token the text holds there (`token`)."""

    top: dict[int, float]
    token: int
    token_logprob: float


def argmax_set(top: dict[int, float]) -> set[int]:
    """The tokens tied at the highest log-probability (exact ties: vLLM's bf16 logits come in
    steps of 0.0625 for logits in [8, 16), so two tokens often read the same value)."""
    if not top:
        return set()
    best = max(top.values())
    return {t for t, v in top.items() if v == best}


def kl(ref: Position, cand: Position) -> tuple[float, float]:
    """(KL(ref || cand) in nats over the coarse-graining both readings allow, the ref's rest
    mass). KL(defaults || config) is the direction llama.cpp's perplexity tool reports (its
    base model's distribution first), so the budget anchored to its tables compares like with
    like; weighted by the defaults' probabilities, it counts a change where the defaults put
    their mass."""
    r = dict(ref.top)
    c = dict(cand.top)
    r.setdefault(ref.token, ref.token_logprob)
    c.setdefault(cand.token, cand.token_logprob)
    kept = r.keys() & c.keys()
    total = 0.0
    pr = pc = 0.0
    for t in kept:
        lp, lq = r[t], c[t]
        p = math.exp(lp)
        pr += p
        pc += math.exp(lq)
        total += p * (lp - lq)
    rest_r, rest_c = max(1.0 - pr, REST_FLOOR), max(1.0 - pc, REST_FLOOR)
    total += rest_r * math.log(rest_r / rest_c)
    return max(total, 0.0), max(1.0 - pr, 0.0)


@dataclass(frozen=True)
class Compared:
    """Two readings of one position, compared."""

    kl: float
    agree: bool  # the two top-token sets share a token (an exact tie counts either way)
    tie: bool  # the defaults' top two are exactly tied
    ll_change: float  # the config's log-probability of the text's token minus the defaults'
    rest: float  # the defaults' mass outside the kept tokens


def compare_position(ref: Position, cand: Position) -> Compared:
    if ref.token != cand.token:
        raise ValueError("two readings of different texts: token "
                         f"{ref.token} against {cand.token}")
    k, rest = kl(ref, cand)
    top_r, top_c = argmax_set(ref.top), argmax_set(cand.top)
    return Compared(k, bool(top_r & top_c), len(top_r) > 1,
                    cand.token_logprob - ref.token_logprob, rest)


@dataclass(frozen=True)
class PromptDivergence:
    """One prompt's positions compared: sums, so prompts pool as ratios."""

    positions: int
    kl_sum: float
    agree: int
    ties: int
    ll_sum: float
    rest_sum: float
    kls: tuple[float, ...]  # each position's KL (for the pooled percentiles)


def compare_prompt(ref: Sequence[Position], cand: Sequence[Position]) -> PromptDivergence:
    """The positions both readings of one text hold (the shorter's length)."""
    got = [compare_position(r, c) for r, c in zip(ref, cand, strict=False)]
    return PromptDivergence(len(got), sum(g.kl for g in got), sum(g.agree for g in got),
                            sum(g.tie for g in got), sum(g.ll_change for g in got),
                            sum(g.rest for g in got), tuple(g.kl for g in got))


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float

    def to_json(self) -> list[float]:
        return [self.value, self.low, self.high]


@dataclass(frozen=True)
class Divergence:
    """A config against the defaults over a prompt set: token-weighted means (as llama.cpp
    reports them), each with a percentile bootstrap interval over prompts at `coverage`."""

    prompts: int
    positions: int
    kl_mean: Interval
    kl_p99: Interval
    top1_agree: Interval
    ll_change: Interval  # nats per token; negative: the config finds the text less likely
    ties: float  # share of positions where the defaults' top two are exactly tied
    rest_mass: float  # mean mass of the defaults outside the kept tokens (top-k truncation)
    coverage: float

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("kl_mean", "kl_p99", "top1_agree", "ll_change"):
            d[k] = getattr(self, k).to_json()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Divergence:
        iv = {k: Interval(*d[k]) for k in ("kl_mean", "kl_p99", "top1_agree", "ll_change")}
        return cls(int(d["prompts"]), int(d["positions"]), ties=float(d["ties"]),
                   rest_mass=float(d["rest_mass"]), coverage=float(d["coverage"]), **iv)


def _stats(units: Sequence[PromptDivergence], idx: np.ndarray) -> np.ndarray:
    """(kl mean, kl p99, top-1 agreement, log-likelihood change) of the prompts `idx`."""
    n = sum(units[i].positions for i in idx)
    if n == 0:
        return np.array([0.0, 0.0, 1.0, 0.0])
    kls = np.concatenate([np.asarray(units[i].kls) for i in idx])
    return np.array([sum(units[i].kl_sum for i in idx) / n, float(np.percentile(kls, 99)),
                     sum(units[i].agree for i in idx) / n, sum(units[i].ll_sum for i in idx) / n])


def pool(units: Sequence[PromptDivergence], coverage: float = 0.95,
         resamples: int = BOOTSTRAP) -> Divergence:
    """The pooled figures with their intervals: prompts resampled with replacement (a prompt's
    positions are not independent of each other, prompts are)."""
    units = [u for u in units if u.positions]
    n = sum(u.positions for u in units)
    point = _stats(units, np.arange(len(units)))
    if len(units) > 1:
        rng = np.random.default_rng(SEED)
        draws = np.array([_stats(units, rng.integers(0, len(units), len(units)))
                          for _ in range(resamples)])
        a = (1 - coverage) / 2
        lo, hi = np.quantile(draws, a, axis=0), np.quantile(draws, 1 - a, axis=0)
    else:  # one prompt: no interval to draw
        lo = hi = point
    iv = [Interval(float(point[i]), float(min(lo[i], point[i])), float(max(hi[i], point[i])))
          for i in range(4)]
    return Divergence(len(units), n, iv[0], iv[1], iv[2], iv[3],
                      sum(u.ties for u in units) / n if n else 0.0,
                      sum(u.rest_sum for u in units) / n if n else 0.0, coverage)
