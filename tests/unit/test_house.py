"""The layout's promises, checked on the code as it stands (docs: the README's layout section):
a bare `autotune` loads no heavy library, every key stored on an Optuna trial or study is read
and written in one module, and modules stay small enough to read."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autotune"


def test_the_cli_imports_no_optuna_mlflow_or_vllm() -> None:
    """`autotune --help` and `autotune bench` need none of them: each command imports the
    library it calls when it runs."""
    code = ("import sys, autotune.cli; "
            "print(sorted(m for m in ('optuna', 'mlflow', 'vllm', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]"


def test_stored_keys_live_in_the_record_module() -> None:
    """Optuna's string-keyed attributes are touched in tuning/record.py only; everything else
    reads TrialFacts, StudyFacts or TrialRecord."""
    pattern = re.compile(r"user_attrs|set_user_attr|system_attrs")
    touching = sorted(str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
                      if pattern.search(p.read_text()))
    assert touching == ["autotune/tuning/record.py"]


def test_no_module_is_over_350_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 350}
    assert not long


# docs/results keeps each result's summary.json, plots and small tables; raw logs, databases and
# archives are kept in the history only (lab/results.sh). A clone of main was 82 MB of them.
RESULTS_BUDGET = 10 * 2**20


def test_docs_results_stays_within_its_budget() -> None:
    size = sum(p.stat().st_size for p in (ROOT / "docs/results").rglob("*") if p.is_file())
    assert size <= RESULTS_BUDGET, (
        f"docs/results holds {size / 2**20:.1f} MB, over its {RESULTS_BUDGET / 2**20:g} MB "
        "budget: file raw files off the tree (bash lab/results.sh add FILE...)")
