"""The study's tables at the width they are read in: 100 columns when piped (issue 35)."""

from pathlib import Path

import pytest
from rich.console import Console

from autotune.outputs.console import WIDTH
from autotune.outputs.tables import trials_table
from autotune.tuning.record import Status, TrialFacts, TrialRecord
from tests.fakes import study_cfg, summary_of

M = ["total_token_throughput", "mean_tpot_ms"]
FLAGS = {"max_num_batched_tokens": 1602, "max_num_seqs": 28, "enable_chunked_prefill": False,
         "enable_prefix_caching": True, "kv_cache_dtype": "fp8", "quantization": None}
CAUSE = ("RuntimeError: _C::static_scaled_fp8_quant() expected at most 0 argument(s) but "
         "received 4 argument(s). Declaration: _C::static_scaled_fp8_quant() -> ()")


def demo_records() -> list[TrialRecord]:
    """The CPU demo's shape: a baseline, a config booted three times (so its cells carry a
    geometric mean and an interval), an infeasible config with vLLM's cause, one measured once."""
    def one(n: int, tok: float, tpot: float, key: str, flags: dict, *, base: bool = False,
            repeat_of: int | None = None) -> TrialRecord:
        facts = TrialFacts(flags_key=key, flags=flags, baseline=base or None,
                           repeat_of=repeat_of, timings={"boot_s": 40.71, "bench_s": 2.75},
                           metrics={"total_token_throughput": tok, "mean_tpot_ms": tpot})
        return TrialRecord(n, Status.OK, facts, {} if base else dict(flags),
                           {"total_token_throughput": tok, "mean_tpot_ms": tpot})

    bad = TrialRecord(2, Status.INFEASIBLE, TrialFacts(flags_key="c", cause=CAUSE,
                                                       failure="ServerBootError",
                                                       timings={"boot_s": 31.09}),
                      {**FLAGS, "quantization": "fp8"}, {})
    return [one(0, 8292.46, 6.69, "base", {}, base=True), one(1, 4590.66, 5.32, "a", FLAGS),
            bad, one(3, 3526.71, 2.11, "d", {**FLAGS, "max_num_seqs": 4}),
            one(4, 9000.26, 5.96, "base", {}, repeat_of=0),
            one(5, 3981.41, 3.97, "a", FLAGS, repeat_of=1),
            one(6, 2974.65, 1.84, "base", {}, repeat_of=0),
            one(7, 4943.76, 4.57, "a", FLAGS, repeat_of=1)]


def test_the_trials_table_fits_100_columns_without_breaking_a_value(tmp_path: Path) -> None:
    summary = summary_of(demo_records(), tmp_path)
    cfg = study_cfg(tmp_path)
    out = Console(width=WIDTH, record=True)
    out.print(trials_table(summary, cfg, title="study cpu-demo", width=WIDTH))
    text = out.export_text()
    lines = text.splitlines()
    assert WIDTH == 100 and max(len(ln) for ln in lines) <= 100
    # headers, numbers and flags stay whole on one line each
    assert "total tok/s" in text and "mean tpot ms" in text and "(vs base)" in text
    for whole in ("8,292.46", "4,590.66", "max_num_batched_tokens=1602", "kv_cache_dtype=fp8",
                  "40.7/2.8", "repeat of trial 1"):
        assert any(whole in ln for ln in lines), whole
    # a flag left to vLLM (None) is not a flag the trial sets
    assert "quantization=None" not in text and "quantization=fp8" in text
    # narrower (pytest exports COLUMNS=80 to its children): folded, never cropped
    narrow = Console(width=80, record=True)
    narrow.print(trials_table(summary, cfg, width=80))
    shown = narrow.export_text()
    folded = "".join(shown.split())
    assert max(len(ln) for ln in shown.splitlines()) <= 80
    assert "static_scaled_fp8_quant" in folded.replace("│", "")
    # a wide terminal gets wide cells: the pooled change on one line
    wide = Console(width=200, record=True)
    wide.print(trials_table(summary, cfg, width=200))
    assert any("3,981.41; geo. mean 4,487.35 (no significant change" in ln
               for ln in wide.export_text().splitlines())
    # the infeasible trial's cause is there, folded in its cell, not cut
    assert "static_scaled_fp8_quant" in text and "infeasible" in text


def test_the_load_points_table_fits_100_columns_with_each_miss_whole_below_it() -> None:
    from autotune.measure.capacity import LoadPoint
    from autotune.outputs.points import miss_lines, points_table

    def pt(load: float, ttft: float, tpot: float, misses: tuple[str, ...]) -> LoadPoint:
        return LoadPoint(load, not misses, misses, {
            "request_throughput": load * 0.6, "total_token_throughput": load * 280.0,
            "p99_ttft_ms": ttft, "p99_tpot_ms": tpot, "p99_send_lag_ms": 2.5}, 40.0,
            missed=tuple(m.split(" ", 1)[0] for m in misses))

    both = ("p99_ttft_ms <= 2000 (got 15,039.5, 95% [14,848.4, 15,136.2])",
            "p99_tpot_ms <= 60 (got 163.5, 95% [159.2, 168.6])")
    points = [pt(64, 542.8, 40.5, ()), pt(128, 15039.5, 163.5, both)]
    out = Console(width=WIDTH, record=True)
    out.print(points_table(points, "rate"))
    text = out.export_text()
    assert max(len(ln) for ln in text.splitlines()) <= 100
    assert "p99 ttft," in text and "15,039.5" in text and "…" not in text
    assert miss_lines(points) == ["  128: " + "; ".join(both)]


