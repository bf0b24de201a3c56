"""The reference check (autotune/measure/verify.py): the verdict rule, a rate judged on the
median of its samples, the rates alternating with fresh seeds, both axes (no server, no vLLM:
the reference's runs are replaced by their verdicts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.config.workload import ProfileConfig, parse_slo
from autotune.errors import ConfigError
from autotune.measure import verify as v

SLOS = [parse_slo("p99_ttft_ms<=2000"), parse_slo("p99_tpot_ms<=60")]


def test_meets_within_every_slo() -> None:
    assert v.judge({"p99_ttft_ms": 1999.0, "p99_tpot_ms": 60.0, "completed": 480}, SLOS,
                   480) == []


def test_misses_name_the_metric_and_failed_requests() -> None:
    misses = v.judge({"p99_ttft_ms": 150.0, "p99_tpot_ms": 66.6, "completed": 470}, SLOS, 480)
    assert misses[0].startswith("p99_tpot_ms 66.6") and "10 of 480 requests failed" in misses[1]


def test_an_slo_the_reference_does_not_report_names_it() -> None:
    with pytest.raises(ConfigError, match="reports no p99_e2el_ms"):
        v.judge({"p99_ttft_ms": 1.0}, [parse_slo("p99_e2el_ms<=9")], 1)


def test_runs_are_sized_as_the_search_sizes_a_point() -> None:
    rate = v.Target(23.82, "rate", 0.1, 200, 20.0)
    assert rate.requests_at(23.82) == 477 and rate.requests_at(4.0) == 200
    assert rate.above() == pytest.approx(26.202)
    slots = v.Target(9.0, "concurrency", 0.1, 100, 2.0)
    assert slots.requests_at(9.0) == 100 and slots.above() == 10.0
    assert v.Target(4.0, "concurrency", 0.1, 1, 2.0).above() == 5.0  # 4.4: a whole slot up
    # the search's failing load was at most C x 1.1 in whole slots (50 x 1.1 is 55.0000...01)
    assert [v.Target(c, "concurrency", 0.1, 1, 2.0).above() for c in (50, 100)] == [55, 110]
    assert v.Target(32.0, "concurrency", 0.3, 1, 2.0).above() == 41.0


def test_a_rate_is_judged_on_the_median_of_its_samples() -> None:
    """One sample's p99 TPOT at a fixed rate spread 30-66% of the rate's median on the H100 MoE
    (docs/results/warm-server-h100): a rate is judged on the median over fresh samples, and a
    failed request in any sample is a miss."""
    def sample(tpot: float, completed: int = 100) -> v.RateCheck:
        m = {"p99_ttft_ms": 400.0, "p99_tpot_ms": tpot, "completed": completed}
        misses = v.judge(m, SLOS, 100)
        return v.RateCheck("C", 44.0, 100, 0, m, misses, "misses" if misses else "meets")

    one_bad = [sample(42.7), sample(66.3), sample(36.2), sample(50.9)]  # the MoE at 44 req/s
    p = v.pooled("C", 44.0, one_bad, SLOS)
    assert p["verdict"] == "meets" and p["metrics"]["p99_tpot_ms"] == pytest.approx(46.8)
    assert p["meets_share"] == 0.75 and len(p["samples"]) == 4
    failed = v.pooled("C", 44.0, [sample(40.0), sample(41.0, completed=98)], SLOS)
    assert failed["verdict"] == "misses" and "2 of 200 requests failed" in failed["misses"][0]


def _fake(seen: list[tuple[str, float, int, int]], tpot_above: float):
    def fake(ref: v.Reference, target: v.Target, slos: object, label: str, load: float,
             seed: int, out_dir: Path, n: int | None = None) -> v.RateCheck:
        n = n or target.requests_at(load)
        seen.append((label, load, seed, n))
        tpot = 50.0 if label in ("C", "") else tpot_above
        m = {"p99_ttft_ms": 1.0, "p99_tpot_ms": tpot, "completed": n}
        misses = v.judge(m, SLOS, n)
        return v.RateCheck(label, load, n, seed, m, misses, "misses" if misses else "meets")
    return fake


REF = v.Reference(["vllm"], "http://x", "m", "m", ProfileConfig(name="random"))


def test_samples_alternate_the_rates_with_fresh_seeds(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, float, int, int]] = []
    monkeypatch.setattr(v, "check_rate", _fake(seen, 70.0))
    doc = v.verify(REF, v.Target(10.0, "rate", 0.1, 10, 20.0), SLOS, 3, tmp_path, warmup=5)
    assert doc["verdicts_agree"] and [r["samples_n"] for r in doc["rates"]] == [3, 3]
    assert seen[0][0] == "" and seen[0][3] == 5 and doc["warmup"]["num_prompts"] == 5
    measured = seen[1:]
    assert len({s for _, _, s, _ in measured}) == 6  # a fresh request sample each run
    assert {lab for lab, *_ in measured[:2]} == {"C", "C x 1.1"}  # both rates in each round
    assert {n for *_, n in measured} == {200, 220}  # 20 s of arrivals at 10 and 11 req/s
    assert v.lines(doc)[-1].startswith("the reference agrees")


def test_a_capacity_the_reference_meets_above_is_called_low(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, float, int, int]] = []
    monkeypatch.setattr(v, "check_rate", _fake(seen, 55.0))
    doc = v.verify(REF, v.Target(8.0, "concurrency", 0.1, 10, 2.0), SLOS, 1, tmp_path,
                   warmup=0)
    assert not doc["verdicts_agree"] and "warmup" not in doc
    assert [r["rate"] for r in doc["rates"]] == [8.0, 9.0]
    assert "DISAGREES" in v.lines(doc)[-1] and "the capacity is low" in v.lines(doc)[-1]
    assert "in flight" in v.lines(doc)[0]


def test_a_disagreement_decided_by_split_samples_says_it_is_inside_their_spread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The MoE defaults on an H100 (2026-11-27, reference_check.moe_defaults): p99 TPOT 50.3,
    64.0, 47.9 ms at C and 49.4, 54.0, 70.5 at C x 1.1, 60 ms allowed. The median meets above
    C, so the check still disagrees, and it says that the samples split there; a unanimous
    wrong side says nothing more."""
    values = {"C": [50.3, 64.0, 47.9], "C x 1.1": [49.4, 54.0, 70.5], "": [49.8]}

    def fake(ref: v.Reference, target: v.Target, slos: object, label: str, load: float,
             seed: int, out_dir: Path, n: int | None = None) -> v.RateCheck:
        m = {"p99_ttft_ms": 300.0, "p99_tpot_ms": values[label].pop(0), "completed": 100}
        misses = v.judge(m, SLOS, 100)
        return v.RateCheck(label, load, 100, seed, m, misses, "misses" if misses else "meets")

    monkeypatch.setattr(v, "check_rate", fake)
    doc = v.verify(REF, v.Target(24.95, "rate", 0.1, 10, 20.0), SLOS, 3, tmp_path)
    assert not doc["verdicts_agree"] and doc["split"] == ["C x 1.1"]
    out = v.lines(doc)
    assert "the capacity is low" in out[-2]
    assert out[-1].startswith("  at C x 1.1 its samples split (67% of 3 meet)")
    seen: list[tuple[str, float, int, int]] = []
    monkeypatch.setattr(v, "check_rate", _fake(seen, 55.0))  # every sample meets above C
    doc = v.verify(REF, v.Target(8.0, "rate", 0.1, 10, 2.0), SLOS, 3, tmp_path, warmup=0)
    assert doc["split"] == [] and "split" not in " ".join(v.lines(doc))
    # a miss at C from a failed request is no spread of a figure: not called a split
    values.update({"C": [40.0, 41.0, 42.0], "C x 1.1": [70.0, 71.0, 72.0], "": [40.0]})
    lost = iter([99, 100, 100])

    def failing(ref: v.Reference, target: v.Target, slos: object, label: str, load: float,
                seed: int, out_dir: Path, n: int | None = None) -> v.RateCheck:
        m = {"p99_ttft_ms": 300.0, "p99_tpot_ms": values[label].pop(0),
             "completed": next(lost) if label == "C" else 100}
        misses = v.judge(m, SLOS, 100)
        return v.RateCheck(label, load, 100, seed, m, misses, "misses" if misses else "meets")

    monkeypatch.setattr(v, "check_rate", failing)
    doc = v.verify(REF, v.Target(24.95, "rate", 0.1, 10, 20.0), SLOS, 3, tmp_path)
    c = doc["rates"][0]
    assert c["verdict"] == "misses" and 0 < c["meets_share"] < 1 and c["failed"] == 1
    assert doc["split"] == []


