"""The quality guard as a constraint (docs/quality.md). On vLLM's defaults' trial, cold, before
its load: the reference (the defaults' greedy completions of the guard's prompts, one
teacher-forced reading of each prompt + completion and of each dataset text, and the task's
answers), then after its load, read again as every judged trial is: the defaults against
themselves, the noise floor. Each trial whose flags can change outputs (`OUTPUT_FLAGS`) is read
the same way after its measurement, on its own boot, and judged by `tuning.verdict` against the
reference and the floor: passes, fails or cannot tell, with its figures. On dummy weights the
guard says it cannot judge, and why, instead of passing silently.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from autotune.config.quality import OUTPUT_FLAGS, SPECULATIVE
from autotune.config.quality import QUALITY_OK as QUALITY_OK
from autotune.config.study import StudyConfig
from autotune.load.record import Request
from autotune.load.tasks import load_task
from autotune.measure.divergence import Divergence, Position, compare_prompt, pool
from autotune.measure.paired import Paired, paired
from autotune.measure.quality import Completion, greedy, greedy_check, read_texts, self_gap
from autotune.measure.task import TaskRun, run_task
from autotune.measure.texts import dataset_texts, prompt_ids
from autotune.server.scrape import spec_rates
from autotune.tuning import verdict as v

REFERENCE = "quality-reference.json"  # in the study's folder: the defaults' readings, cold
FLOOR = "quality-floor.json"  # the defaults against themselves, read as a judged trial is
DUMMY = ("dummy weights (--load-format dummy): their outputs are noise, so no config's "
         "outputs can be judged against the defaults'")
COLD = "cold, before the load, one request at a time"
# the guard draws its prompts from the study's profile with the profile's seed + this: the
# reference, read before the defaults' load, would otherwise leave the load's own first prompts
# in vLLM's prefix cache, and the defaults' trial alone would find them there (on a 200-request
# ShareGPT point, 32 of its requests' prefills skipped)
GUARD_SEED = 1

Hook = Callable[[str], dict[str, Any]]


class Hooks(TypedDict):
    before: Hook | None
    after: Hook | None


# nats/token: a config's teacher-forced reading further than this from its own greedy
# log-probabilities of the same tokens is wrong, and its KL cannot be judged (self_gap)
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
    """The guard's prompts: the first `n` requests' prompts (text or token ids; a chat
    request's last message's text)."""
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


def _positions(rows: list[list[list[Any]]]) -> list[list[Position]]:
    return [[Position({int(t): lp for t, lp in top}, tok, lp0) for top, tok, lp0 in text]
            for text in rows]


def _rows(read: list[list[Position]]) -> list[list[list[Any]]]:
    return [[[list(p.top.items()), p.token, p.token_logprob] for p in text] for text in read]


class Guard:
    """One study's quality guard."""

    def __init__(self, cfg: StudyConfig, study_dir: Path, requests: list[Request]) -> None:
        self.cfg, self.q = cfg, cfg.quality
        self.path, self.floor_path = study_dir / REFERENCE, study_dir / FLOOR
        self.prompts = prompts_of(requests, self.q.prompts)
        # read once here: a task whose package is missing is one clear error at the start
        self.items = load_task(self.q.task, self.q.task_items) \
            if self.on and self.q.task != "none" else []
        # the last server read against the reference (`read`): its greedy completions and its
        # teacher-forced readings, for a caller that judges them by another rule too (the lab)
        self.last_read: tuple[list[Completion], list[list[Position]]] | None = None

    @property
    def on(self) -> bool:
        return self.q.when != "never"

    def dummy(self, flags: dict[str, Any]) -> bool:
        return {**self.cfg.server.args, **flags}.get("load_format") == "dummy"

    def wanted(self, flags: dict[str, Any], baseline: bool) -> str | None:
        """Why this trial is judged ("reference" for the defaults' trial), or None."""
        if not self.on or not (self.prompts or self.q.texts):
            return None
        if baseline:
            return "reference"
        which = changes_outputs(flags)
        if which:
            return "sets " + ", ".join(which)
        return "quality.when: always" if self.q.when == "always" else None

    # -- the readings ------------------------------------------------------------------------
    def guard_prompts(self) -> list[str | list[int]]:
        """The prompts the reference completes: the profile's own kind of prompt, drawn with
        another seed (GUARD_SEED) where a seed changes the draw (ShareGPT, random); a
        dataset's first prompts otherwise."""
        p = self.cfg.workloads()[0]
        if not self.q.prompts or p.name == "dataset":
            return self.prompts
        from autotune.load.datasets import load_tokenizer, sample_requests

        drawn = sample_requests(p, load_tokenizer(self.cfg.server.tokenizer_dir),
                                self.q.prompts, p.seed + GUARD_SEED)
        return prompts_of(drawn, self.q.prompts)

    def _task(self, url: str, concurrency: int) -> TaskRun | None:
        if not self.items:
            return None
        return run_task(url, self.cfg.server.model, self.q.task, self.items,
                        self.q.task_max_tokens, concurrency)

    def record(self, url: str) -> dict[str, Any]:
        """The reference, cold: the defaults' greedy completions of the prompts, one
        teacher-forced reading of every text, the task's answers; one request at a time."""
        t0 = time.monotonic()
        model, q = self.cfg.server.model, self.q
        ids = prompt_ids(url, model, self.guard_prompts(), q.max_positions - q.max_tokens)
        done = greedy(url, model, ids, q.max_tokens)
        texts = [c.prompt_ids + c.ids for c in done] + dataset_texts(
            url, model, q.texts, q.max_positions)
        read = read_texts(url, model, texts, q.top_k)
        task = self._task(url, 1)
        doc = {"version": 2, "conditions": COLD, "greedy": [c.to_json() for c in done],
               "texts": texts, "read": _rows(read), "task": task.to_json() if task else None,
               "seconds": round(time.monotonic() - t0, 2)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(doc) + "\n")
        return {"reference_seconds": doc["seconds"]}

    def _reference(self) -> dict[str, Any] | None:
        if not self.path.is_file():
            return None
        doc = json.loads(self.path.read_text())  # an earlier guard's: a list, not judged on
        return doc if isinstance(doc, dict) and doc.get("version") == 2 else None

    def read(self, url: str, ref: dict[str, Any]) -> dict[str, Any]:
        """This server read as a judged trial is (after its load, `concurrency` in flight),
        against the reference: divergence, greedy check, task, speculation's counters."""
        t0 = time.monotonic()
        model, q, n = self.cfg.server.model, self.q, self.q.concurrency
        mine_ref = _positions(ref["read"])
        done = [Completion.from_json(d) for d in ref["greedy"]]
        before = spec_counters(url)
        cand = greedy(url, model, [c.prompt_ids for c in done], q.max_tokens, n)
        spec = {k: val - before.get(k, 0.0) for k, val in spec_counters(url).items()}
        read = read_texts(url, model, ref["texts"], q.top_k, n)
        self.last_read = (cand, read)
        div = pool([compare_prompt(a, b) for a, b in zip(mine_ref, read, strict=True)],
                   q.coverage)
        found: dict[str, Any] = {
            "kl": div.to_json(), "greedy": greedy_check(done, mine_ref[:len(done)], cand,
                                                        q.tie_margin),
            "self_gap": self_gap(done, cand, read[:len(done)])}
        if ref.get("task"):
            task = self._task(url, n)
            assert task is not None
            base = TaskRun.from_json(ref["task"])
            ids = [i.id for i in self.items]
            found["task"] = {"name": task.name, **paired(base.passed, task.passed,
                                                         q.coverage).to_json(),
                             "lost_items": [i for i, d, c in zip(ids, base.passed, task.passed,
                                                                 strict=True) if d and not c],
                             "gained_items": [i for i, d, c in zip(ids, base.passed,
                                                                   task.passed, strict=True)
                                              if c and not d]}
        if spec.get("spec_drafts"):  # speculation on greedy completions of the prompt set
            found.update(spec, **spec_rates(spec))
        found["read_seconds"] = round(time.monotonic() - t0, 2)
        return found

    # -- the hooks a trial's boot runs ---------------------------------------------------------
    def before(self, flags: dict[str, Any], baseline: bool) -> Hook | None:
        """What to run on the defaults' server before their load (None: nothing)."""
        if not baseline or self.wanted(flags, baseline) is None or self.dummy(flags):
            return None
        return self.record

    def after(self, flags: dict[str, Any], baseline: bool) -> Hook | None:
        """What to run on the trial's server after its measurement (None: nothing)."""
        why = self.wanted(flags, baseline)
        if why is None or self.dummy(flags):
            return None

        def floor(url: str) -> dict[str, Any]:
            ref = self._reference()
            if ref is None:
                return {"judged": False, "why": "vLLM's defaults: the reference was not "
                        "recorded"}
            found = self.read(url, ref)
            doc = {"conditions": f"reference {COLD}; read after the load, {self.q.concurrency} "
                   "in flight, same boot", **found}
            self.floor_path.write_text(json.dumps(doc) + "\n")
            return {"judged": False, "why": "vLLM's defaults: the reference and the floor",
                    "floor": floor_figures(doc),
                    "seconds": round(ref["seconds"] + found["read_seconds"], 2)}

        def judge(url: str) -> dict[str, Any]:
            ref = self._reference()
            if ref is None:
                return {"judged": False, "why": "no reference: vLLM's defaults' trial has "
                        "not recorded it (it failed, or another worker runs it)"}
            found = self.read(url, ref)
            fl = json.loads(self.floor_path.read_text()) if self.floor_path.is_file() else None
            return {"judged": True, "why": why, **found, "seconds": found["read_seconds"],
                    "floor": floor_figures(fl) if fl else None, "floor_raw": _floor_raw(fl)}
        return floor if baseline else judge

    def hooks(self, flags: dict[str, Any], baseline: bool) -> Hooks:
        """A trial's boot's hooks (measure.runner.run_boot's `before` and `after`)."""
        return {"before": self.before(flags, baseline), "after": self.after(flags, baseline)}

    def verdict(self, flags: dict[str, Any], baseline: bool, found: dict[str, Any] | None
                ) -> tuple[dict[str, Any] | None, float, str | None]:
        """(what the trial records, the constraint's violation (0: met), the cause if not)."""
        if self.wanted(flags, baseline) is None:
            return None, 0.0, None
        if self.dummy(flags):
            return {"judged": False, "why": DUMMY}, 0.0, None
        if baseline:
            return found, 0.0, None
        if not found or not found.get("judged"):
            why = (found or {}).get("why", "the guard did not read this server")
            rec = {"judged": False, "why": why, "verdict": v.CANNOT_TELL, "reason": why}
            return rec, v.VIOLATION[v.CANNOT_TELL], f"quality: cannot tell: {why}"
        return decide(flags, found, self.q)


