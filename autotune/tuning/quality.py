"""The quality guard as a constraint (docs/quality.md): vLLM's defaults' greedy outputs on a
fixed prompt set (the study's first requests) are recorded once per study, by the baseline
trial; each trial whose flags can change outputs (`OUTPUT_FLAGS`) is compared with them on its
own boot, after its measurement. A config whose outputs drift beyond the study's thresholds
(`quality.min_exact_match`, `quality.max_logprob_drop`) is infeasible, with the figures as its
cause. On dummy weights the guard says it cannot judge, and why, instead of passing silently.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.config.quality import OUTPUT_FLAGS
from autotune.config.quality import QUALITY_OK as QUALITY_OK
from autotune.config.study import StudyConfig
from autotune.load.record import Request
from autotune.measure.quality import Completion, compare, greedy, score
from autotune.server.scrape import spec_rates

REFERENCE = "quality-reference.json"  # in the study's folder: the defaults' completions
DUMMY = ("dummy weights (--load-format dummy): their outputs are noise, so no config's "
         "outputs can be judged against the defaults'")

AfterHook = Callable[[str], dict[str, Any]]
# nats/token: a server whose prompt_logprobs and greedy log-probs of the same tokens disagree by
# more has returned its prompt_logprobs wrong (a greedy pick at -9.6 nats is no pick), so the
# drop is read from the greedy log-probs over the tokens shared with the defaults instead. On
# an H200 (vLLM 0.26.0), Qwen2.5-Coder-1.5B with the 0.5B drafting matched the defaults on 16 of
# 16 prompts while its prompt_logprobs read 9.6 nats/token below them (vLLM issue 53488 reports
# prompt_logprobs corrupted under model-based speculation); n-gram read a drop of -0.002.
SELF_GAP_MAX = 1.0


def spec_counters(url: str) -> dict[str, float]:
    """vLLM's speculative-decoding counters now (empty when /metrics does not answer)."""
    import httpx

    from autotune.server.scrape import COUNTERS, parse

    try:
        got = parse(httpx.get(f"{url}/metrics", timeout=10).text)
    except (httpx.HTTPError, ValueError):
        return {}
    return {k: got.get(n, 0.0) for k, n in COUNTERS.items() if k.startswith("spec_")}


def changes_outputs(flags: dict[str, Any]) -> list[str]:
    """The flags of a config that can change what the model says (set, not left to vLLM)."""
    return [f for f in OUTPUT_FLAGS if flags.get(f) not in (None, False, "auto")]


def prompts_of(requests: list[Request], n: int) -> list[str | list[int]]:
    """The guard's fixed prompt set: the first `n` requests' prompts (text or token ids; a
    chat request's last message's text)."""
    out: list[str | list[int]] = []
    for r in requests[:n]:
        p = r.prompt
        if isinstance(p, list) and p and isinstance(p[0], dict):
            out.append(str(p[-1].get("content", "")))
        elif isinstance(p, list):
            out.append([int(x) for x in p])  # type: ignore[arg-type]
        else:
            out.append(p)
    return out


def drop_text(q: dict[str, Any]) -> str:
    """The drop a judged trial's record holds, as tables and the report show it."""
    if q.get("logprob_judged") is False:
        return (f"{q.get('logprob_drop_greedy') or 0.0:.3f} (greedy; its prompt_logprobs "
                f"{q.get('logprob_self_gap', 0.0):.1f} off)")
    return f"{q['logprob_drop']:.3f}"