def test_nothing_to_check_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="capacity 0: nothing to check"):
        v.verify(REF, v.Target(0.0, "rate", 0.1, 10, 20.0), SLOS, 1, tmp_path)


def test_a_capacity_at_the_searchs_high_end_is_checked_at_c_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The search never measured above `high`: C is a lower bound, and meeting at C is all
    the reference can confirm."""
    seen: list[tuple[str, float, int, int]] = []
    monkeypatch.setattr(v, "check_rate", _fake(seen, 55.0))
    doc = v.verify(REF, v.Target(8.0, "concurrency", 0.1, 10, 2.0), SLOS, 2, tmp_path,
                   warmup=0, ceiling=True)
    assert doc["verdicts_agree"] and [r["rate"] for r in doc["rates"]] == [8.0]
    assert {lab for lab, *_ in seen} == {"C"} and "lower bound" in doc["above"]
    assert v.lines(doc)[-1].startswith("the reference agrees: it meets the SLOs")


def test_a_reference_reading_off_the_servers_own_tpot_is_said() -> None:
    """vLLM's per-request TPOT histogram over the run is the arbiter of a client's TPOT: the
    reference reading 30% under it is named (its late reads on 2 busy cores)."""
    def doc(own: float) -> dict[str, object]:
        rate = {"label": "C", "rate": 32.0, "samples_n": 1, "meets_share": 1.0, "misses": [],
                "verdict": "meets", "metrics": {"mean_tpot_ms": 6.9, "p99_tpot_ms": 8.3},
                "server": {"server_mean_tpot_ms": own}}
        return {"axis": "concurrency", "tolerance": 0.1, "slo_metrics": ["mean_tpot_ms"],
                "verdicts_agree": True, "rates": [rate, rate | {"label": "C x 1.1",
                                                                  "verdict": "misses"}]}

    out = v.lines(doc(9.9))
    assert "mean_tpot_ms 6.9, p99_tpot_ms 8.3" in out[0]
    assert "the server's own (/metrics) 9.9: -30%" in out[1]
    assert len(v.lines(doc(7.2))) == 3  # within 15%: nothing said


JIT = ("(EngineCore pid=1322) WARNING 11-25 20:43:14 [jit_monitor.py:135] Triton kernel JIT "
       "compilation during inference: fused_moe_kernel. This causes a latency spike\n")


def test_a_run_sets_its_load_on_its_axis_and_reruns_over_a_kernel_compiling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """check_rate with the reference and /metrics replaced: the load goes to request_rate or
    max_concurrency, the SLOs' own figures are kept, a run whose span of the server's log holds
    a JIT line is run again, and a failed scrape leaves the server's figures out (it would read
    the server's whole life as the run's)."""
    from autotune.measure.reference import ReferenceResult

    log = tmp_path / "server.log"
    log.write_text("")
    profiles: list[ProfileConfig] = []
    scrapes = iter([{}, {}, _metrics(10, 0.05), _metrics(30, 0.25), _metrics(30, 0.25),
                    _metrics(40, 0.35)])

    def fake_ref(vllm: object, url: str, model: str, tok: str, profile: ProfileConfig,
                 out: Path) -> ReferenceResult:
        profiles.append(profile)
        if len(profiles) == 2:  # the rate run's first attempt: a kernel compiles
            with log.open("a") as f:
                f.write(JIT)
        return ReferenceResult({"p99_ttft_ms": 10.0, "median_ttft_ms": 9.0, "p99_tpot_ms": 5.0,
                                "completed": float(profile.num_prompts), "itl_x": 1.0}, 0, 0)

    monkeypatch.setattr(v, "run_reference", fake_ref)
    monkeypatch.setattr(v, "scrape_url", lambda url: next(scrapes))
    ref = v.Reference(["vllm"], "http://x", "m", "m", ProfileConfig(name="random"), log)
    slos = [*SLOS, parse_slo("median_ttft_ms<=50")]
    slots = v.check_rate(ref, v.Target(8.0, "concurrency", 0.1, 10, 2.0), slos, "C", 8.0, 3,
                         tmp_path)
    assert profiles[0].max_concurrency == 8 and profiles[0].num_prompts == 16
    assert slots.server == {} and slots.verdict == "meets"  # the scrape before it failed
    assert slots.metrics["median_ttft_ms"] == 9.0 and "itl_x" not in slots.metrics
    rate = v.check_rate(ref, v.Target(5.0, "rate", 0.1, 10, 20.0), slos, "C", 5.0, 4, tmp_path)
    assert profiles[1].request_rate == 5.0 and profiles[1].num_prompts == 100
    assert rate.jit_remeasured and rate.jit_events == 0 and len(profiles) == 3
    assert rate.server["server_mean_tpot_ms"] == pytest.approx(10.0)  # 0.1 s over 10 requests


def test_a_trace_run_sends_a_window_as_vllms_timed_trace_reads_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the speedup axis each reference run writes its own window (sized as a capacity
    point: requests_per_point, min_duration_s of compressed arrivals) and `vllm bench serve`
    replays it with the timeline divided by the speed-up."""
    import json

    from autotune.load.trace import Trace, TraceEntry
    from autotune.measure.reference import ReferenceResult, reference_argv

    trace = Trace(tuple(TraceEntry(float(i), 20, 4, (0, 1 + i)) for i in range(50)), "t",
                  16, 50)
    profiles: list[ProfileConfig] = []

    def fake_ref(vllm: object, url: str, model: str, tok: str, profile: ProfileConfig,
                 out: Path) -> ReferenceResult:
        profiles.append(profile)
        return ReferenceResult({"p99_ttft_ms": 10.0, "p99_tpot_ms": 5.0,
                                "completed": float(profile.num_prompts)}, 0, 0)

    monkeypatch.setattr(v, "run_reference", fake_ref)
    monkeypatch.setattr(v, "scrape_url", lambda url: {})
    ref = v.Reference(["vllm"], "http://x", "m", "m", ProfileConfig(
        name="trace", path="t.jsonl", block_size=16), trace=trace)
    target = v.Target(2.0, "speedup", 0.1, 10, 12.0)
    assert target.above() == pytest.approx(2.2)
    c = v.check_rate(ref, target, SLOS, "C", 2.0, 5, tmp_path)
    (p,) = profiles
    rows = [json.loads(x) for x in Path(str(p.path)).read_text().splitlines()]
    assert p.speedup == 2.0 and p.num_prompts == len(rows) == c.num_prompts == 25
    assert rows[-1]["timestamp"] - rows[0]["timestamp"] == 24.0  # 12 s once halved
    argv = " ".join(reference_argv(["vllm"], "u", "m", "t", p, tmp_path / "r.json"))
    assert (f"--dataset-name timed_trace --dataset-path {p.path} "
            "--timed-trace-chunk-hash-size 16 --timed-trace-sec-multiplier 0.5") in argv
    assert "--request-rate" not in argv and "--max-concurrency" not in argv


