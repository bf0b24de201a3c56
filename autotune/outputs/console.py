"""The consoles every command prints to, and what needs no study: a benchmark's metrics table,
the progress of one boot, and how values, metric names, flags and causes are written.

The study's tables and live view are in outputs/tables.py: they read Optuna trials, and
`autotune --help` or `autotune bench` should not load Optuna to print.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from autotune.measure.metrics import BenchMetrics

# piped (CI logs, `| tee`), a line is not broken at 80 columns in the middle of a value
console = Console(stderr=True, soft_wrap=not sys.stderr.isatty())
# piped (CI logs, `| tee`), tables are laid out for 100 columns (or $COLUMNS), the width a
# terminal shows them in, instead of the 80 rich assumes; a terminal uses its own width
WIDTH = 100
out = Console(width=None if sys.stdout.isatty() else int(os.environ.get("COLUMNS") or WIDTH))


def metrics_table(m: BenchMetrics, title: str = "Benchmark") -> Table:
    t = Table(title=title, show_header=True, header_style="bold")
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("successful requests", str(m.completed))
    t.add_row("failed requests", str(m.failed))
    t.add_row("duration (s)", f"{m.duration_s:.2f}")
    t.add_row("total input tokens", str(m.total_input_tokens))
    t.add_row("total output tokens", str(m.total_output_tokens))
    t.add_row("request throughput (req/s)", f"{m.request_throughput:.2f}")
    t.add_row("output throughput (tok/s)", f"{m.output_throughput:.2f}")
    t.add_row("total token throughput (tok/s)", f"{m.total_token_throughput:.2f}")
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")):
        s = getattr(m, f"{name}_ms")
        t.add_row(
            f"{label} ms mean / median / p90 / p99",
            f"{s.mean:.2f} / {s.median:.2f} / {s.p90:.2f} / {s.p99:.2f}",
        )
    return t


class TrialProgress:
    """A phase spinner plus a request bar, for one server's boot and benchmark."""

    def __init__(self, progress: Progress, label: str, total: int) -> None:
        self.p = progress
        self.label = label
        self.task = progress.add_task(f"{label}: starting", total=total)

    def phase(self, name: str) -> None:
        if name == "benchmarking":
            self.p.reset(self.task)
        self.p.update(self.task, description=f"{self.label}: {name}")

    def request_done(self, _rec: Any) -> None:
        self.p.advance(self.task)


def clock(seconds: float) -> str:
    """m:ss (h:mm:ss from an hour)."""
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else \
        f"{s // 60}:{s % 60:02d}"


class PhaseLines:
    """A long run's phases as a user who waits reads them: the time into the current trial and
    what one took so far ("2:31 of ~5:40"), shown on a terminal by the bar's PhaseClock; where
    output is not a terminal (a log, CI, nohup), where the bar shows nothing, one timestamped
    line per phase as it starts."""

    def __init__(self, terminal: bool | None = None) -> None:
        self.terminal = console.is_terminal if terminal is None else terminal
        self.trial: int | None = None
        self.since = time.monotonic()
        self.last = ""

    def phase(self, text: str, trial: int | None = None, typical_s: float | None = None
              ) -> float | None:
        """Say the phase (off a terminal); the time.monotonic() its trial began (None: not a
        trial's phase), for the bar's clock."""
        now = time.monotonic()
        if trial is not None and trial != self.trial:
            self.trial, self.since = trial, now
        if not self.terminal and text != self.last:
            shown = f"{text} {clock_text(now - self.since, typical_s)}" \
                if trial is not None else text
            console.print(f"{time.strftime('%H:%M:%S')} {shown}", highlight=False,
                          soft_wrap=True, markup=False)
        self.last = text
        return self.since if trial is not None else None


def clock_text(into: float, typical_s: float | None) -> str:
    return f"[{clock(into)}" + (f" of ~{clock(typical_s)}]" if typical_s else "]")


class PhaseClock(ProgressColumn):
    """The bar's clock of the current trial: its task's `since` (time.monotonic()) and
    `typical` (seconds a trial took so far) fields, as "[2:31 of ~5:40]"."""

    def render(self, task: Task) -> Text:
        since = task.fields.get("since")
        if since is None:
            return Text("")
        return Text(clock_text(time.monotonic() - since, task.fields.get("typical")),
                    style="dim")


def progress_bar() -> Progress:
    """The one progress display: spinner, what is happening, bar, count, time elapsed."""
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), PhaseClock(),
                    BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                    transient=True)


@contextmanager
def trial_progress(label: str, total: int) -> Iterator[TrialProgress]:
    with progress_bar() as p:
        yield TrialProgress(p, label, total)


def fmt_value(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    if pct:
        return f"{v * 100:+.1f}%"
    return f"{v:,.2f}" if isinstance(v, float) else str(v)


SHORT = {
    "total_token_throughput": "total tok/s",
    "output_throughput": "output tok/s",
    "request_throughput": "req/s",
}


def short_metric(m: str) -> str:
    return SHORT.get(m, m.replace("_ms", " ms").replace("_", " "))


def params_text(params: dict[str, Any]) -> str:
    """The flags a trial sets, as `name=value`: a flag left at None is not passed (vLLM's
    default), so it is not shown; none set reads "(vLLM defaults)"."""
    # a stepped float reads 0.85, not 0.8500000000000001 (as `SearchSpace.to_flags` passes it)
    return " ".join(f"{k}={round(v, 10) if isinstance(v, float) else v}"
                    for k, v in params.items() if v is not None) or "(vLLM defaults)"


def short_cause(cause: str, n: int) -> str:
    """A failure's cause cut to about `n` characters at the end of a sentence (else of a word),
    marked with an ellipsis: not in the middle of a value ("-> (")."""
    first = cause.strip().splitlines()[0] if cause.strip() else ""
    if len(first) <= n:
        return first
    cut = first.rfind(". ", 0, n)
    if cut >= n // 3:
        return first[:cut + 1] + " …"
    cut = first.rfind(" ", 0, n)
    return (first[:cut] if cut > 0 else first[:n]) + " …"


def command_hint(rest: str) -> str:
    """An autotune command line to print as a hint, in the form this one was run: `autotune
    REST` when `autotune` on PATH is this program, else the path it was run by (the README's
    `.venv/bin/autotune REST`), or `python -m autotune REST`."""
    import shutil
    from pathlib import Path

    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is None or (argv0.name == "__main__.py" and argv0.parent.name == "autotune"):
        exe = Path(sys.executable)
        py = os.path.relpath(exe) if exe.is_relative_to(Path.cwd()) else str(exe)
        return f"{py} -m autotune {rest}"
    found = shutil.which("autotune")
    if argv0.name == "autotune" and found and Path(found).resolve() == argv0.resolve():
        return f"autotune {rest}"
    if argv0.name != "autotune":  # a test runner or a script: the name the README uses
        return f"autotune {rest}"
    shown = os.path.relpath(argv0) if argv0.resolve().is_relative_to(Path.cwd()) else str(argv0)
    return f"{shown} {rest}"


def speculation_text(spec: dict[str, Any]) -> str:
    """vLLM's speculative-decoding counters of one trial in one line (TrialRecord.speculation)."""
    rate, length = spec.get("acceptance_rate"), spec.get("mean_accepted_length")
    return ("speculative decoding: "
            + (f"{rate:.0%} of draft tokens accepted" if rate is not None else "acceptance ?")
            + (f", {length:.2f} tokens a step" if length is not None else "")
            + f" over {spec['drafts']:,.0f} drafts ({spec['source']})")