def floor_figures(doc: dict[str, Any]) -> dict[str, Any]:
    """The floor as a verdict shows it beside a config's figures."""
    d = Divergence.from_json(doc["kl"])
    task = doc.get("task")
    return {"kl_mean": d.kl_mean.value, "kl_p99": d.kl_p99.value,
            "top1_agree": d.top1_agree.value, "task_drop": task["drop"] if task else None,
            "conditions": doc["conditions"]}


def _floor_raw(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    return {"kl": doc["kl"], "task": doc.get("task")} if doc else None


def decide(flags: dict[str, Any], found: dict[str, Any], q: Any
           ) -> tuple[dict[str, Any], float, str | None]:
    """A judged trial's verdict from its readings (`found`: Guard.read's, with the floor)."""
    raw = found.get("floor_raw") or {}
    floor = Divergence.from_json(raw["kl"]) if raw.get("kl") else None
    div = Divergence.from_json(found["kl"])
    which = changes_outputs(flags)
    spec_only = which == [SPECULATIVE]
    parts = []
    kl = v.kl_part(div, floor, q)
    gap = found.get("self_gap")
    if gap is not None and gap > SELF_GAP_MAX:
        kl = v.Part("kl", v.CANNOT_TELL, f"its prompt_logprobs read {gap:.2f} nats/token from "
                    "its own greedy log-probabilities of the same tokens: the teacher-forced "
                    "reading is wrong here (vLLM issue 53488), so its KL cannot be judged")
    if spec_only:  # lossless by construction: the bug check decides, the KL is shown
        parts.append(v.spec_part(v.GreedyCheck(**found["greedy"]), q))
        deciding = "spec"
    else:
        parts.append(kl)
        deciding = "kl"
        if SPECULATIVE in which:
            parts.append(v.spec_part(v.GreedyCheck(**found["greedy"]), q))
    if found.get("task"):
        tf = raw.get("task")
        parts.append(v.task_part(found["task"]["name"], Paired.from_json(found["task"]),
                                 Paired.from_json(tf) if tf else None, q,
                                 found["task"].get("lost_items")))
    verdict, reason = v.combine(parts, deciding)
    if spec_only:
        reason += f"; KL (shown, not judged: speculation) {div.kl_mean.value:.4g}"
    line = v.kl_line(q, floor)
    rec = {**{k: x for k, x in found.items() if k != "floor_raw"}, "verdict": verdict,
           "reason": reason, "parts": {p.name: p.verdict for p in parts},
           "line": {"kl": line, "max_kl": q.max_kl, "floor_multiple": q.floor_multiple,
                    "task_drop": v.task_line(q, Paired.from_json(raw["task"]))
                    if raw.get("task") else q.max_task_drop}}
    if verdict == v.PASSES:
        return rec, 0.0, None
    excess = max(div.kl_mean.low / line - 1, 0.0) if verdict == v.FAILS and line else 0.0
    return (rec, v.VIOLATION[verdict] + excess,
            f"quality: {v.verdict_text(rec)}")
