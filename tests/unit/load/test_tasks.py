"""The guard's tasks, read offline from the packages that bundle them: HumanEval's 164 problems
and GSM8K's test questions, 5-shot, with the answer checks a completion is judged by."""

from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from autotune.load.tasks import SHOTS, final_number, load_task, same_number


def test_humaneval_is_the_164_problems_with_their_tests() -> None:
    items = load_task("humaneval", 500)
    assert len(items) == 164 and items[0].id == "HumanEval/0"
    assert items[0].prompt.startswith("from typing import List")
    assert items[0].check["entry_point"] == "has_close_elements"
    assert "def check(candidate)" in items[0].check["test"]
    assert "\ndef " in items[0].stop and len(load_task("humaneval", 3)) == 3


def test_gsm8k_is_five_shot_over_the_test_set_less_its_examples() -> None:
    items = load_task("gsm8k", 10)
    assert len(items) == 10 and items[0].id == f"gsm8k/{SHOTS}"
    assert items[0].prompt.count("Question: ") == SHOTS + 1
    assert items[0].prompt.startswith("Question: Janet’s ducks lay 16 eggs per day.")
    assert "<<" not in items[0].prompt  # the calculator annotations are dropped
    assert items[0].prompt.endswith("\nAnswer:") and items[0].check["answer"]
    assert len(load_task("gsm8k", 5000)) == 1319 - SHOTS


def test_a_gsm8k_answer_is_its_final_number() -> None:
    assert final_number("She makes 9 * 2 = $18 every day.\n#### 18") == "18"
    assert final_number("So 1,200 + 5 = 1,205.") == "1205"
    assert final_number("The answer is 7.") == "7"
    assert final_number("no number") is None
    assert same_number("18.0", "18") and not same_number("17", "18")
    assert not same_number(None, "18")


def test_an_unknown_task_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="unknown task 'mmlu'"):
        load_task("mmlu", 1)
