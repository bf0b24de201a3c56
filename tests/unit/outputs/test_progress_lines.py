"""Progress where output is not a terminal (a log file, CI, nohup): one timestamped line per
phase as it starts, with the time into the trial and what a trial took so far; on a terminal
the same text goes to the bar only."""

from __future__ import annotations

import re

import pytest

from autotune.outputs import console as console_mod
from autotune.outputs.console import PhaseLines, clock


def test_a_non_terminal_gets_one_line_per_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(console_mod.time, "monotonic", lambda: now[0])
    lines = PhaseLines(terminal=False)
    with console_mod.console.capture() as cap:
        lines.phase("trial 3: booting", 3, 340.0)
        now[0] += 75
        lines.phase("trial 3: booting", 3, 340.0)  # the same phase again: no new line
        lines.phase("trial 3: load 64 (warming, window 1)", 3, 340.0)
        now[0] += 30
        lines.phase("certify: boots 2 of trial 3 and 2 of the defaults")
    got = cap.get().splitlines()
    assert len(got) == 3, got
    assert re.fullmatch(r"\d\d:\d\d:\d\d trial 3: booting \[0:00 of ~5:40\]", got[0])
    assert got[1].endswith("trial 3: load 64 (warming, window 1) [1:15 of ~5:40]")
    assert got[2].endswith("certify: boots 2 of trial 3 and 2 of the defaults")


def test_a_terminal_gets_a_moving_clock_on_its_bar_and_no_lines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [50.0]
    monkeypatch.setattr(console_mod.time, "monotonic", lambda: now[0])
    lines = PhaseLines(terminal=True)
    with console_mod.console.capture() as cap:
        since = lines.phase("trial 0: booting", 0, 340.0)
    assert cap.get() == "" and since == 50.0
    progress = console_mod.progress_bar()
    task = progress.add_task("trial 0: booting", since=since, typical=340.0)
    clock_column = next(c for c in progress.columns if isinstance(c, console_mod.PhaseClock))
    now[0] += 151  # the clock moves while the phase does not change
    assert clock_column.render(progress.tasks[task]).plain == "[2:31 of ~5:40]"


def test_clock() -> None:
    assert (clock(5), clock(340), clock(3725)) == ("0:05", "5:40", "1:02:05")
