"""Generated code runs confined: its own subprocess, a timeout that kills its process group, an
empty directory removed after; a HumanEval answer is judged by its problem's tests."""

from __future__ import annotations

import time

from autotune.load.tasks import load_task
from autotune.measure.sandbox import run_many, run_python
from autotune.measure.task import check


def test_a_program_passes_on_exit_zero_and_fails_otherwise() -> None:
    assert run_python("print('ok')")[0]
    ok, said = run_python("raise SystemExit('no')")
    assert not ok and "no" in said
    ok, said = run_python("assert 1 == 2")
    assert not ok and "AssertionError" in said


def test_an_endless_program_is_killed_at_its_timeout() -> None:
    t0 = time.monotonic()
    ok, said = run_python("while True: pass", timeout_s=1.0)
    assert not ok and said == "timed out after 1 s" and time.monotonic() - t0 < 5


def test_a_program_sees_only_its_own_directory_and_no_environment() -> None:
    # (Python itself sets LC_CTYPE when it coerces the C locale: PEP 538)
    ok, said = run_python("import os; print(sorted(os.listdir('.')), "
                          "sorted(set(os.environ) - {'LC_CTYPE'}))")
    assert ok and said == "['output.txt', 'program.py'] ['PATH']"
    assert run_many(["print(1)", "raise SystemExit(3)"], workers=2) == [
        (True, "1"), (False, "exit 3")]


def test_a_humaneval_answer_is_judged_by_its_tests() -> None:
    item = load_task("humaneval", 1)[0]
    right = ("    for i, a in enumerate(numbers):\n        for b in numbers[i + 1:]:\n"
             "            if abs(a - b) < threshold:\n                return True\n"
             "    return False\n")
    assert check("humaneval", [item, item], [right, "    return True\n"]) == [True, False]
    gsm = load_task("gsm8k", 1)[0]
    assert check("gsm8k", [gsm, gsm], [f" ... #### {gsm.check['answer']}", " #### -1"]) == [
        True, False]
