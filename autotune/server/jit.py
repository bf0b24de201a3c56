"""vLLM's runtime-compilation signals in a server's log, and which of them fell inside a span of
the log (a load point).

vLLM (0.26 on the GPU, 0.32 on CPU) starts a kernel JIT monitor after its warm-up ("Kernel JIT
monitor activated") and warns when a kernel compiles while serving. On an H100 serving a
Qwen3-30B-A3B-shaped MoE, every server's first load point carried one:

    (EngineCore pid=1322) WARNING 11-25 20:43:14 [jit_monitor.py:135] Triton kernel JIT
    compilation during inference: fused_moe_kernel. This causes a latency spike; consider
    extending warmup to cover this shape/config.

and that point's p99 TTFT was 3.9x the same load's once warm (docs/results/warm-server-h100).
The monitor warns once per kernel name and process unless `--jit-monitor-verbose`: a second
compilation of the same kernel leaves no line, so no line is no proof of none.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import MeasurementWarning

# the monitor's warning, which names the kernel
_DURING_INFERENCE = re.compile(
    r"JIT compilation during inference: (?P<kernel>[\w\-]+(?:\.[\w\-]+)*)")
MONITOR_ON = "Kernel JIT monitor activated"


# vLLM's fused-MoE kernel without a tuned config for this expert shape and GPU (fused_moe.py,
# warning_once): it runs on generic tile sizes
_UNTUNED_MOE = re.compile(r"Using default MoE config\. .*Config file not found at (?P<paths>.+)$")


def untuned_moe(text: str) -> list[str]:
    """The tuned fused-MoE config files vLLM looked for and did not find (file names, in
    order, once each): its MoE layers ran on default tile sizes. On the H100 every MoE server
    logged one, e.g. E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3.json."""
    names: list[str] = []
    for line in text.splitlines():
        if m := _UNTUNED_MOE.search(line.strip()):
            for path in m.group("paths").split(", "):
                if (name := Path(path.strip()).name) not in names:
                    names.append(name)
    return names


@dataclass(frozen=True)
class JitEvent:
    kernel: str
    line: str


def jit_events(text: str) -> list[JitEvent]:
    """Every runtime-compilation warning in `text`, in order."""
    return [JitEvent(m.group("kernel"), line.strip()) for line in text.splitlines()
            if (m := _DURING_INFERENCE.search(line))]


class LogSpan:
    """The part of a growing log written since `mark()`: what a point overlapped."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.start = 0

    def mark(self) -> LogSpan:
        self.start = self._size()
        return self

    def _size(self) -> int:
        try:
            return self.path.stat().st_size if self.path is not None else 0
        except OSError:
            return 0

    def events(self) -> list[JitEvent]:
        """The runtime compilations logged since the mark."""
        if self.path is None:
            return []
        try:
            with self.path.open("rb") as f:
                f.seek(self.start)
                text = f.read().decode(errors="replace")
        except OSError:
            return []
        return jit_events(text)

    def counted(self, name: str = "jit_events", n: float | None = None) -> dict[str, float]:
        """{name: the compilations since the mark (or `n`)}; {} without a log: a server whose
        log nobody reads was not watched, and 0 would claim that none compiled."""
        if self.path is None:
            return {}
        return {name: float(len(self.events()) if n is None else n)}

    def compiled(self, fix: str = "a larger profile.warmup") -> dict[str, float]:
        """`counted()`, and a MeasurementWarning naming the kernels compiled since the mark and
        what covers them (`fix`): a fixed load's latencies may hold their compile time."""
        events = self.events()
        if events:
            warnings.warn(f"vLLM compiled {len(events)} kernel(s) during this load or its "
                          f"warm-up ({', '.join(sorted({e.kernel for e in events}))}): its "
                          f"latencies may hold the compile time; {fix} covers them",
                          MeasurementWarning, stacklevel=3)
        return self.counted(n=len(events))
