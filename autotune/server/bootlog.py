"""A server's boot, phase by phase, from vLLM's log: where the seconds from the process's start
to /health went. Pure: text in, seconds out.

vLLM 0.26 on a GPU (the H200s' cold first boot, docs/results/certified, 190 s to /health) logs

    00:12:26 [model_runner.py:305] Model loading took 15.27 GiB and 3.363244 seconds
    00:12:53 [monitor.py:53] torch.compile took 26.57 s in total
    00:13:01 [model_runner.py:747] Graph capturing finished in 5 secs, took 1.00 GiB
    00:14:37 [jit_monitor.py:79] Kernel JIT monitor activated; ...
    00:14:37 [core.py:340] init engine (profile, create kv cache, warmup model) took 130.71 s
      (compilation: 26.57 s)

(each line after `(EngineCore pid=1916) INFO 11-29`), and its phases (PHASES) are:

    start          the process's start to the engine loading its weights (Python imports, the
                   API server, the engine's process) and the API server's last moments up to
                   /health: what the log does not time, the boot less the phases below (56 s)
    weights        "Model loading took X GiB and Y seconds" (vLLM 0.32 on CPU: "Loading weights
                   took Y seconds"; a dummy load there logs neither)
    compile        torch.compile: the init line's "(compilation: Y s)", else "torch.compile took
                   X s in total" (26.6 s compiled, 4.6-8.3 s loaded from its cache)
    graphs         "Graph capturing finished in X secs" (whole seconds, as vLLM rounds them)
    kernel_warmup  the graph capture's end to "Kernel JIT monitor activated" on the log's clock
                   (whole seconds): the kernels' JIT and autotuning after the capture, 96 s of
                   the cold boot, 0-1 s of a warm one
    engine         the rest of "init engine (...) took X s": profiling, the KV cache, the
                   model's warm-up (3.1 s)

A phase whose line is not in the log is absent, never guessed (vLLM 0.32 on CPU with
--enforce-eager logs the weights at most and the init line, without compilation). Where the
engine's workers log the same line (tensor parallel), they ran at once: the longest counts.
`compiled` says whether torch.compile compiled a graph ("Compiling a graph for ...": a cold
boot) or loaded every one from its cache ("Directly load the compiled graph(s) ...").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

PHASES = ("start", "weights", "compile", "graphs", "kernel_warmup", "engine")
HEALTHY = "# autotune: healthy"  # lifecycle's line once /health answered: the boot ends there

_WHEN = re.compile(r"\b(?:INFO|WARNING|DEBUG|ERROR) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) ")
_WEIGHTS = re.compile(r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) seconds")
_WEIGHTS_CPU = re.compile(r"Loading weights took ([\d.]+) seconds")
_COMPILE = re.compile(r"torch\.compile took ([\d.]+) s in total")
_GRAPHS = re.compile(r"Graph capturing finished in ([\d.]+) secs")
_JIT_ON = "Kernel JIT monitor activated"
_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"
                   r"(?: \(compilation: ([\d.]+) s)?")
_COMPILED = "Compiling a graph for"
_CACHED = "Directly load the compiled graph"


def _when(line: str) -> datetime | None:
    m = _WHEN.search(line)
    if m is None:
        return None
    mo, d, h, mi, s = (int(x) for x in m.groups())
    try:  # the log gives no year: 2000 (a leap year) orders a boot's lines
        return datetime(2000, mo, d, h, mi, s)
    except ValueError:
        return None


@dataclass(frozen=True)
class BootLog:
    """The phases vLLM's log timed in one boot (seconds; None: not in the log)."""

    weights: float | None = None
    compile: float | None = None
    graphs: float | None = None
    kernel_warmup: float | None = None
    init: float | None = None  # the whole "init engine" line: compile, graphs, warm-up, rest
    compiled: bool | None = None  # torch.compile compiled a graph (None: it logged neither)

    @property
    def engine(self) -> float | None:
        """The init line's seconds less the phases inside it that the log timed."""
        if self.init is None:
            return None
        inside = sum(v or 0.0 for v in (self.compile, self.graphs, self.kernel_warmup))
        return max(self.init - inside, 0.0)

    def split(self, boot_s: float) -> dict[str, float]:
        """`boot_s` (the process's start to /health) by phase, the found ones and `start` (the
        rest): they sum to `boot_s`, none negative; phases that would pass it (a log from a
        longer boot) are scaled down to fit. {} where the log timed none."""
        timed = {k: v for k in PHASES[1:]
                 if (v := self.engine if k == "engine" else getattr(self, k)) is not None}
        total = sum(timed.values())
        if not timed or boot_s <= 0:
            return {}
        if total > boot_s:
            return {"start": 0.0} | {k: v * boot_s / total for k, v in timed.items()}
        return {"start": boot_s - total} | timed


def boot_section(text: str) -> str:
    """The last boot in a server's log: from its command line (`$ vllm serve ...`, the header
    a boot on another port writes again) to the line saying it was healthy (or the end)."""
    lines = text.splitlines()
    first = max((i for i, ln in enumerate(lines) if ln.startswith("$ ")), default=-1) + 1
    last = next((i for i in range(first, len(lines)) if lines[i].startswith(HEALTHY)),
                len(lines))
    return "\n".join(lines[first:last])


def read_boot(text: str) -> BootLog:
    """The phases of the last boot in `text` (a server's log)."""
    found: dict[str, float] = {}
    compiled: bool | None = None
    graphs_end = jit_on = None
    for line in boot_section(text).splitlines():
        for key, pattern in (("weights", _WEIGHTS), ("weights_cpu", _WEIGHTS_CPU),
                             ("compile", _COMPILE), ("graphs", _GRAPHS)):
            if m := pattern.search(line):  # workers at once: the longest
                found[key] = max(found.get(key, 0.0), float(m.group(1)))
                if key == "graphs":
                    graphs_end = _when(line) or graphs_end
        if m := _INIT.search(line):
            found["init"] = max(found.get("init", 0.0), float(m.group(1)))
            if m.group(2) is not None:
                found["compilation"] = float(m.group(2))
        if _JIT_ON in line and jit_on is None:
            jit_on = _when(line)
        if _COMPILED in line:
            compiled = True
        elif _CACHED in line and compiled is None:
            compiled = False
    warmup = None
    if graphs_end is not None and jit_on is not None and jit_on >= graphs_end:
        warmup = (jit_on - graphs_end).total_seconds()
    return BootLog(weights=found.get("weights", found.get("weights_cpu")),
                   compile=found.get("compilation", found.get("compile")),
                   graphs=found.get("graphs"), kernel_warmup=warmup, init=found.get("init"),
                   compiled=compiled)


def boot_phases(log_path: str | Path | None, boot_s: float) -> tuple[dict[str, float],
                                                                     bool | None]:
    """A boot's split (BootLog.split) and whether it compiled, from its server's log; ({},
    None) without a readable log."""
    if not log_path:
        return {}, None
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return {}, None
    got = read_boot(text)
    return got.split(boot_s), got.compiled

