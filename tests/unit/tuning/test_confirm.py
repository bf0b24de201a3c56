"""The confirm phase's readers: gains pooled over every boot of a config, when the study
confirms by itself, and the "too short to measure" rule."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.load.record import RequestRecord
from autotune.measure.metrics import MIN_PER_SLOT, steady_share, too_short
from autotune.outputs.tables import gain_text
from autotune.tuning.confirm import config_gains, wanted
from autotune.tuning.record import Status, TrialFacts, TrialRecord


def rec(number: int, value: float, key: str, base: bool = False,
        repeat_of: int | None = None) -> TrialRecord:
    facts = TrialFacts(flags_key=key, baseline=base or None, repeat_of=repeat_of,
                       metrics={"total_token_throughput": value},
                       timings={"total_s": 30.0})
    return TrialRecord(number, Status.OK, facts, {}, {"total_token_throughput": value})


M = ["total_token_throughput"]


def test_a_gain_is_one_measurement_until_repeats_exist() -> None:
    recs = [rec(0, 100.0, "base", base=True), rec(1, 150.0, "a")]
    g = config_gains(recs, M)[1]["total_token_throughput"]
    assert g.gain == pytest.approx(0.5) and g.n == 1
    assert gain_text(g) == "+50.0%, one measurement"


def test_repeats_pool_by_served_flags_into_an_interval() -> None:
    recs = [rec(0, 100.0, "base", base=True), rec(1, 150.0, "a"), rec(2, 90.0, "b"),
            rec(3, 102.0, "base", repeat_of=0), rec(4, 148.0, "a", repeat_of=1),
            rec(5, 98.0, "base", repeat_of=0), rec(6, 152.0, "a", repeat_of=1)]
    gains = config_gains(recs, M)
    g = gains[1]["total_token_throughput"]
    assert g is gains[4]["total_token_throughput"]  # the repeat reads the same pooled gain
    assert g.n == 3 and g.n_base == 3 and g.gain == pytest.approx(0.5, abs=1e-3)
    assert g.low <= 0.5 <= g.high and g.significant
    assert gain_text(g) == f"{g.text()}, 3 boots"
    assert gain_text(gains[2]["total_token_throughput"]).endswith("one measurement")


def test_a_gain_inside_the_noise_reads_no_significant_change() -> None:
    recs = [rec(0, 100.0, "base", base=True), rec(1, 104.0, "a"),
            rec(2, 80.0, "base", repeat_of=0), rec(3, 96.0, "a", repeat_of=1),
            rec(4, 120.0, "base", repeat_of=0), rec(5, 112.0, "a", repeat_of=1)]
    g = config_gains(recs, M)[1]["total_token_throughput"]
    assert not g.significant and gain_text(g).startswith("no significant change (")


def _cfg(when: str = "auto", min_s: float = 120.0) -> Any:
    return SimpleNamespace(confirm=SimpleNamespace(when=when, auto_min_trial_s=min_s))


@pytest.mark.parametrize(("flag", "when", "min_s", "on"), [
    (None, "auto", 120.0, False),  # trials of 30 s: the demo confirms only with --confirm
    (None, "auto", 20.0, True),  # trials that take longer than the threshold confirm
    (True, "never", 120.0, True),  # --confirm wins
    (False, "always", 120.0, False),  # --no-confirm wins
    (None, "always", 120.0, True),
])
def test_when_a_study_confirms(monkeypatch: pytest.MonkeyPatch, flag: bool | None, when: str,
                               min_s: float, on: bool) -> None:
    from autotune.tuning import confirm

    monkeypatch.setattr(confirm, "records", lambda _st: [rec(0, 1.0, "b", base=True),
                                                          rec(1, 2.0, "a")])
    got, why = wanted(_cfg(when, min_s), None, flag)  # type: ignore[arg-type]
    assert got is on and why


def closed_loop(n: int, conc: int, each: float = 1.0) -> list[RequestRecord]:
    """`n` requests at concurrency `conc`, each taking `each` seconds: waves of `conc`."""
    return [RequestRecord(i, (i // conc) * each, 8, 8, (i // conc) * each + 0.1,
                          (i // conc + 1) * each) for i in range(n)]


def test_steady_share_of_a_closed_loop() -> None:
    assert steady_share(closed_loop(64, 16), 16, 4.0) == pytest.approx(1.0)
    # half the slots idle for the last second of four
    recs = closed_loop(48, 16) + [RequestRecord(100 + i, 3.0, 8, 8, 3.1, 4.0) for i in range(8)]
    assert steady_share(recs, 16, 4.0) == pytest.approx(0.75)


def test_a_slots_own_gaps_between_requests_are_not_ramp_or_drain() -> None:
    """On 2 CPU cores the client shares the cores with the server, and a slot's next request
    leaves a few ms after its last one ended: "every slot busy" was then true 47% of a demo
    run with nothing of a ramp or drain about it. The steady state runs from the ramp's end to
    the drain's start, gaps included."""
    import random

    rng, conc, gap = random.Random(0), 16, 0.03
    recs: list[RequestRecord] = []
    for s in range(conc):  # each slot: requests of 0.3-0.7 s, 30 ms of client time between
        at = s * 0.002
        for _ in range(16):
            took = rng.uniform(0.3, 0.7)
            recs.append(RequestRecord(len(recs), at, 8, 8, at + 0.1, at + took))
            at += took + gap
    end = max(r.end_time for r in recs if r.end_time is not None)
    last_send = max(r.send_time for r in recs)
    busy = sum(1 for i in range(1000)  # sampled: every slot busy at a moment of the run
               if all(any(r.send_time <= x < (r.end_time or 0) for r in recs if r.index // 16 == s)
                      for s in range(conc) for x in [i / 1000 * last_send]))
    assert busy / 1000 < 0.6  # "every slot busy" the old rule's steady state: about half
    assert steady_share(recs, conc, end) > 0.75  # ramp to drain
    assert too_short(recs, conc, end) is None


def test_too_short_names_the_reason_and_the_fix() -> None:
    assert too_short(closed_loop(64, 16), 16, 4.0) is None
    # the H100 benchmark's length (1,000 prompts at 512, 1.95 per slot) measured 0.5% apart
    # between boots, so it does not warn
    assert too_short(closed_loop(1000, 512), 512, 2.0) is None
    one_wave = too_short(closed_loop(16, 16), 16, 1.0)
    assert one_wave is not None and "1.00 requests per concurrency slot" in one_wave
    assert f"num_prompts to at least {math.ceil(MIN_PER_SLOT * 16)}" in one_wave
    assert too_short(closed_loop(16, 16), None, 1.0) is None  # open loop: no slots
    # a long drain: every slot busy for two seconds of eight (one request runs on alone)
    drain = closed_loop(32, 16) + [RequestRecord(100, 2.0, 8, 8, 2.1, 8.0)]
    why = too_short(drain, 16, 8.0)
    assert why is not None and "busy for only" in why
    # the fix it names is more than it had, though it had enough per slot (an H100 trial had
    # 1,000 prompts at 512, steady 49%, and was told "at least 973")
    wanted = int(why.rsplit("at least ", 1)[1].split()[0])
    assert wanted > len(drain) > MIN_PER_SLOT * 16
    # and it is enough: the same drain after that many waves leaves every slot busy half the time
    waves = math.ceil(wanted / 16)
    longer = closed_loop(waves * 16, 16) + [RequestRecord(999, waves, 8, 8, waves + 0.1, waves + 6.0)]
    assert too_short(longer, 16, waves + 6.0) is None


def test_error_bars_come_from_configs_booted_more_than_once() -> None:
    from autotune.outputs.plots import trial_counts
    from autotune.tuning.confirm import config_boots

    recs = [rec(0, 100.0, "base", base=True), rec(1, 150.0, "a"), rec(2, 90.0, "b"),
            rec(3, 102.0, "base", repeat_of=0), rec(4, 148.0, "a", repeat_of=1)]
    got = config_boots(recs, M)
    assert got == {0: {M[0]: [100.0, 102.0]}, 1: {M[0]: [150.0, 148.0]}}  # not 2: one boot
    assert trial_counts(recs) == "3 trials, 0 without a measurement, 2 repeats (error bars)"


def test_when_the_defaults_alone_make_the_front_the_best_others_are_confirmed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured once each, the defaults can dominate every config (a lucky boot): the confirm
    phase then takes the best other feasible configs, to say whether that lead is real."""
    from autotune.tuning import confirm
    from autotune.tuning.confirm import finalists

    recs = [rec(0, 100.0, "base", base=True), rec(1, 90.0, "a"), rec(2, 95.0, "b")]
    monkeypatch.setattr(confirm, "records", lambda _st: recs)
    monkeypatch.setattr(confirm, "front", lambda _st: recs[:1])
    cfg = SimpleNamespace(metric_names=lambda: M,
                          objectives=[SimpleNamespace(direction="maximize")])
    assert finalists(None, cfg, 1) == (0, [2])  # type: ignore[arg-type]
    assert finalists(None, cfg, 2) == (0, [2, 1])  # type: ignore[arg-type]
    monkeypatch.setattr(confirm, "records", lambda _st: recs[:1])
    with pytest.raises(Exception, match="no feasible config other than the baseline"):
        finalists(None, cfg, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(("flag", "complete", "pooled", "runs", "said"), [
    (True, True, False, True, ""),
    (True, False, False, False, "the study is not complete"),
    (True, True, True, False, "workers ran it"),
    (False, True, False, False, "--no-confirm"),
])
def test_a_study_confirms_now_or_says_its_gains_are_one_measurement(
        monkeypatch: pytest.MonkeyPatch, flag: bool, complete: bool, pooled: bool, runs: bool,
        said: str) -> None:
    from pathlib import Path

    from autotune.session.confirm import confirm_now
    from autotune.tuning import confirm

    monkeypatch.setattr(confirm, "records", lambda _st: [])
    now, note = confirm_now(None, _cfg(), flag, complete=complete,  # type: ignore[arg-type]
                            pooled=pooled, config_path=Path("s.yaml"))
    assert (now is not None) is runs
    if not runs:
        text = " ".join(note.split())
        assert said in text and "every gain above is one measurement" in text
        assert "`autotune confirm --config s.yaml`" in text


def test_the_confirm_phase_says_which_finalists_beat_the_defaults_and_picks_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The README demo's confirm once recommended a finalist 17.6% below the defaults (not
    significant either way), because its boots were the least spread. The confirm phase now
    only says which finalists are better beyond the noise on the first objective; the study
    summary recommends, over every objective (tests/unit/tuning/test_summary.py)."""
    from autotune.outputs.tables import confirm_lines
    from autotune.tuning import confirm

    c = SimpleNamespace(metric_names=lambda: ["total_token_throughput"],
                        objectives=[SimpleNamespace(direction="maximize")])
    noisy = {0: [5908.7, 4365.2, 6420.2], 1: [6063.3, 2741.0, 7439.7],
             5: [4867.1, 4437.6, 5069.0]}  # the demo's boots
    monkeypatch.setattr(confirm, "confirm_samples", lambda _st, _m: noisy)
    res = confirm.summarize(None, c, 0, [1, 5], 2)  # type: ignore[arg-type]
    assert res.by_point_estimate == 1 and not any(r.survives for r in res.configs.values())
    text = " ".join(" ".join(confirm_lines(res)).split())
    assert "trial 1: first pass" in text and "within the noise" in text
    assert "on total_token_throughput's medians alone, the pick would be trial 1" in text
    assert "recommended" not in text  # the study summary's deploy: line says it, once
    clear = {0: [100.0, 101.0, 99.0], 1: [130.0, 150.0, 110.0], 2: [120.0, 121.0, 119.0]}
    monkeypatch.setattr(confirm, "confirm_samples", lambda _st, _m: clear)
    res = confirm.summarize(None, c, 0, [1, 2], 2)  # type: ignore[arg-type]
    assert res.by_point_estimate == 1
    assert [n for n, r in res.configs.items() if r.survives] == [2]  # 1 spreads too wide
    # the README demo on this machine: both finalists about half the defaults. The point
    # estimate keeps the defaults too; the text must not name a finalist as its pick
    worse = {0: [11788.4, 11804.8, 13071.7], 1: [6021.9, 11658.9, 3323.9],
             4: [5457.6, 5813.1, 5526.8]}
    monkeypatch.setattr(confirm, "confirm_samples", lambda _st, _m: worse)
    res = confirm.summarize(None, c, 0, [1, 4], 2)  # type: ignore[arg-type]
    assert res.by_point_estimate == 0 and not any(r.survives for r in res.configs.values())
    text = " ".join(" ".join(confirm_lines(res)).split())
    assert "the pick would be trial 0" in text and "recommended" not in text


def test_an_early_stopped_capacity_pools_only_where_the_config_has_no_full_measurement(
        ) -> None:
    """A capacity search stopped early below the incumbent gives a lower bound. A config the
    sampler drew twice, once stopped early (40 and up) and once measured in full (60), reads
    its full measurement; a config with only a bound keeps it."""
    from autotune.measure.capacity import EARLY_STOP

    def cap(number: int, value: float, key: str, early: bool = False, **kw: Any
            ) -> TrialRecord:
        import dataclasses

        r = rec(number, value, key, **kw)
        facts = dataclasses.replace(r.facts, capacity={
            "stopped": f"{EARLY_STOP}'s 80: failed at 50" if early else None})
        return dataclasses.replace(r, facts=facts)

    recs = [cap(0, 50.0, "base", base=True), cap(1, 80.0, "a"), cap(2, 40.0, "b", early=True),
            cap(3, 60.0, "b"), cap(4, 30.0, "c", early=True)]
    assert recs[2].bound_only and not recs[3].bound_only
    gains = config_gains(recs, M)
    assert gains[2]["total_token_throughput"].gain == pytest.approx(0.2)  # 60, not [40, 60]
    assert gains[2]["total_token_throughput"].n == 1
    assert gains[4]["total_token_throughput"].gain == pytest.approx(-0.4)  # its bound


def test_an_early_stopped_capacity_reads_as_a_lower_bound_in_the_tables(tmp_path: Any) -> None:
    """The study's table, its live lines and the report print a bound as "≥40.00, stopped early",
    with no change against the baseline (a bound's -20% would read as a measured loss)."""
    import dataclasses

    from rich.console import Console

    from autotune.measure.capacity import EARLY_STOP
    from autotune.outputs.tables import trials_table, value_text

    base = rec(0, 50.0, "base", base=True)
    early = rec(1, 40.0, "b")
    early = dataclasses.replace(early, values={"capacity": 40.0}, facts=dataclasses.replace(
        early.facts, capacity={"stopped": f"{EARLY_STOP}'s 80: failed at 80"}))
    full = dataclasses.replace(rec(2, 60.0, "c"), values={"capacity": 60.0})
    assert value_text(early, "capacity", 40.0, None) == "≥40.00, stopped early"
    assert value_text(full, "capacity", 60.0, None) == "60.00"
    from tests.fakes import study_cfg, summary_of

    recs = [dataclasses.replace(base, values={"capacity": 50.0}), early, full]
    capacity = {"capacity": {"axis": "concurrency", "low": 1, "high": 64},
                "slos": [{"metric": "p99_ttft_ms", "max": 2000}]}
    summary = summary_of(recs, tmp_path, [("capacity", "maximize")], **capacity)
    out = Console(width=200, record=True)
    out.print(trials_table(summary, study_cfg(tmp_path, [("capacity", "maximize")], **capacity),
                           width=200))  # not the output console's: COLUMNS differs by runner
    text = out.export_text()
    assert "≥40.00, stopped early" in text and "-20.0%" not in text
    assert "60.00 (+20.0%, one measurement)" in text
    # and the report's Markdown
    from autotune.outputs.report import trials_markdown

    md = "\n".join(trials_markdown(recs, summary))
    assert "| ≥40.0 | stopped early |" in md and "-20.0%" not in md


def test_a_pooled_change_is_shown_beside_the_geometric_mean_it_is_of() -> None:
    """The CPU demo's table showed a repeat's own 9,242.72, above the baseline's median, beside
    the config's pooled -45.1%: the config's geometric mean over its boots, which the change
    is of (stats.gain_ci), now stands beside the change."""
    from autotune.measure.stats import gain_ci
    from autotune.outputs.tables import value_text
    from autotune.tuning.record import Status, TrialFacts, TrialRecord

    r = TrialRecord(number=7, status=Status.OK, facts=TrialFacts(), params={},
                    values={"total_token_throughput": 9242.72})
    g = gain_ci([9242.72, 4000.0, 4540.0], [8268.23, 7000.0, 13517.94])
    text = value_text(r, "total_token_throughput", 9242.72, g)
    assert text.startswith("9,242.72; geo. mean 5,516.18 (") and text.endswith(", 3 boots)")
    assert g.value is not None and g.base_value is not None
    assert 1 + g.gain == pytest.approx(g.value / g.base_value)
    one = gain_ci([9242.72], [8268.23])
    assert value_text(r, "total_token_throughput", 9242.72, one) == \
        "9,242.72 (+11.8%, one measurement)"


def test_confirm_json_round_trips_as_types() -> None:
    """confirm.json is read back (report) as the same typed rows the study wrote."""
    from autotune.measure.stats import gain_ci, median_ci
    from autotune.tuning.confirm import ConfirmResult, ConfirmRow

    base, best = [100.0, 104.0, 98.0], [130.0, 128.0, 133.0]
    g = gain_ci(best, base)
    res = ConfirmResult("capacity", 3, 0, 0.03, True, {
        0: ConfirmRow(base, *median_ci(base)),
        5: ConfirmRow(best, *median_ci(best), g, True)})
    back = ConfirmResult.from_json(res.to_json())
    assert back.configs[5].text == res.configs[5].text and back.configs[5].survives
    assert back.configs[0].gain is None and back.configs[0].text == ""
    assert back.to_json() == res.to_json()
