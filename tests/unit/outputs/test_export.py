"""Export's choice of a trial from the front."""

import optuna

from autotune.tuning.front import front
from autotune.tuning.summary import knee


def test_knee_picks_the_balanced_point() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    for v in ([100.0, 100.0], [90.0, 20.0], [10.0, 10.0]):
        study.add_trial(optuna.trial.create_trial(values=v))
    study.set_metric_names(["a", "b"])
    picked = knee(front(study), ["a", "b"], ["maximize", "minimize"])
    assert picked.values == {"a": 90.0, "b": 20.0}


def test_knee_of_two_trials_weighs_relative_changes() -> None:
    """The H100 suite study's front (docs/results/suite-h100): trial 1 leads throughput by 0.2%,
    trial 5 has 23% lower TPOT. Scaled to [0, 1] over the front, both sat one unit from utopia
    and the first won the tie; by relative change trial 5 is the knee."""
    study = optuna.create_study(directions=["maximize", "minimize"])
    for v in ([1.1242, 0.8577], [1.1222, 0.6592]):
        study.add_trial(optuna.trial.create_trial(values=v))
    study.set_metric_names(["a", "b"])
    assert knee(front(study), ["a", "b"], ["maximize", "minimize"]).number == 1


def test_knee_falls_back_to_the_front_scale_for_values_at_or_below_zero() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    for v in ([0.0, 10.0], [5.0, 20.0], [10.0, 100.0]):
        study.add_trial(optuna.trial.create_trial(values=v))
    study.set_metric_names(["a", "b"])
    assert knee(front(study), ["a", "b"], ["maximize", "minimize"]).values == {"a": 5.0,
                                                                               "b": 20.0}


def _study_of(rows: list[tuple[dict, list[float], bool]]) -> optuna.Study:
    from autotune.tuning.record import TrialFacts

    st = optuna.create_study(directions=["maximize", "minimize"])
    st.set_metric_names(["total_token_throughput", "mean_tpot_ms"])
    for flags, values, base in rows:
        facts = TrialFacts(flags=flags, baseline=base or None, metrics={
            "total_token_throughput": values[0], "mean_tpot_ms": values[1]})
        st.add_trial(optuna.trial.create_trial(values=values, user_attrs=facts.to_attrs()))
    return st