def test_a_settled_miss_shows_its_target_not_the_finished_requests_p99() -> None:
    from autotune.measure.capacity import LoadPoint
    from autotune.outputs.points import points_table

    settled = ("p99_ttft_ms <= 2000 (settled after 17.1 s: 32 of 1,440 requests already over "
               "2,000 ms, and 23 put the p99's 95% interval above it)",)
    p = LoadPoint(72, False, settled, {
        "request_throughput": 43.1, "total_token_throughput": 16139.0,
        "p99_ttft_ms": 1651.5, "p99_tpot_ms": 40.9, "p99_send_lag_ms": 2.3}, 20.3,
        settled_s=17.1, missed=("p99_ttft_ms",))
    from autotune.config.workload import SLOConfig

    slos = [SLOConfig(metric="p99_ttft_ms", max=2000), SLOConfig(metric="p99_tpot_ms", max=60)]
    out = Console(width=WIDTH, record=True)
    out.print(points_table([p], "rate", slos))
    text = out.export_text()
    assert "> 2,000" in text and "1,651.5" not in text  # the TTFT cell: what was settled
    assert "40.9" in text and "missed at 17 s" in text  # TPOT, not settled, as measured
    assert "p99 ttft" in text  # the missed column names the settled metric


def test_a_gain_stands_beside_the_baseline_figure_it_divides_by(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 84 item 7: trial 1 read "14,892.71 (+1.9%, one measurement)" beside a defaults
    row whose median, 15,100, is higher: the gain is of the geometric mean of the defaults'
    boots (14,610.58), which no row showed. The baseline row now shows that figure, labelled,
    and the gain divides by it; the live line prints each trial's cells as the table does, and
    the report and MLflow's gain column show the same figure."""
    from types import SimpleNamespace

    from autotune.outputs import tables
    from autotune.outputs.mlflow_view import gain_tag
    from autotune.outputs.report import trials_markdown
    from autotune.outputs.tables import StudyView

    tok = "total_token_throughput"

    def one(n: int, v: float, key: str, repeat_of: int | None = None) -> TrialRecord:
        base = key == "base"
        facts = TrialFacts(flags_key=key, flags={} if base else {"max_num_seqs": 8},
                           baseline=(base and repeat_of is None) or None, repeat_of=repeat_of,
                           metrics={tok: v, "mean_tpot_ms": 5.0})
        return TrialRecord(n, Status.OK, facts, {} if base else {"max_num_seqs": 8},
                           {tok: v, "mean_tpot_ms": 5.0})

    recs = [one(0, 15300.0, "base"), one(1, 14892.71, "a"), one(2, 13500.0, "base", 0),
            one(3, 15100.0, "base", 0)]
    summary = summary_of(recs, tmp_path)
    cfg = study_cfg(tmp_path)
    shown_base = "geo. mean 14,610.58 of 3 boots"  # not the median, 15,100.00
    g = summary.gains[1][tok]
    assert f"{g.gain * 100:+.1f}%" == f"{(14892.71 / 14610.58 - 1) * 100:+.1f}%" == "+1.9%"
    table = trials_table(summary, cfg, width=300)
    cells = {int(n.rstrip("★[/bold]")): c for n, c in zip(table.columns[0].cells,
                                                           table.columns[2].cells, strict=True)}
    assert cells[0] == f"15,300.00; {shown_base}" and cells[3] == f"15,100.00; {shown_base}"
    assert cells[1] == "14,892.71 (+1.9%, one measurement)"
    # the live line of each trial says what its row says
    live = Console(width=300, record=True)
    monkeypatch.setattr(tables, "console", live)
    view = StudyView(4, 0, summary.metrics)
    for r in recs:
        view.on_trial(summary, SimpleNamespace(number=r.number, params=r.params))  # type: ignore[arg-type]
    lines = live.export_text().splitlines()
    for r in recs:
        assert f"{tok} {cells[r.number]}," in lines[r.number], (lines[r.number], cells)
    # the report's row of the defaults and MLflow's gain column show the figure too
    md = "\n".join(trials_markdown(recs, summary))
    assert shown_base in md and "+1.9%, one measurement" in md
    assert gain_tag(recs[0], summary) == f"vLLM's defaults; {shown_base}"
    assert gain_tag(recs[1], summary) == "+1.9%, one measurement"
