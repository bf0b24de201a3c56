"""The quality guard's verdict, decided once (docs/quality.md): passes, fails or cannot tell, from
the KL divergence's interval against its line (the KL budget, or a multiple of the defaults' own
KL against themselves, whichever is higher), the task's paired interval against
`max_task_drop` beyond the defaults' own drop, and, for speculative decoding, a bug check on
its greedy divergences. Pure; the guard (tuning/quality.py) records what `decide` returns on
the trial, and every presenter reads it through `verdict_text`.

Steps, each its own function: `kl_part`, `task_part`, `spec_part`, then `combine`:
- any part fails: the config fails;
- else the deciding part (the KL; for a config whose only output flag is speculation, the bug
  check) cannot tell: cannot tell, with what would decide it;
- else it passes. A task that cannot tell does not block a pass the KL gave (it is named in
  the reason): a small model solves too few items for the task to show anything.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from autotune.config.quality import QualityConfig
from autotune.measure.divergence import Divergence
from autotune.measure.paired import Paired

PASSES, FAILS, CANNOT_TELL = "passes", "fails", "cannot tell"
# the constraint's violation: > 0 is infeasible. A config the guard cannot judge is not
# recommended either (never silently passed), but ranks above one it failed
VIOLATION = {PASSES: 0.0, CANNOT_TELL: 0.5, FAILS: 1.0}


@dataclass(frozen=True)
class Part:
    """One measure's verdict, with the one line that says why."""

    name: str  # "kl", "task" or "spec"
    verdict: str
    reason: str


def _needed(n: int, value: float, low: float, high: float, line: float) -> int | None:
    """About how many units would put the interval on one side of `line` (the half-width
    shrinking as 1/sqrt(n)); None where the value sits on the line."""
    if value > line:
        half, gap = value - low, value - line
    else:
        half, gap = high - value, line - value
    if gap <= 0:
        return None
    return max(n + 1, math.ceil(n * (half / gap) ** 2 - 1e-6))  # (float noise: 36.000001)


def kl_line(q: QualityConfig, floor: Divergence | None) -> float:
    """The KL a config's interval must lie above to fail: the budget, or the floor times the
    multiple, whichever is higher."""
    return max(q.max_kl, q.floor_multiple * floor.kl_mean.value) if floor else q.max_kl


def kl_part(div: Divergence, floor: Divergence | None, q: QualityConfig) -> Part:
    line = kl_line(q, floor)
    k = div.kl_mean
    figures = (f"KL {k.value:.4g} [{k.low:.4g}, {k.high:.4g}] nats/token over {div.prompts} "
               f"texts ({div.positions} tokens), line {line:.4g}")
    if div.prompts < q.min_units:
        return Part("kl", CANNOT_TELL, f"{figures}: {div.prompts} texts, fewer than "
                    f"quality.min_units ({q.min_units}) for an interval")
    if k.low > line:
        return Part("kl", FAILS, f"{figures}: above the line")
    if k.high <= line:
        return Part("kl", PASSES, f"{figures}: within it")
    need = _needed(div.prompts, k.value, k.low, k.high, line)
    more = (f"about {need} texts would decide it (quality.prompts + quality.texts)"
            if need else "it sits on the line")
    return Part("kl", CANNOT_TELL, f"{figures}: the interval straddles it; {more}")


def task_line(q: QualityConfig, floor: Paired | None) -> float:
    """The drop a config's interval must lie above to fail: `max_task_drop` beyond the
    defaults' own drop (their second reading against their first)."""
    return q.max_task_drop + (max(floor.drop, 0.0) if floor else 0.0)


def lost_text(lost: list[str], shown: int = 5) -> str:
    """The first items a config lost, by the task's ids ("" for none)."""
    if not lost:
        return ""
    more = f" and {len(lost) - shown} more" if len(lost) > shown else ""
    return f"; lost {', '.join(lost[:shown])}{more}"


def task_part(name: str, p: Paired, floor: Paired | None, q: QualityConfig,
              lost: list[str] | None = None) -> Part:
    line = task_line(q, floor)
    figures = (f"{name}: the defaults pass {p.defaults_pass} of {p.items}, the config "
               f"{p.config_pass} ({p.lost} lost, {p.gained} gained); drop {p.drop:+.3f} "
               f"[{p.low:+.3f}, {p.high:+.3f}], line {line:.3f}")
    if p.items and p.defaults_pass / p.items < q.max_task_drop:
        return Part("task", CANNOT_TELL, f"{figures}: the defaults pass too few items for a "
                    f"drop of {q.max_task_drop:g} to show (a task this model can do would)")
    if p.low > line:
        return Part("task", FAILS, f"{figures}: worse beyond the line{lost_text(lost or [])}")
    if p.high <= line:
        return Part("task", PASSES, f"{figures}: within it")
    need = _needed(p.items, p.drop, p.low, p.high, line)
    more = (f"about {need} items would decide it (quality.task_items)" if need
            else "it sits on the line")
    return Part("task", CANNOT_TELL, f"{figures}: the interval straddles it; {more}")