def test_the_end_of_a_study_says_what_to_deploy(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Without a confirm phase: the config export picks by default, its serve line, and its
    gain over vLLM's defaults marked as one measurement; when the defaults are that pick, it
    says so and gives their line."""
    from pathlib import Path

    from autotune.config.study import StudyConfig
    from autotune.outputs.ending import deploy_lines
    from autotune.tuning.summary import summarize

    cfg = StudyConfig.model_validate({
        "name": "t", "server": {"model": "/m", "executable": ["vllm"],
                                "args": {"load_format": "dummy"}},
        "profile": {"name": "random", "input_len": 8, "output_len": 4, "num_prompts": 2},
        "search_space": "cpu-demo", "workdir": str(tmp_path)})
    st = _study_of([({}, [100.0, 20.0], True), ({"max_num_seqs": 8}, [150.0, 18.0], False)])
    lines = deploy_lines(summarize(st, cfg), cfg, Path("s.yaml"))
    assert lines[0] == ("deploy: trial 1: total_token_throughput +50.0% (one measurement) over "
                        "vLLM's defaults (the knee of the front of pooled values; one boot "
                        "each unless repeated)")
    assert lines[1].startswith("  ") and lines[1].endswith(
        "vllm serve /m --load-format dummy --max-num-seqs 8")
    assert lines[2].startswith("  shape only: the servers loaded random weights")  # dummy
    assert lines[3] == "full export (YAML, bench line, sizing): autotune export --config s.yaml"
    st = _study_of([({}, [100.0, 20.0], True), ({"max_num_seqs": 8}, [90.0, 25.0], False)])
    lines = deploy_lines(summarize(st, cfg), cfg, Path("s.yaml"))
    assert lines[0].startswith("deploy: vLLM's defaults (trial 0) (")
    assert lines[1].endswith(" vllm serve /m --load-format dummy")


def test_export_picks_on_the_median_of_a_configs_boots_not_its_luckiest(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The CPU demo: the defaults read 13,518 tok/s on their first boot and 8,268 as the median
    of three; a config at about 9,000 over three boots is the throughput pick, and its value
    is that median."""
    from autotune.config.study import StudyConfig
    from autotune.tuning.record import TrialFacts
    from autotune.tuning.summary import choose, summarize

    cfg = StudyConfig.model_validate({
        "name": "t", "server": {"model": "/m", "executable": ["vllm"]},
        "profile": {"name": "random", "input_len": 8, "output_len": 4, "num_prompts": 2},
        "search_space": "cpu-demo", "workdir": str(tmp_path)})
    st = optuna.create_study(directions=["maximize", "minimize"])
    st.set_metric_names(["total_token_throughput", "mean_tpot_ms"])
    rows = [("{}", None, 13518.0), ("a", None, 9000.0), ("{}", 0, 8268.0), ("{}", 0, 4602.0),
            ("a", 1, 9100.0), ("a", 1, 8900.0)]
    for key, of, v in rows:
        facts = TrialFacts(flags={} if key == "{}" else {"max_num_seqs": 8}, flags_key=key,
                           baseline=True if key == "{}" else None, repeat_of=of,
                           metrics={"total_token_throughput": v, "mean_tpot_ms": 20.0})
        st.add_trial(optuna.trial.create_trial(values=[v, 20.0], user_attrs=facts.to_attrs()))
    summary = summarize(st, cfg)
    pick = choose(summary, cfg, "throughput")
    assert pick.number == 1 and pick.values["total_token_throughput"] == 9000.0
    assert sorted(summary.boots[1]["total_token_throughput"]) == [8900.0, 9000.0, 9100.0]
    assert choose(summary, cfg).number == 1  # the recommendation: the knee, on pooled values


def test_a_cause_is_cut_at_a_sentence_not_mid_value() -> None:
    """The CPU demo printed an infeasible trial's cause cut at "-> (" (150 characters)."""
    from autotune.outputs.console import short_cause

    cause = ("RuntimeError: _C::static_scaled_fp8_quant() expected at most 0 argument(s) but "
             "received 4 argument(s). Declaration: _C::static_scaled_fp8_quant() -> ()")
    assert short_cause(cause, 150) == ("RuntimeError: _C::static_scaled_fp8_quant() expected at "
                                       "most 0 argument(s) but received 4 argument(s). …")
    assert short_cause("short\nsecond line", 150) == "short"
    assert short_cause("a " * 100, 20).endswith(" …") and len(short_cause("a " * 100, 20)) <= 22


def test_speculation_counters_come_from_the_load_else_the_guard_and_are_shown(tmp_path) -> None:
    """Issue 48: a speculating trial's acceptance (vLLM's counters) is read from its measured
    load, or from the quality guard's greedy run where the sampled load drafted nothing; the
    report lists it and export carries it."""
    from autotune.outputs.console import speculation_text
    from autotune.outputs.report import speculation_markdown
    from autotune.tuning.record import Status, TrialFacts, TrialRecord
    from tests.fakes import summary_of

    load = TrialFacts(flags={"speculative_config": "{}"}, server_stats={
        "server_spec_drafts": 120.0, "server_spec_acceptance_rate": 0.47,
        "server_spec_mean_accepted_len": 2.36})
    guard = TrialFacts(flags={"speculative_config": "{}"}, server_stats={
        "server_spec_drafts": 0.0}, quality={"spec_drafts": 40.0, "spec_draft_tokens": 120.0,
                                             "spec_accepted_tokens": 90.0,
                                             "spec_mean_accepted_len": 3.25})
    v = {"total_token_throughput": 1.0, "mean_tpot_ms": 10.0}
    a = TrialRecord(1, Status.OK, load, {}, v)
    b = TrialRecord(2, Status.OK, guard, {}, v)
    plain = TrialRecord(0, Status.OK, TrialFacts(baseline=True), {}, v)
    assert plain.speculation is None
    assert a.speculation == {"source": "measured load", "drafts": 120.0,
                             "acceptance_rate": 0.47, "mean_accepted_length": 2.36}
    assert b.speculation == {"source": "quality guard's greedy run", "drafts": 40.0,
                             "acceptance_rate": 0.75, "mean_accepted_length": 3.25}
    assert speculation_text(a.speculation) == (
        "speculative decoding: 47% of draft tokens accepted, 2.36 tokens a step over 120 drafts "
        "(measured load)")
    md = "\n".join(speculation_markdown([plain, a, b], summary_of([plain, a, b], tmp_path)))
    assert "| 1 | 47.0% | 2.36 | 120 | measured load |" in md
    assert "| 2 | 75.0% | 3.25 | 40 | quality guard's greedy run |" in md
    assert "| 0 |" not in md


def test_a_capacity_trials_speculation_is_summed_over_its_load_points() -> None:
    """Issue 48 on the H100: a capacity trial keeps vLLM's counters per load point, not in
    server_stats, so its acceptance came from the guard's 16 greedy prompts (0.44) although
    its point at 64 had counted 6,223 drafts. The counts are those of that point (trial 1 of
    docs/results/quality/gpu), plus a second point's."""
    from autotune.tuning.record import Status, TrialFacts, TrialRecord

    def point(load: float, drafts: float, tokens: float, accepted: float) -> dict:
        return {"load": load, "passed": True, "metrics": {}, "server": {
            "server_spec_drafts": drafts, "server_spec_draft_tokens": tokens,
            "server_spec_accepted_tokens": accepted, "server_mean_ttft_ms": 49.0}}

    facts = TrialFacts(flags={"speculative_config": "{}"}, capacity={
        "axis": "concurrency", "capacity": 64.0, "points": [
            point(64.0, 6223.0, 18621.0, 8740.0), point(86.0, 1777.0, 5379.0, 2260.0)]},
        quality={"spec_drafts": 65.0, "spec_draft_tokens": 195.0, "spec_accepted_tokens": 86.0})
    spec = TrialRecord(1, Status.OK, facts, {}, {"capacity": 64.0}).speculation
    assert spec == {"source": "measured load", "drafts": 8000.0,
                    "acceptance_rate": 11000.0 / 24000.0,
                    "mean_accepted_length": 1.0 + 11000.0 / 8000.0}


def test_a_capacity_studys_bench_line_runs_at_the_capacity_found(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The profile of a capacity study sets no load (the search sets it per point): its line
    alone sent every request at once (the H100 study of 2026-11-27 printed one for a 99.9 req/s
    capacity). The line runs at C, sized as a point was (>= min_duration_s of arrivals, the
    point's warm-up); on the concurrency axis at C's whole slots; with no capacity met, the
    profile's line."""
    from autotune.config.study import StudyConfig
    from autotune.outputs.export import export
    from autotune.tuning.record import Status, TrialFacts, TrialRecord

    def study(axis: str) -> StudyConfig:
        return StudyConfig.model_validate({
            "name": "c", "server": {"model": "/m", "executable": ["vllm"]},
            "profile": {"name": "random", "input_len": 8, "output_len": 4, "num_prompts": 50},
            "capacity": {"axis": axis, "low": 1, "high": 256, "tolerance": 0.1,
                         "requests_per_point": 200, "min_duration_s": 20, "warmup": 8,
                         "requests_per_slot": 40},
            "slos": [{"metric": "p99_ttft_ms", "max": 2000}],
            "objectives": [{"metric": "capacity", "direction": "maximize"}],
            "search_space": "cpu-demo", "workdir": str(tmp_path)})

    def trial(cap: float) -> TrialRecord:
        return TrialRecord(3, Status.OK, TrialFacts(flags={}, metrics={"capacity": cap}), {},
                           {"capacity": cap})

    res = export(study("rate"), trial(99.9))
    line = res["bench_command"].split()
    assert res["bench_load"] == 99.9
    assert line[line.index("--request-rate") + 1] == "99.9"
    assert line[line.index("--num-prompts") + 1] == "1998"  # 20 s x 99.9 req/s
    assert line[line.index("--num-warmups") + 1] == "8"
    noisy = export(study("rate"), trial(24.950000000000003))["bench_command"].split()
    assert noisy[noisy.index("--request-rate") + 1] == "24.95"  # a bisection's float noise
    low = export(study("rate"), trial(4.0))["bench_command"].split()
    assert low[low.index("--num-prompts") + 1] == "200"  # requests_per_point at least
    conc = export(study("concurrency"), trial(7.6))
    line = conc["bench_command"].split()
    assert conc["bench_load"] == 7.0 and "--request-rate" not in line
    assert line[line.index("--max-concurrency") + 1] == "7"
    assert line[line.index("--num-prompts") + 1] == "280"  # 40 requests a slot
    none = export(study("rate"), trial(0.0))
    assert "bench_load" not in none and "--request-rate" not in none["bench_command"]


def test_a_speedup_studys_bench_line_replays_a_window_of_the_trace(
        tmp_path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    """The line replays a window of the trace from its start with vLLM's timed_trace dataset
    at the capacity's speed-up (its sec multiplier: 1 / C), sized as a point was; the window
    is written beside the export. The end of the study and the report say what C means."""
    import json
    from pathlib import Path

    from autotune.config.study import StudyConfig
    from autotune.outputs.export import export
    from autotune.outputs.tables import capacity_line
    from autotune.tuning.record import Status, TrialFacts, TrialRecord

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i * 500, "input_length": 40,
                                         "output_length": 4, "hash_ids": [0, 1 + i]}) + "\n"
                             for i in range(100)))
    cfg = StudyConfig.model_validate({
        "name": "c", "server": {"model": str(tiny_model), "executable": ["vllm"]},
        "profile": {"name": "trace", "path": str(trace), "time_unit": "ms", "block_size": 32},
        "capacity": {"axis": "speedup", "low": 1, "high": 64, "tolerance": 0.1,
                     "requests_per_point": 10, "min_duration_s": 12, "warmup": 2},
        "slos": [{"metric": "median_ttft_ms", "max": 2000}],
        "objectives": [{"metric": "capacity", "direction": "maximize"}],
        "search_space": "cpu-demo", "workdir": str(tmp_path)})
    rec = TrialRecord(3, Status.OK, TrialFacts(flags={}, metrics={"capacity": 2.5}), {},
                      {"capacity": 2.5})
    res = export(cfg, rec, tmp_path / "out")
    line = res["bench_command"].split()
    assert res["bench_load"] == 2.5 and "bench_note" not in res
    assert line[line.index("--dataset-name") + 1] == "timed_trace"
    assert line[line.index("--timed-trace-sec-multiplier") + 1] == "0.4"
    assert line[line.index("--timed-trace-chunk-hash-size") + 1] == "32"
    window = Path(line[line.index("--dataset-path") + 1])
    rows = [json.loads(x) for x in window.read_text().splitlines()]
    # 12 s at 2.5x: 30 s of the trace's 0.5 s gaps, 61 requests
    assert len(rows) == 61 and line[line.index("--num-prompts") + 1] == "61"
    assert rows[-1]["timestamp"] == 30.0 and window.parent == tmp_path / "out" / f"trial-{rec.number:04d}"
    assert "--request-rate" not in line and "--max-concurrency" not in line
    assert capacity_line(cfg, rec) == ("trial 3 serves your traffic at up to 2.5x its recorded "
                                       "rate within the SLOs (median_ttft_ms <= 2000)")


def test_exports_of_two_configs_keep_both_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 70, item 8: every `export --prefer ...` overwrote the one export/vllm-config.yaml
    the default export had printed. Each trial's files go to a folder of its own."""
    from pathlib import Path

    import yaml

    from autotune.outputs.export import export
    from tests.fakes import study_cfg

    cfg = study_cfg(tmp_path)
    st = _study_of([({}, [100.0, 20.0], True), ({"max_num_seqs": 8}, [150.0, 18.0], False)])
    from autotune.tuning.record import records

    base, other = records(st)
    first = export(cfg, base, tmp_path / "export")
    second = export(cfg, other, tmp_path / "export")
    assert first["config_path"] != second["config_path"]
    assert "max-num-seqs" not in yaml.safe_load(Path(first["config_path"]).read_text())
    assert yaml.safe_load(Path(second["config_path"]).read_text())["max-num-seqs"] == 8
    assert Path(first["config_path"]).parent.name == "trial-0000"
