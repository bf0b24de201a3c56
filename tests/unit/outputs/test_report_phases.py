"""The report's table of each trial's seconds by phase (tuning.spend)."""

from autotune.outputs.report import phases_markdown
from autotune.tuning.record import records
from tests.unit.tuning.test_spend import COLD, OLD, WARM, study


def test_each_trial_by_phase_in_the_report() -> None:
    lines = phases_markdown(records(study((0, 470.0, COLD), (480, 215.0, WARM),
                                          (700, 180.0, OLD))))
    head = ("| # | boot | start | weights | compile | CUDA graphs | kernel warm-up | engine init "
            "| boot (not split) | warm-up | load points | stop | rest | wall s |")
    assert lines[3] == head
    assert lines[5].startswith("| 0 | cold | 56.2 | 3.4 | 26.6 | 5.0 | 96.0 | 3.1 |  | 27.8 | "
                               "242.4 | 0.6 |") and lines[5].endswith(" | 470.0 |")
    assert lines[6].startswith("| 1 | warm | 44.4 |") and lines[6].endswith(" | 215.0 |")
    assert lines[7].startswith("| 2 | warm |  |  |  |  |  |  | 56.6 | 18.0 | 100.0 | 0.7 |")
    assert phases_markdown([]) == []
