"""A capacity search's load points as `autotune bench` shows them: a table by load (what each
point measured and whether it met the SLOs) and, under it, what each point missed, whole."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from autotune.config.metric_names import FAILED
from autotune.config.workload import SLOConfig
from autotune.measure.capacity import LoadPoint


def points_table(points: list[LoadPoint], axis: str, slos: Sequence[SLOConfig] = ()) -> Table:
    """The load points by load; what each missed, in short (the SLO's metric): `miss_lines`
    gives the whole text, under the table, so the table fits 100 columns."""
    t = Table(title=f"load points ({axis})", header_style="bold")
    for col in ("load", "verdict", "req/s", "total tok/s", "p99 TTFT ms", "p99 TPOT ms",
                "p99 lag ms", "s", "missed"):
        t.add_column(col, justify="left" if col in ("verdict", "missed") else "right",
                     no_wrap=col == "verdict")
    target = {s.metric: s.max for s in slos if s.max is not None}
    for p in sorted(points, key=lambda p: p.load):
        m = p.metrics
        verdict = ("[yellow]client limit[/yellow]" if p.flag else
                   "[green]met[/green]" if p.passed else "[red]missed[/red]")
        if p.runs > 1:
            verdict += f" ({p.runs} runs)"
        if p.settled_s is not None:  # stopped once its requests settled the miss
            verdict += f" at {p.settled_s:.0f} s"
        what = ["failed requests" if x == FAILED else
                x.removesuffix("_ms").replace("_", " ") for x in p.missed]
        # a settled miss's metric: the requests still out are the slow ones, so the finished
        # requests' p99 reads low; the cell says what was settled instead ("> 2,000")
        settled = set(p.missed) if p.settled_s is not None else set()
        t.add_row(f"{p.load:g}", verdict,
                  f"{m['request_throughput']:,.2f}", f"{m['total_token_throughput']:,.0f}",
                  *(f"> {target[k]:,.0f}" if k in settled and k in target else f"{m[k]:,.1f}"
                    for k in ("p99_ttft_ms", "p99_tpot_ms")),
                  f"{m.get('p99_send_lag_ms', 0.0):,.1f}", f"{p.seconds:.1f}",
                  ", ".join([*what, *(["client"] if p.flag else [])]))
    return t


def miss_lines(points: list[LoadPoint]) -> list[str]:
    """What each point missed, whole: the SLO, the value and its interval, or the client's
    limit."""
    return [f"  {p.load:g}: " + "; ".join([*p.misses, *([p.flag] if p.flag else [])])
            for p in sorted(points, key=lambda p: p.load) if p.misses or p.flag]
