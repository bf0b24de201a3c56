"""The budget plan of a study with a budget (docs/certify.md): what each step costs in
device-minutes (an exploration trial, a certify boot, the reference check), how many certify
boots a gain needs at the spread between boots, and the reserve the exploration keeps for them
(autotune.tuning.certify runs the certify phase). The split was chosen on a simulated study
(lab/certify_split.py, docs/results/certified): see `certify.min_gain`."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from autotune.config.study import StudyConfig
from autotune.measure.censored import CERTIFY_LEVEL, projected
from autotune.measure.stats import boots_for_width
from autotune.tuning.bill import Bill
from autotune.tuning.record import TrialRecord, baseline
from autotune.tuning.spend import ONE_TIME, boot_split, cold_boots

# Before a study has measured its own costs, a certify boot and the reference check are priced
# as shares of a warm trial. On the H100 (dense 8B, ShareGPT) a warm capacity trial took 5.56
# GPU-min (median of 7); a boot that meets at C and misses one step above is a warm boot (63-150
# s), the warm-up (30-60 s) and two points (56 s met, 26 s settled miss): about 0.6 of it; the
# reference check a stock boot and 7 runs of `vllm bench serve` (a warm-up and 3 samples at C
# and above, 25-40 s each): about 1.0 (docs/results/warm-server-h100).
CHECK_SHARE = 0.6
REFERENCE_SHARE = 1.0
# What one `vllm bench serve` run costs beyond its traffic: the CLI's start (Python imports, the
# tokenizer, the dataset) and its own warm-up. On the H100 (dense long-prompt shape, 2026-12-07)
# three reference runs of 14.4-14.7 s of traffic took 129.5 s in all: 28.5 s a run more.
REFERENCE_RUN_S = 28.5


@dataclass(frozen=True)
class Costs:
    """Device-minutes of each step of the plan: the next exploration trial, one certify boot,
    and the reference check (0: none for this study); `measured`: from the study's own trials,
    not the shares above."""

    unit: str
    trial: float
    check: float
    reference: float
    measured: bool

    def reserve(self, pairs: int) -> float:
        """What `pairs` more boots of the pick and of the defaults and the reference cost."""
        return 2 * pairs * self.check + self.reference


def estimate_costs(recs: list[TrialRecord], cfg: StudyConfig, b: Bill,
                   on_boot: bool = False) -> Costs:
    """The plan's costs from the study's trials so far, priced from their measured phases
    (tuning.spend): a trial as the bill's next trial; a certify boot as a warm boot
    (warm_boot_s: a cold boot's compile and kernel warm-up left out), a short warm-up
    (tuning.warmup.QUICK windows at the median seconds a window took: a config that warmed
    before is warm again) and two points (met at C, missed a step above) at the median seconds
    a point took, and its stop; the reference check as the runs `vllm bench serve` makes at C,
    each a sample of a point and the CLI's start (REFERENCE_RUN_S), and, unless it runs on the
    pick's last certify boot (`on_boot`: that server is up and warm), a warm boot, its warm-up
    run and the same runs a step above. Before any measured trial, shares of a trial (CHECK_SHARE,
    REFERENCE_SHARE). Where the first objective is no capacity, a certify boot is a trial."""
    from autotune.measure.on_server import samples_of
    from autotune.tuning.warmup import QUICK

    devices = b.devices
    trial = b.next_trial()
    measured = [r for r in recs if r.measured and r.timings]
    checked = capacity_first(cfg)  # else a certify boot is a whole measurement, a trial
    referenced = checked and cfg.certify.reference
    if not measured or not checked or cfg.capacity is None:
        return Costs(b.unit, trial, trial * CHECK_SHARE if checked else trial,
                     trial * REFERENCE_SHARE if referenced else 0.0, bool(measured))
    boot = warm_boot_s(measured) or 0.0
    points = [p for r in measured for p in r.points()]
    point = statistics.median(p.seconds for p in points) if points else 0.0
    runs = statistics.median(max(p.runs, 1) for p in points) if points else 1.0
    windows = [(p.server.get("warm_s", 0.0), p.server.get("warm_windows", 0.0))
               for p in points if p.server.get("warm_windows")]
    window = statistics.median(s / n for s, n in windows) if windows else 0.0
    stop = statistics.median(r.timings.get("stop_s", 0.0) for r in measured)
    check = (boot + QUICK * window + 2 * point + stop) * devices / 60
    k = samples_of(cfg.capacity)
    run = point / runs + REFERENCE_RUN_S  # a reference run: a point's sample and the CLI's start
    ref = (k * run if on_boot else boot + window + (2 * k + 1) * run) * devices / 60 \
        if referenced else 0.0
    return Costs(b.unit, trial, check, ref, True)


def capacity_first(cfg: StudyConfig) -> bool:
    """Whether the certify phase judges a capacity (one profile, capacity the first
    objective): then a boot's value is a search's bracket, a certify boot searches in steps
    from the capacity found, and the reference check can judge it."""
    from autotune.config.metric_names import base_metric

    return cfg.capacity is not None and not cfg.profiles and \
        base_metric(cfg.objectives[0].metric) == "capacity"


def boots_for(gain: float, noise: float, tolerance: float, level: float = CERTIFY_LEVEL,
              most: int = 10) -> int:
    """Boots of each config for a gain of `gain` to be certified about half the time when boots
    spread by `noise` (relative sd): the smallest n whose expected lower bound
    (censored.censored_gain: the bracket's width and a t-interval of the spread) clears 0, i.e.
    whose interval's half-width fits in the room the bracket leaves; `most` when none up to it
    does. (A true +20% at that n certifies in 44-52% of simulated studies; the certify phase
    adds boots while the budget allows.)"""
    room = math.log1p(gain) - math.log1p(tolerance)
    return min(boots_for_width(noise, room, level), most) if room > 0 else most


@dataclass(frozen=True)
class BudgetPlan:
    """How a budget is split: certify boots reserved per config beyond the first pass, the
    device-minutes kept for them and the reference check, the rest explored."""

    budget: float  # device-minutes in all (the budget, or what the timeout leaves)
    pairs: int
    reserve: float
    costs: Costs
    noise: float  # the boot-to-boot spread planned for
    noise_from: str  # where that spread came from
    gain: float = 0.2  # the gain planned for (planned_gain)
    gain_from: str = "certify.min_gain"

    def text(self) -> str:
        c = self.costs
        est = "measured" if c.measured else "estimated before any trial"
        return (f"plan: {self.budget:.1f} {c.unit}; {self.reserve:.1f} kept to certify the pick "
                f"({self.pairs} more boot{'s' if self.pairs > 1 else ''} of it and of the "
                f"defaults at {c.check:.1f} each, the reference check {c.reference:.1f}; "
                f"{est}), the rest explores (a trial {c.trial:.1f}); planned for a "
                f"{self.gain:+.0%} gain ({self.gain_from}) at a {self.noise:.0%} spread between "
                f"boots ({self.noise_from})")


def fit_pairs(budget: float, costs: Costs, wanted: int, explore: float) -> int:
    """The certify pairs to reserve: `wanted`, less while the rest of the budget cannot pay
    `explore` device-minutes of exploring (MIN_PAIRS at least). On the simulated H100 study
    (lab/certify_split.py) a reserve that leaves no room to explore certifies nothing: the
    pick is the defaults."""
    pairs = wanted
    while pairs > MIN_PAIRS and budget - costs.reserve(pairs) < explore:
        pairs -= 1
    return pairs


MIN_PAIRS = 2  # the fewest new boots of the pick that give its gain an interval


@dataclass(frozen=True)
class TooFew:
    """Why the certify phase stops with budget left (too_few): `why` says so; `decided`: not
    even the boots certify.max_boots allows would clear no gain at this estimate (a verdict,
    not certified), else a larger budget might (budget spent, resumable)."""

    why: str
    decided: bool


def too_few(pick: list[tuple[float, float]], base: list[tuple[float, float]], most: int,
            left: float, cost: Costs, level: float = CERTIFY_LEVEL, floor: float = 0.0
            ) -> TooFew | None:
    """Whether the pairs of certify boots that `left` device-minutes still pay (with the
    reference check), fewer than the `most` that certify.max_boots allows, can decide nothing:
    at the gain's estimate and spread so far over these boots (brackets), hoped one standard
    error higher the lower bound would stay at or under no gain, and feared one lower the
    upper bound would stay at or over it (censored.projected). None: they might decide, the
    budget pays every boot max_boots allows (the phase boots on to its verdict), or there is
    no spread yet (fewer than 2 boots each)."""
    paid = 0
    while paid < most and left >= cost.reserve(paid + 1):
        paid += 1
    if paid >= most:  # certify.max_boots ends it, not the budget: boot on to the verdict
        return None
    got = projected(pick, base, paid, level, floor)
    if got is None or got[0] > 0 or got[1] < 0:
        return None
    need = next((n for n in range(paid + 1, most + 1)
                 if (p := projected(pick, base, n, level, floor)) is not None and p[0] > 0),
                None)
    pays = (f"the {left:.1f} {cost.unit} left pay {paid} more pair{'s' if paid != 1 else ''}, "
            "too few to clear 1.0x or to fall under it at this estimate")
    if need is None:
        return TooFew(f"at this estimate not even the {most} more boots each that "
                      f"certify.max_boots allows would clear 1.0x ({pays}), so it stopped with "
                      "them unspent", True)
    return TooFew(f"{pays} (about {cost.reserve(need) - left:.1f} {cost.unit} more would pay "
                  f"the {need} it needs), so it stopped with them unspent", False)


def plan(recs: list[TrialRecord], cfg: StudyConfig, b: Bill, budget: float,
         machine: str | None = None, on_boot: bool = False) -> BudgetPlan:
    """The split of `budget` (device-minutes): reserve the certify boots a gain needs at the
    spread between boots (the defaults' own once they were booted twice, else
    `certify.noise`), at most `certify.max_boots` a config less its first pass, and fewer where
    the rest could not pay `certify.explore_trials` trials (the first as it cost, the others
    as the next is expected to). The gain planned for is `certify.min_gain`, or the larger gain
    the study's pick so far read over the defaults, discounted for being picked
    (planned_gain): a +45% first pass needs fewer boots than a +20% one. `machine`: the spread
    of the defaults' boots there only; `on_boot`: the reference check runs on the pick's last
    certify boot (reference_on_boot)."""
    base = baseline(recs)
    spread = boots_of(recs, base.number, cfg, machine) if base else []
    noise, src = cfg.certify.noise, "certify.noise"
    if len(spread) > 1:  # two boots in one bracket read 0: never below the prior
        mids = [math.sqrt(lo * hi) for lo, hi in spread]
        if (seen := statistics.stdev(mids) / statistics.fmean(mids)) > noise:
            noise, src = seen, f"the defaults' {len(mids)} boots"
    tol = cfg.capacity.tolerance if cfg.capacity is not None else 0.0
    gain, gain_src = planned_gain(recs, cfg, noise)
    # neither first-pass boot counts toward the interval (certify_rule): certify boots only
    n = min(boots_for(gain, noise, tol), max(cfg.certify.max_boots - 1, 1))
    costs = estimate_costs(recs, cfg, b, on_boot)
    first = b.trials[0].minutes if b.trials else costs.trial
    pairs = fit_pairs(budget, costs, n, first + (cfg.certify.explore_trials - 1) * costs.trial)
    return BudgetPlan(budget, pairs, costs.reserve(pairs), costs, noise, src, gain, gain_src)


def planned_gain(recs: list[TrialRecord], cfg: StudyConfig, noise: float
                 ) -> tuple[float, str]:
    """The gain the reserve is sized for, and where it came from: `certify.min_gain`, or, where
    the best first-pass boot of the K configs explored beyond the defaults read more over the
    defaults' first boot, that gain discounted for being the best of K draws at this spread
    (exp(-noise x (1 + sqrt(2 ln K))): the expected excess of the maximum of K, plus one
    spread for the defaults' boot it beat)."""
    floor = cfg.certify.min_gain
    base = baseline(recs)
    if base is None or not capacity_first(cfg):
        return floor, "certify.min_gain"
    metric = cfg.metric_names()[0]
    first = [r for r in recs if r.measured and r.facts.repeat_of is None
             and r.number != base.number and (r.values.get(metric) or 0) > 0]
    at_base = base.values.get(metric) or 0.0
    if not first or at_base <= 0:
        return floor, "certify.min_gain"
    best = max(r.values[metric] for r in first)
    k = len(first)
    seen = best / at_base * math.exp(-noise * (1 + math.sqrt(2 * math.log(k))))
    if seen - 1 <= floor:
        return floor, "certify.min_gain"
    return seen - 1, f"the pick so far, {best / at_base:.2f}x over {k} config{'s' * (k > 1)}"


def reference_on_boot(cfg: StudyConfig, lanes: int = 1) -> bool:
    """Whether the certify phase's reference check runs on the pick's last certify boot rather
    than a boot of its own: one boot at a time, a capacity judged, and the study's servers
    launched as a stock `vllm serve` (server.preload off: a GPU's default), the launch the
    reference judges; the round's pick then boots after the defaults (autotune.tuning.certify)."""
    from autotune.server.machine import preloads

    return lanes == 1 and capacity_first(cfg) and cfg.certify.reference and \
        not preloads(cfg.server)


def same_config(recs: list[TrialRecord], number: int, machine: str | None = None,
                selected: bool = False) -> list[TrialRecord]:
    """Every measured boot of trial `number`'s config (its served flags): itself, its repeats,
    any other trial that served the same flags; a search stopped early (a bound) left out (it
    gives no bracket: unlike the tables' pooling, which keeps a bound where nothing else is);
    with `machine`, only the boots on that machine (TrialFacts.machine); with `selected`, not
    trial `number` itself: the boot a pick was chosen on read high by its choosing (among 20
    configs equal to the defaults at a 20% spread, counting it certified 7.4% of them falsely,
    leaving it out 2.6%)."""
    by = {r.number: r for r in recs}
    if number not in by:
        return []
    key = by[number].facts.flags_key
    return [r for r in recs if r.measured and not r.bound_only and (
        r.number == number or r.facts.repeat_of == number
        or (key is not None and r.facts.flags_key == key))
        and (machine is None or r.facts.machine == machine)
        and not (selected and r.number == number)]


def boots_of(recs: list[TrialRecord], number: int, cfg: StudyConfig,
             machine: str | None = None, selected: bool = False) -> list[tuple[float, float]]:
    """Each boot of the config (same_config) as the bracket that holds its value: a capacity
    search's [capacity met, lowest load missed above it) (no failing load: one tolerance
    above) where the first objective is the capacity; else that objective's value,
    [value, value]."""
    return [b for b, _ in boots_where(recs, number, cfg, machine, selected)]


def boots_where(recs: list[TrialRecord], number: int, cfg: StudyConfig,
                machine: str | None = None, selected: bool = False
                ) -> list[tuple[tuple[float, float], str | None]]:
    """boots_of's brackets, each with the machine it was booted on (TrialFacts.machine)."""
    out: list[tuple[tuple[float, float], str | None]] = []
    metric = cfg.metric_names()[0]
    for r in same_config(recs, number, machine, selected):
        found = r.facts.searches().get(None)
        if capacity_first(cfg) and found is not None:
            assert cfg.capacity is not None
            # capacity_per_gpu: the bracket per GPU the server used
            per = r.metrics.get("gpus", 1.0) if metric.endswith("_per_gpu") else 1.0
            if found.capacity > 0:
                hi = found.fail if found.fail is not None else \
                    found.capacity * (1 + cfg.capacity.tolerance)
                out.append(((found.capacity / per, max(hi, found.capacity) / per),
                            r.facts.machine))
        elif (v := r.values.get(metric)) is not None and v > 0:
            out.append(((v, v), r.facts.machine))
    return out


def capacities_of(recs: list[TrialRecord], number: int, machine: str | None = None,
                  selected: bool = False) -> list[float]:
    """The capacities (on the search's own axis, whole server) the config's boots found
    (`selected`: not trial `number`'s own, same_config)."""
    return [found.capacity for r in same_config(recs, number, machine, selected)
            if (found := r.facts.searches().get(None)) is not None and found.capacity > 0]


def warm_boot_s(recs: list[TrialRecord]) -> float | None:
    """The seconds a warm boot takes (the process's start to /health), from the study's
    measured boots: the median of its warm ones (tuning.spend.cold_boots) where there is one;
    else the median of its cold ones less each one's one-time torch.compile and kernel warm-up
    as its log timed them (tuning.spend.ONE_TIME; a boot whose log timed neither counts whole);
    None before any boot. On the two H200s (docs/results/certified, h200x2-dense-run2) the
    two cold first boots took 190 s each, 26.6 and 53.4 s of it compiling and 96 and 64 s of
    kernel warm-up: 70.4 s priced warm, where the six warm boots then took 52-66 s (median
    59.6); a cold boot itself prices it 3.2x."""
    booted = [r for r in recs if r.measured and r.timings.get("boot_s", 0.0) > 0]
    cold = cold_boots(booted)
    warm = [r.timings["boot_s"] for r in booted if r.number not in cold]
    if warm:
        return statistics.median(warm)
    less = [r.timings["boot_s"] - sum(v for k, v in boot_split(r).items() if k in ONE_TIME)
            for r in booted]
    return statistics.median(less) if less else None
