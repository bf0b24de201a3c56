"""The plan's prices (tuning/plan.py, issue 85): a certify boot priced from the trials' measured
phases (a warm boot, a short warm-up, two points), the reference check on the pick's last
certify boot where the launch is stock, and a reserve sized by the gain the pick so far read."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.tuning.bill import bill
from autotune.tuning.plan import REFERENCE_RUN_S, boots_for, estimate_costs, plan, planned_gain
from autotune.tuning.record import records
from tests.certify_fakes import Synthetic, cfg_of


def study(tmp_path: Path, pick: float) -> Synthetic:
    syn = Synthetic(cfg_of(tmp_path, max_boots=8), 0.0, seed=1)
    syn.true = {"defaults": 70.0, "pick": 70.0 * pick}
    syn.boot("defaults", 9.0, base=True)
    syn.boot("pick", 5.5)
    return syn


def test_a_certify_boot_is_priced_from_the_measured_phases(tmp_path: Path) -> None:
    """Synthetic trials: a 60 s boot, points of 60 s (met) and 30 s (missed), no warm-up: a
    certify boot is a boot and two median points (2.5 min), not a share of a trial (3.3); the
    reference check on the pick's own server is its runs at C (1 on a CPU: a point's sample and
    the reference CLI's start, 1.2 min), on a boot of its own also a boot, its warm-up run and
    the runs a step above (4.7)."""
    syn = study(tmp_path, 1.5)
    recs = records(syn.study)
    b = bill(recs, syn.cfg)
    own, on_boot = estimate_costs(recs, syn.cfg, b), estimate_costs(recs, syn.cfg, b, True)
    assert own.measured and own.check == pytest.approx((60 + 2 * 45) / 60)
    run = 45 + REFERENCE_RUN_S
    assert own.reference == pytest.approx((60 + 3 * run) / 60)
    assert on_boot.check == own.check and on_boot.reference == pytest.approx(run / 60)


def test_the_reserve_is_sized_by_the_gain_the_pick_read(tmp_path: Path) -> None:
    """A +50% first pass over one config plans for +41% (discounted one spread for the
    defaults' boot it beat), needing fewer boots than certify.min_gain's +20%; a pick at +10%
    plans for min_gain."""
    big, small = study(tmp_path / "a", 1.5), study(tmp_path / "b", 1.1)
    g, why = planned_gain(records(big.study), big.cfg, 0.06)
    assert g == pytest.approx(1.5 * 2.718281828 ** -0.06 - 1, rel=1e-3) and "1.50x" in why
    assert planned_gain(records(small.study), small.cfg, 0.06)[0] == 0.2
    tol = 0.1
    assert boots_for(g, 0.15, tol) < boots_for(0.2, 0.15, tol)
    p_big = plan(records(big.study), big.cfg, bill(big.study, big.cfg), 200.0)
    p_small = plan(records(small.study), small.cfg, bill(small.study, small.cfg), 200.0)
    assert p_big.pairs <= p_small.pairs and "+41% gain (the pick so far" in p_big.text()
