"""Rich rendering shared by the commands: metric tables and progress displays."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from autotune.metrics import BenchMetrics

console = Console(stderr=True)
out = Console()


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

    def finish(self) -> None:
        self.p.remove_task(self.task)


@contextmanager
def trial_progress(label: str, total: int) -> Iterator[TrialProgress]:
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as p:
        tp = TrialProgress(p, label, total)
        yield tp