def _metrics(n: int, tpot_s: float) -> dict[str, float]:
    return {"vllm:request_time_per_output_token_seconds_count": float(n),
            "vllm:request_time_per_output_token_seconds_sum": tpot_s}


def test_a_profile_or_slo_the_reference_cannot_judge_is_refused_before_a_boot() -> None:
    v.can_judge(ProfileConfig(name="throughput"), [*SLOS, parse_slo("p90_e2el_ms<=9")])
    with pytest.raises(ConfigError, match="profile.name: dataset"):
        v.can_judge(ProfileConfig(name="dataset", path="x.jsonl"), SLOS)
    with pytest.raises(ConfigError, match=r"slos\[1\].metric: duration_s is not a figure"):
        v.can_judge(ProfileConfig(name="random"), [SLOS[0], parse_slo("duration_s<=9")])


def test_verify_samples_without_verify_is_a_usage_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "s.yaml").write_text("name: x\n")
    r = subprocess.run([sys.executable, "-m", "autotune", "export", "--config",
                        str(tmp_path / "s.yaml"), "--verify-samples", "2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr  # as --repeats without --validate
    assert "--verify-samples: counts the samples of --verify; add --verify" in r.stdout + r.stderr


def test_each_run_is_said_as_it_lands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`export --verify` prints each sample's verdict as it lands (a check takes minutes)."""
    seen: list[tuple[str, float, int, int]] = []
    said: list[str] = []
    monkeypatch.setattr(v, "check_rate", _fake(seen, 70.0))
    v.verify(REF, v.Target(10.0, "rate", 0.1, 10, 20.0), SLOS, 2, tmp_path, warmup=5,
             on_run=said.append)
    assert len(said) == len(seen) == 5
    assert said[0].startswith("warm-up (not judged) at 10:")
    assert sorted(s.split(":")[0] for s in said[1:]) == [
        "C sample 1/2", "C sample 2/2", "C x 1.1 sample 1/2", "C x 1.1 sample 2/2"]
    assert any("misses at 11" in s and "p99_tpot_ms" in s for s in said)
