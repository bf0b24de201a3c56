"""A task read on a running server (docs/quality.md): each item's greedy answer through vLLM's
OpenAI completions API (temperature 0, the item's stop strings), then checked: a HumanEval
answer by its problem's tests in a confined subprocess (measure/sandbox.py), a GSM8K answer by
its final number. The outcome is one pass/fail per item, in the items' order, so two servers'
runs pair item by item (measure/paired.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from autotune.load.tasks import TaskItem, final_number, same_number
from autotune.measure.quality import each, post
from autotune.measure.sandbox import run_many

CHECK_TIMEOUT_S = 10.0  # per HumanEval program: its tests run in well under a second


@dataclass(frozen=True)
class TaskRun:
    """One server's answers to a task and their outcomes."""

    name: str
    answers: list[str]
    passed: list[bool]

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "answers": self.answers, "passed": self.passed}

    @classmethod
    def from_json(cls, d: dict[str, object]) -> TaskRun:
        return cls(str(d["name"]), list(d["answers"]),  # type: ignore[call-overload]
                   [bool(x) for x in d["passed"]])  # type: ignore[attr-defined]


def answers(base_url: str, model: str, items: Sequence[TaskItem], max_tokens: int,
            concurrency: int) -> list[str]:
    def one(client: httpx.Client, item: TaskItem) -> str:
        d = post(client, {"model": model, "prompt": item.prompt, "max_tokens": max_tokens,
                          "temperature": 0.0, "stop": list(item.stop)})
        return str(d["choices"][0]["text"])
    return each(base_url, items, one, concurrency)


def program(item: TaskItem, answer: str) -> str:
    """A HumanEval item's check: the prompt, the answer, the tests, and the call of `check`."""
    c = item.check
    return f"{c['prompt']}{answer}\n\n{c['test']}\n\ncheck({c['entry_point']})\n"


def check(name: str, items: Sequence[TaskItem], got: Sequence[str]) -> list[bool]:
    if name == "humaneval":
        return [ok for ok, _ in run_many([program(i, a) for i, a in zip(items, got,
                                                                       strict=True)],
                                         CHECK_TIMEOUT_S)]
    return [same_number(final_number(a), i.check["answer"]) for i, a in zip(items, got,
                                                                           strict=True)]


def run_task(base_url: str, model: str, name: str, items: Sequence[TaskItem],
             max_tokens: int, concurrency: int) -> TaskRun:
    got = answers(base_url, model, items, max_tokens, concurrency)
    return TaskRun(name, got, check(name, items, got))