@dataclass(frozen=True)
class GreedyCheck:
    """The config's greedy completions against the defaults' (a diagnostic; speculation's
    bug check): prompts compared, how many equal, and of those that differ, how many first
    diverge at an exact tie of the defaults' top two, within `tie_margin`, or beyond it."""

    prompts: int
    equal: int
    at_ties: int
    near_ties: int  # margin in (0, tie_margin]
    beyond: int  # margin > tie_margin, or the config's pick outside the defaults' top-k
    first_diff: str  # what the first differing prompt's completions said

    @property
    def exact_match(self) -> float:
        return self.equal / self.prompts if self.prompts else 1.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "exact_match": self.exact_match}


def spec_part(g: GreedyCheck, q: QualityConfig) -> Part:
    figures = f"greedy: {g.equal} of {g.prompts} completions equal the defaults'"
    if g.equal < g.prompts:
        figures += (f"; of the others {g.at_ties} first differ at an exact tie, "
                    f"{g.near_ties} within {q.tie_margin:g} nats, {g.beyond} beyond")
    if g.beyond:
        return Part("spec", FAILS, f"{figures}: speculation is lossless, so a divergence "
                    "where the defaults' pick clearly led is a bug")
    if not g.prompts:
        return Part("spec", CANNOT_TELL, f"{figures}: no greedy completion to check")
    return Part("spec", PASSES, f"{figures}: " + ("rounding only" if g.equal < g.prompts
                                                   else "no divergence"))


def combine(parts: list[Part], deciding: str) -> tuple[str, str]:
    """(the verdict, its reason) from the parts; `deciding`: the part a pass rests on."""
    failed = [p for p in parts if p.verdict == FAILS]
    if failed:
        return FAILS, "; ".join(p.reason for p in failed)
    main = next((p for p in parts if p.name == deciding), None)
    if main is None:
        return CANNOT_TELL, f"no {deciding} reading"
    others = [p for p in parts if p is not main]
    if main.verdict == CANNOT_TELL:
        return CANNOT_TELL, "; ".join(p.reason for p in [main, *others])
    return PASSES, "; ".join(p.reason for p in [main, *others])


def verdict_text(q: dict[str, Any] | None, failed: bool = False) -> str:
    """The guard's verdict as every presenter shows it (tables, MLflow, export, report): the
    verdict, its figures, the floor. Records written before the verdict existed (greedy exact
    match and a log-prob drop) read as they were judged then."""
    if not q:
        return ""
    floor = q.get("floor") or {}
    fk = floor.get("kl_mean")
    floor_text = (f"floor KL {fk:.2g} (the defaults against themselves, {floor['conditions']})"
                  if isinstance(fk, int | float) else "floor: not measured")
    if not q.get("judged") and "verdict" not in q:
        if floor:  # vLLM's defaults' trial: the reference, and the floor read on its boot
            return f"{q.get('why', '')}; {floor_text}"
        return f"not judged: {q.get('why', '')}"
    if "verdict" not in q:  # an earlier guard's record
        drop = q.get("logprob_drop")
        shown = f"{drop:.3f}" if isinstance(drop, int | float) else "-"
        return (f"{'fails' if failed else 'passes'} (earlier guard): "
                f"{q.get('exact_match', 0):.0%} exact, log-prob drop {shown}")
    return f"{q['verdict']}: {q.get('reason', '')}; {floor_text}"


def quality_metrics(q: dict[str, Any]) -> dict[str, float]:
    """The figures a trial logs as metrics (MLflow): the KL with its interval, top-1 agreement,
    the log-likelihood change, the task's drop, the floor, the guard's seconds."""
    out: dict[str, float] = {}
    kl = q.get("kl") or {}
    for k in ("kl_mean", "kl_p99", "top1_agree", "ll_change"):
        if k in kl:
            value, low, high = kl[k]
            out.update({f"quality_{k}": value, f"quality_{k}_low": low,
                        f"quality_{k}_high": high})
    if q.get("task"):
        out.update(quality_task_drop=q["task"]["drop"], quality_task_drop_low=q["task"]["low"],
                   quality_task_drop_high=q["task"]["high"])
    for k, x in (q.get("floor") or {}).items():
        if isinstance(x, int | float):
            out[f"quality_floor_{k}"] = float(x)
    if isinstance(q.get("seconds"), int | float):
        out["quality_seconds"] = float(q["seconds"])
    if "verdict" in q:
        out["quality_verdict"] = VIOLATION[q["verdict"]]
    for k in ("exact_match", "logprob_drop"):  # an earlier guard's record
        if isinstance(q.get(k), int | float):
            out[f"quality_{k}"] = float(q[k])
    return out


def quality_tags(q: dict[str, Any] | None, failed: bool) -> dict[str, str]:
    """The guard's verdict as MLflow tags: the text every surface shows, and the verdict."""
    if not q:
        return {}
    tags = {"autotune.quality": verdict_text(q, failed)[:5000]}
    if q.get("verdict"):
        tags["autotune.quality_verdict"] = str(q["verdict"])
    return tags
