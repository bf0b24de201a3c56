"""A synthetic capacity study whose boots spread (the certify phase's unit tests: tests/unit/
tuning/test_certify*.py): trials drawn around each config's capacity, found to a bracket, each
with its device-minutes, and the certify loop run over them."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from autotune.config.study import StudyConfig
from autotune.tuning import certify as certify_mod
from autotune.tuning.bill import bill
from autotune.tuning.certify import run_certify
from autotune.tuning.plan import plan
from autotune.tuning.record import TrialFacts, records

T0 = datetime(2026, 11, 28, 8, 0, 0)


def cfg_of(tmp_path: Path, **certify: Any) -> StudyConfig:
    return StudyConfig.model_validate({
        "name": "cert", "server": {"model": "/m", "executable": ["vllm"]},
        "profile": {"name": "random", "input_len": 8, "output_len": 4},
        "objectives": [{"metric": "capacity", "direction": "maximize"}],
        "slos": [{"metric": "p99_ttft_ms", "max": 1000}],
        "capacity": {"axis": "rate", "low": 1, "high": 500, "tolerance": 0.1},
        "search_space": "cpu-demo", "workdir": str(tmp_path), "budget_gpu_minutes": 45,
        "certify": certify})


class Synthetic:
    """A study of capacity trials; each boot's capacity is drawn around its config's with a
    relative spread, found to a bracket [C, C x 1.1) from where the search starts, and each
    trial takes `minutes` of wall time (the bill's device-minutes)."""

    def __init__(self, cfg: StudyConfig, spread: float, seed: int = 0) -> None:
        self.cfg, self.spread = cfg, spread
        Path(cfg.workdir).mkdir(parents=True, exist_ok=True)
        self.rng = np.random.default_rng(seed)
        self.study = optuna.create_study(study_name=cfg.name, directions=["maximize"],
                                         storage=cfg.storage_url())
        self.study.set_metric_names(["capacity"])
        self.clock = T0
        self.true: dict[str, float] = {}

    def boot(self, key: str, minutes: float, *, base: bool = False,
             repeat_of: int | None = None, start: float | None = None,
             machine: str | None = None, hook: Any = None) -> int:
        true = self.true[key] * math.exp(self.rng.normal(0, self.spread))
        anchor = start or self.true[key]
        step = math.log1p(0.1)
        lo = anchor * math.exp(math.floor(math.log(true / anchor) / step) * step)
        lo, hi = round(lo, 3), round(lo * 1.1, 3)
        points = [{"load": lo, "passed": True, "seconds": 60.0},
                  {"load": hi, "passed": False, "seconds": 30.0}]
        checked = None
        if hook is not None:  # run on the boot's server once measured (certify's reference)
            from autotune.measure.capacity import CapacityResult

            checked = hook("http://127.0.0.1:1", Path("server.log"),
                           CapacityResult("rate", lo, None, (), hi))
        facts = TrialFacts(flags={"k": key}, flags_key=key, baseline=base or None,
                           reference=checked,
                           repeat_of=repeat_of, check_at=start, machine=machine,
                           metrics={"capacity": lo, "warm_s": 30.0},
                           timings={"boot_s": 60.0, "bench_s": minutes * 60 - 60,
                                    "total_s": minutes * 60},
                           capacity={"axis": "rate", "capacity": lo, "fail": hi,
                                     "stopped": None, "points": points})
        t = optuna.trial.create_trial(values=[lo], user_attrs=facts.to_attrs(),
                                      constraints={"capacity_ok": 0.0})
        t.datetime_start = self.clock
        t.datetime_complete = self.clock + timedelta(minutes=minutes)
        self.clock += timedelta(minutes=minutes, seconds=5)
        self.study.add_trial(t)
        return len(self.study.trials) - 1

    def repeats(self, machine: str | None = None) -> Any:
        """A run_repeats that boots synthetically (what a certify pair costs: 3.5 min each)."""
        def run(study: Any, cfg: Any, pre: Any, requests: Any, pair: list[int], *,
                start_at: dict[int, float | None], on_measured: Any = None, **kw: Any) -> int:
            for n in pair:
                key = str(records(study)[n].facts.flags_key)
                hook = (on_measured or {}).get(n)
                self.boot(key, 3.5, repeat_of=n, start=start_at[n], machine=machine, hook=hook)
            return len(pair)
        return run


def run(syn: Synthetic, pick: int, monkeypatch: pytest.MonkeyPatch, budget: float,
        reference: Any = None, machine: str | None = None) -> Any:
    monkeypatch.setattr(certify_mod, "run_repeats", syn.repeats(machine))

    def left() -> float:
        return budget - bill(syn.study, syn.cfg).total

    def costs() -> Any:
        recs = records(syn.study)
        return plan(recs, syn.cfg, bill(recs, syn.cfg), budget).costs
    return run_certify(syn.study, syn.cfg, None, [], pick, left, costs,  # type: ignore[arg-type]
                       reference=reference)


def explored(tmp_path: Path, gain: float, spread: float, seed: int = 0, **certify: Any
             ) -> tuple[Synthetic, int]:
    syn = Synthetic(cfg_of(tmp_path, **certify), spread, seed)
    syn.true = {"defaults": 70.0, "pick": 70.0 * (1 + gain), "other": 60.0}
    syn.boot("defaults", 9.0, base=True)  # cold
    pick = syn.boot("pick", 5.5)
    syn.boot("other", 5.0)
    return syn, pick
