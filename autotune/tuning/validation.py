"""`export --validate`'s record and verdict: the chosen config and vLLM's defaults booted again,
interleaved, beside the study (never as its trials: a check must not move what it checks), and
whether the study's figure held.

The boots land in the study's folder (`validate/run-<time>/`) and `validate.json` lists every
validation run with its boots and its verdict; `trials`, `pareto`, `export`, the report and
MLflow keep showing the study as it was. The verdict:

- **the figure**: with `MIN_BOOTS` re-runs each, the study's gain of the first objective must lie
  inside the re-runs' 95% interval; with fewer, the two gains must differ by less than twice the
  difference's noise (the defaults' boot-to-boot spread, from every boot of them the study and
  the re-runs hold, scaled by the boots on each side); with no spread measured, undecided;
- **the cap** (`--max-tpot-ms`): the re-runs' median mean TPOT must be under it;
- **the SLOs**: every re-run of the config must meet them.

"held" when all that applies holds; "did not hold" when one fails; "undecided" when the figure
cannot be judged and nothing failed.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autotune.measure.stats import Gain, rel_sd
from autotune.tuning.record import TrialRecord

# the gain difference allowed, in standard deviations of the difference (about 95%)
Z = 2.0
HELD, NOT_HELD, UNDECIDED = "held", "did not hold", "undecided"


@dataclass(frozen=True)
class Boot:
    """One re-run: whose config (the trial it repeats), its objectives, its status and where
    its files are."""

    of: int
    values: dict[str, float]
    status: str
    feasible: bool
    mean_tpot_ms: float | None = None
    cause: str | None = None
    folder: str | None = None

    @classmethod
    def of_record(cls, r: TrialRecord, of: int, folder: str) -> Boot:
        return cls(of, dict(r.values), r.label(), r.feasible, r.value("mean_tpot_ms"),
                   r.cause, folder)


@dataclass(frozen=True)
class Validation:
    """One `export --validate`: the chosen trial and the baseline, each objective's study value
    (its config's pooled median) and the re-runs' median, the first objective's gain by the
    re-runs alone and the study's, and the verdict with its reasons."""

    trial: int
    base: int
    metric: str
    rows: list[tuple[str, float, float]]  # objective, study value, median of the re-runs
    gain: Gain  # the re-runs only
    study_gain: Gain  # the study's boots (`n`: the chosen config's)
    boots: list[Boot]
    verdict: str
    why: list[str] = field(default_factory=list)
    max_tpot_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        def gain(g: Gain) -> dict[str, Any]:
            return {"gain": g.gain, "low": g.low, "high": g.high, "n": g.n, "n_base": g.n_base,
                    "text": g.text()}

        return {"trial": self.trial, "baseline": self.base, "metric": self.metric,
                "rows": [{"metric": m, "study": a, "re_runs": b} for m, a, b in self.rows],
                "gain": gain(self.gain), "study_gain": gain(self.study_gain),
                "max_tpot_ms": self.max_tpot_ms, "verdict": self.verdict, "why": self.why,
                "boots": [asdict(b) for b in self.boots]}


def verdict(study_gain: Gain, gain: Gain, base_boots: list[float], mine: list[Boot],
            max_tpot_ms: float | None) -> tuple[str, list[str]]:
    """(verdict, one line per check) for a validation (the module's docstring states the
    rule). `base_boots`: every boot of the defaults' first objective, the study's and the
    re-runs'."""
    why: list[str] = []
    failed = undecided = False
    said = f"{study_gain.gain * 100:+.1f}%"
    if gain.bounded:
        ok = gain.low <= study_gain.gain <= gain.high
        why.append(f"the study's gain {said} lies {'inside' if ok else 'OUTSIDE'} the "
                   f"re-runs' 95% interval [{gain.low * 100:+.1f}, {gain.high * 100:+.1f}]")
        failed |= not ok
    elif len(base_boots) >= 2:
        noise = rel_sd(base_boots)
        sd = noise * math.sqrt(1 / gain.n + 1 / gain.n_base + 1 / study_gain.n
                               + 1 / study_gain.n_base)
        diff = abs(math.log1p(gain.gain) - math.log1p(study_gain.gain))
        ok = diff <= Z * sd + 1e-12  # boots that read alike: the same gain holds
        why.append(f"the re-runs' gain {gain.gain * 100:+.1f}% is "
                   f"{'within' if ok else 'OUTSIDE'} the noise of the study's {said} "
                   f"(±{math.expm1(Z * sd) * 100:.1f}%: the defaults' boots spread "
                   f"{noise:.1%}, {gain.n} re-run(s) each)")
        failed |= not ok
    else:
        why.append("the figure cannot be judged: no spread of the defaults' boots was "
                   "measured (--repeats 2 or more measures one)")
        undecided = True
    if max_tpot_ms is not None:
        tpots = [b.mean_tpot_ms for b in mine if b.mean_tpot_ms is not None]
        if not tpots:
            why.append(f"--max-tpot-ms {max_tpot_ms:g}: no re-run measured a mean TPOT")
            failed = True
        else:
            med = statistics.median(tpots)
            ok = med <= max_tpot_ms
            why.append(f"--max-tpot-ms {max_tpot_ms:g}: the re-runs' median mean TPOT "
                       f"{med:.2f} ms {'meets' if ok else 'MISSES'} it")
            failed |= not ok
    met = sum(b.feasible for b in mine)
    why.append(f"the SLOs: met on {met} of {len(mine)} re-run(s)")
    failed |= met < len(mine)
    return (NOT_HELD if failed else UNDECIDED if undecided else HELD), why


def write_run(path: Path, v: Validation) -> None:
    """Append a validation run to the study's `validate.json`."""
    doc = json.loads(path.read_text()) if path.is_file() else {"runs": []}
    doc["runs"].append(v.to_json())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The validation runs recorded beside a study (empty: none)."""
    if not path.is_file():
        return []
    return list(json.loads(path.read_text()).get("runs", []))