class Guard:
    """One study's quality guard."""

    def __init__(self, cfg: StudyConfig, study_dir: Path, requests: list[Request]) -> None:
        self.cfg, self.q = cfg, cfg.quality
        self.path = study_dir / REFERENCE
        self.prompts = prompts_of(requests, self.q.prompts)

    @property
    def on(self) -> bool:
        return self.q.when != "never"

    def dummy(self, flags: dict[str, Any]) -> bool:
        return {**self.cfg.server.args, **flags}.get("load_format") == "dummy"

    def wanted(self, flags: dict[str, Any], baseline: bool) -> str | None:
        """Why this trial is judged ("reference" for the defaults' trial), or None."""
        if not self.on or not self.prompts:
            return None
        if baseline:
            return "reference"
        which = changes_outputs(flags)
        if which:
            return "sets " + ", ".join(which)
        return "quality.when: always" if self.q.when == "always" else None

    def after(self, flags: dict[str, Any], baseline: bool) -> AfterHook | None:
        """What to run on the trial's server after its measurement (None: nothing)."""
        why = self.wanted(flags, baseline)
        if why is None or self.dummy(flags):
            return None
        model = self.cfg.server.model
        if why == "reference":
            def record(url: str) -> dict[str, Any]:
                ref = greedy(url, model, self.prompts, self.q.max_tokens)
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.path.write_text(json.dumps([c.to_json() for c in ref]) + "\n")
                return {"judged": False, "why": "vLLM's defaults: the reference",
                        "reference_prompts": len(ref)}
            return record

        def judge(url: str) -> dict[str, Any]:
            if not self.path.is_file():
                return {"judged": False, "why": "no reference: vLLM's defaults' trial has not "
                        "recorded its outputs (it failed, or another worker runs it)"}
            ref = [Completion.from_json(d) for d in json.loads(self.path.read_text())]
            before = spec_counters(url)
            mine = greedy(url, model, [self.prompts[i] for i in range(len(ref))],
                          self.q.max_tokens)
            spec = {k: v - before.get(k, 0.0) for k, v in spec_counters(url).items()}
            drift = compare(ref, mine, score(url, model, ref))
            found = {"judged": True, "why": why, **drift.to_json()}
            if spec.get("spec_drafts"):  # speculation on greedy completions of the prompt set
                found.update(spec, **spec_rates(spec))
            return found
        return judge

    def verdict(self, flags: dict[str, Any], baseline: bool, found: dict[str, Any] | None
                ) -> tuple[dict[str, Any] | None, float, str | None]:
        """(what the trial records, the constraint's violation (0: met), the cause if not)."""
        why = self.wanted(flags, baseline)
        if why is None:
            return None, 0.0, None
        if self.dummy(flags):
            return {"judged": False, "why": DUMMY}, 0.0, None
        if not found or not found.get("judged"):
            return found, 0.0, None
        em, drop = float(found["exact_match"]), float(found["logprob_drop"])
        what = "log-prob drop"
        gap, greedy_drop = found.get("logprob_self_gap"), found.get("logprob_drop_greedy")
        if gap is not None and gap > SELF_GAP_MAX:  # its prompt_logprobs contradict it
            what = "log-prob drop (greedy, over the shared tokens)"
            drop = float(greedy_drop) if greedy_drop is not None else 0.0
            found = {**found, "logprob_judged": False, "logprob_why": (
                f"prompt_logprobs {gap:.2f} nats/token from its own greedy log-probs of the "
                f"same tokens: judged on the greedy drop ({drop:.3f})")}
        short = max(self.q.min_exact_match - em, 0.0)
        over = max(drop - self.q.max_logprob_drop, 0.0)
        if not short and not over:
            return found, 0.0, None
        n = int(found["prompts"])
        cause = (f"quality: exact match {em:.0%} of {n} prompts (min "
                 f"{self.q.min_exact_match:.0%}), {what} {drop:.3f} nats/token (max "
                 f"{self.q.max_logprob_drop:g}) against vLLM's defaults' outputs")
        if not over and short <= 1 / n + 1e-9:  # one more prompt alike would meet it
            # one prompt from the line: on an H100, fp8 weights read 8 then 7 of 16 on two runs
            cause += (f"; one prompt short, a verdict that can flip between runs: raise "
                      f"quality.prompts (now {n}) for a firmer one")
        return found, short + over, cause
