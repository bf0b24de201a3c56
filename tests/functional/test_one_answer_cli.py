"""What the inspection commands say about a recorded study (no server): a study with nothing
to recommend says why, one line per failed trial, and `export` exits 1; a GPU-style config's
deploy line carries only the environment the config set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import yaml

from autotune.config.study import load_study_config
from autotune.tuning.record import TrialFacts

CAUSE = ("RuntimeError: _C::static_scaled_fp8_quant() expected at most 0 argument(s) but "
         "received 4 argument(s).\nDeclaration: _C::static_scaled_fp8_quant() -> ()")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})


def recorded(tmp_path: Path, tiny_model: Path, rows: list[tuple[dict, list[float] | None]],
             **server: object) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({
        "name": "rec", "server": {"model": str(tiny_model), **server},
        "search_space": "cpu-demo", "workdir": str(tmp_path / "w")}))
    cfg = load_study_config(path)
    Path(cfg.workdir).mkdir(parents=True, exist_ok=True)
    st = optuna.create_study(study_name=cfg.name, storage=cfg.storage_url(),
                             directions=["maximize", "minimize"])
    st.set_metric_names(cfg.metric_names())
    for i, (flags, values) in enumerate(rows):
        if values is None:
            facts = TrialFacts(flags=flags, flags_key=str(i), baseline=(i == 0) or None,
                               cause=CAUSE, failure="ServerBootError")
            st.add_trial(optuna.trial.create_trial(values=[0.0, 1e6], constraints={"boot_ok": 1.0},
                                                   user_attrs=facts.to_attrs()))
        else:
            facts = TrialFacts(flags=flags, flags_key=str(i), baseline=(i == 0) or None,
                               metrics=dict(zip(cfg.metric_names(), values, strict=True)))
            st.add_trial(optuna.trial.create_trial(values=values, constraints={"boot_ok": 0.0},
                                                   user_attrs=facts.to_attrs()))
    return path


def test_a_study_with_nothing_to_recommend_says_why_and_export_exits_1(
        tmp_path: Path, tiny_model: Path) -> None:
    path = recorded(tmp_path, tiny_model, [({}, None), ({"max_num_seqs": 8}, None)])
    t = cli("trials", "--config", str(path))
    assert t.returncode == 0, t.stderr
    assert "recommended: nothing to recommend: no trial was measured" in " ".join(
        t.stdout.split())
    e = cli("export", "--config", str(path))
    err = " ".join(e.stderr.split())
    assert e.returncode == 1 and "Traceback" not in e.stderr
    assert "nothing to recommend" in err
    assert "trial 0: infeasible: Declaration: _C::static_scaled_fp8_quant() -> ()" in err


def test_a_gpu_configs_deploy_line_has_only_the_env_it_set(tmp_path: Path,
                                                            tiny_model: Path) -> None:
    """On a machine without a GPU the CPU default (VLLM_CPU_KVCACHE_SPACE) applies to what the
    study launches; the exported line carries what the config set, and on a GPU study that set
    nothing, nothing."""
    path = recorded(tmp_path, tiny_model, [({}, [100.0, 20.0]), ({"max_num_seqs": 8},
                                                                 [150.0, 18.0])],
                    env={"VLLM_ALLREDUCE_USE_SYMM_MEM": "0"})
    e = cli("export", "--config", str(path))
    assert e.returncode == 0, e.stderr
    line = next(ln for ln in e.stdout.splitlines() if " serve " in ln)
    assert line.startswith("VLLM_ALLREDUCE_USE_SYMM_MEM=0 ") and " serve " in line
    assert "VLLM_CPU_KVCACHE_SPACE" not in e.stdout


def test_the_deploy_and_bench_lines_run_as_printed(tmp_path: Path, tiny_model: Path) -> None:
    """Issue 70, item 6: after the README's install, `vllm` is not on PATH (bash: vllm: command
    not found), yet the deploy and `vllm bench serve` lines began with a bare `vllm`. They now
    name the vLLM the study ran (.venv/bin/vllm from the repository root), and a bare `vllm`
    only where that is the one on PATH (an activated venv)."""
    import shlex
    import shutil

    from autotune.config.study import default_executable

    path = recorded(tmp_path, tiny_model, [({}, [100.0, 20.0]), ({"max_num_seqs": 8},
                                                                 [150.0, 18.0])])
    bare = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not (Path(p) / "vllm").exists())
    e = subprocess.run([sys.executable, "-m", "autotune", "export", "--config", str(path)],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "COLUMNS": "200", "PATH": bare})
    assert e.returncode == 0, e.stderr
    serve = next(ln for ln in e.stdout.splitlines() if " serve " in ln)  # the line to paste
    bench = next(ln.strip() for ln in e.stderr.splitlines() if " bench serve " in ln)
    for line in (serve, bench):
        exe = next(a for a in shlex.split(line) if "=" not in a)  # after the environment
        assert exe != "vllm" and shutil.which(exe, path=bare) is not None, line  # it runs
        assert Path(exe).resolve() == Path(default_executable()[0]).resolve(), line
    # with the venv activated (its bin on PATH), the bare name runs, and is printed
    venv = str(Path(default_executable()[0]).parent)
    a = subprocess.run([sys.executable, "-m", "autotune", "export", "--config", str(path)],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "COLUMNS": "200", "PATH": venv + os.pathsep + bare})
    assert a.returncode == 0 and "\nvllm bench serve" in "\n" + "\n".join(
        ln.strip() for ln in (a.stdout + a.stderr).splitlines())


# A demo the newcomer of issue 70 ran: the defaults booted three times (the confirm phase), a
# config whose medians beat theirs on both objectives within the noise (three boots), and a
# slower one. The confirm phase keeps the defaults; their medians are dominated.
NOISY = [(0, {}, [5000.0, 2.0], None), (1, {"max_num_seqs": 8}, [5600.0, 1.9], None),
         (2, {"max_num_seqs": 4}, [3000.0, 1.7], None),
         (3, {}, [3500.0, 2.4], 0), (4, {"max_num_seqs": 8}, [4000.0, 2.3], 1),
         (5, {}, [6500.0, 1.7], 0), (6, {"max_num_seqs": 8}, [7000.0, 1.6], 1)]


def recorded_boots(tmp_path: Path, tiny_model: Path,
                   rows: list[tuple[int, dict, list[float], int | None]],
                   confirm: bool = True) -> Path:
    """A recorded study whose configs were booted several times (`repeat_of`), with the
    confirm phase's file when `confirm`."""
    import json

    from autotune.tuning.confirm import summarize as confirm_summary

    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({
        "name": "boots", "server": {"model": str(tiny_model)},
        "search_space": "cpu-demo", "workdir": str(tmp_path / "w")}))
    cfg = load_study_config(path)
    Path(cfg.workdir).mkdir(parents=True, exist_ok=True)
    st = optuna.create_study(study_name=cfg.name, storage=cfg.storage_url(),
                             directions=["maximize", "minimize"])
    st.set_metric_names(cfg.metric_names())
    for n, flags, values, repeat_of in rows:
        facts = TrialFacts(flags=flags, flags_key=str(sorted(flags.items())),
                           baseline=(n == 0) or None, repeat_of=repeat_of,
                           metrics=dict(zip(cfg.metric_names(), values, strict=True)))
        st.add_trial(optuna.trial.create_trial(values=values, constraints={"boot_ok": 0.0},
                                               user_attrs=facts.to_attrs()))
    if confirm:
        res = confirm_summary(st, cfg, 0, [1], 2)
        cfg.study_dir().mkdir(parents=True, exist_ok=True)
        (cfg.study_dir() / "confirm.json").write_text(json.dumps(res.to_json()))
    return path


def test_a_dominated_recommendation_is_never_shown_on_the_front(tmp_path: Path,
                                                                 tiny_model: Path) -> None:
    """Issue 70, item 1: `pareto` listed the defaults (starred) on "the feasible Pareto front"
    while trial 1's medians beat theirs on both objectives; the MLflow note said "no config is
    better on every objective" above them; the report's front column left them empty while
    listing them first. The front now holds its members only, and every surface shows the
    recommendation apart, saying why it is not on it."""
    path = recorded_boots(tmp_path, tiny_model, NOISY)
    p = cli("pareto", "--config", str(path))
    assert p.returncode == 0, p.stderr
    text = p.stdout
    assert "recommended: vLLM's defaults (trial 0)" in " ".join(text.split())
    front, _, apart = text.partition("Recommended, not on the Pareto front")
    assert apart, text
    rows = [ln.split("│")[1].strip() for ln in front.splitlines()
            if ln.startswith("│") and ln.split("│")[1].strip()[:1].isdigit()]
    assert rows == ["1", "2"], text  # trial 2 keeps the TPOT end
    assert "0★" in apart and "trial 1 has better medians on every objective" in " ".join(
        apart.split())
    # the report: the front's rows are its members, "yes" in its front column
    r = cli("report", "--config", str(path), "--out", str(tmp_path / "report"))
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "report" / "report.md").read_text()
    section = md.split("## Pareto front", 1)[1].split("## Confirm phase", 1)[0]
    table, _, rest = section.partition("recommended but not on the Pareto front")
    members = [ln.split("|")[1].strip() for ln in table.splitlines()
               if ln.startswith("| ") and ln.split("|")[1].strip().isdigit()]
    assert members == ["1", "2"] and all("| yes |" in ln for ln in table.splitlines()
                                          if ln.startswith(("| 1 ", "| 2 ")))
    assert "| 0 | ok (base) **★ pick**" in rest
    # MLflow's study note, through `autotune sync`
    from autotune.outputs.tracking import default_tracking_uri

    s = cli("sync", "--config", str(path))
    assert s.returncode == 0, s.stderr
    from mlflow.tracking import MlflowClient

    cfg = load_study_config(path)
    client = MlflowClient(default_tracking_uri(cfg))
    exp = client.get_experiment_by_name(cfg.name)
    parent = client.search_runs([exp.experiment_id], "tags.`autotune.kind` = 'study'")[0]
    note = parent.data.tags["mlflow.note.content"]
    on, _, off = note.partition("recommended but not on the Pareto front")
    assert "no config is better on every objective" in on and "| trial 0 |" not in on
    assert "[trial 1]" in on and "| trial 0 |" in off or "[trial 0]" in off, note


def test_one_mlflow_run_holds_the_pick_after_the_recommendation_moves(
        tmp_path: Path, tiny_model: Path) -> None:
    """Issue 70, item 2: `autotune.pick = recommended` sat on trials 0, 4 and 5, set on each
    front refresh and never removed. After the recommendation moves (a better config is
    measured, then MLflow is refreshed), one run holds it: the recommendation's."""
    from mlflow.tracking import MlflowClient

    from autotune.outputs.tracking import default_tracking_uri

    rows = [(0, {}, [5000.0, 2.0], None), (1, {"max_num_seqs": 8}, [6000.0, 1.8], None)]
    path = recorded_boots(tmp_path, tiny_model, rows, confirm=False)
    assert cli("sync", "--config", str(path)).returncode == 0
    cfg = load_study_config(path)
    st = optuna.load_study(study_name=cfg.name, storage=cfg.storage_url())
    facts = TrialFacts(flags={"max_num_seqs": 16}, flags_key="16",
                       metrics=dict(zip(cfg.metric_names(), [8000.0, 1.5], strict=True)))
    st.add_trial(optuna.trial.create_trial(values=[8000.0, 1.5], constraints={"boot_ok": 0.0},
                                           user_attrs=facts.to_attrs()))
    s = cli("sync", "--config", str(path))
    assert s.returncode == 0, s.stderr
    client = MlflowClient(default_tracking_uri(cfg))
    exp = client.get_experiment_by_name(cfg.name)
    holders = [int(r.data.tags["autotune.trial_number"]) for r in client.search_runs(
        [exp.experiment_id], "tags.`autotune.kind` = 'trial'")
        if r.data.tags.get("autotune.pick") == "recommended"]
    assert holders == [2], holders


def test_trials_pareto_and_export_show_one_value_for_the_defaults(tmp_path: Path,
                                                                  tiny_model: Path) -> None:
    """Issue 70, item 3: `trials` showed the defaults' first boot (4,025.10) where `pareto`
    and `export` showed their median over boots (4,081.05). `trials` now shows each boot of
    the defaults with the figure beside it that every gain divides by: their geometric mean
    over boots (issue 84 item 7: a median there stood above a trial that read a gain)."""
    rows = [(0, {}, [4025.10, 2.0], None), (1, {"max_num_seqs": 8}, [3000.0, 1.5], None),
            (2, {}, [4081.05, 2.1], 0), (3, {}, [4300.0, 1.9], 0)]
    path = recorded_boots(tmp_path, tiny_model, rows, confirm=False)
    t = " ".join(cli("trials", "--config", str(path)).stdout.split())
    assert "4,025.10; geo. mean 4,133.70 of 3 boots" in t
    assert "4,300.00; geo. mean 4,133.70 of 3 boots" in t  # a repeat boot of theirs
    assert "3,000.00 (-27.4%, one measurement)" in t  # 3,000 over 4,133.70
    p = cli("pareto", "--config", str(path)).stdout
    base_row = next(ln for ln in p.splitlines() if ln.startswith("│ 0"))
    assert "4,081.05" in base_row and "4,025.10" not in base_row
    e = cli("export", "--config", str(path), "--trial", "0")
    assert "total_token_throughput 4,081.05 [" in " ".join(e.stderr.split())


def test_a_dataset_study_exports_the_requests_it_kept_and_says_what_it_dropped(
        tmp_path: Path, tiny_model: Path) -> None:
    """Issue 70, item 6: a JSONL study dropped its over-long lines before the first boot, but
    export's `vllm bench serve --dataset-path` pointed at the whole file and neither export nor
    the report said so. Export now writes the kept lines beside its config and points the line
    at them; export and the report name the drop (the end of a study does too:
    session/study.py, from the preflight's count)."""
    import json
    import shlex

    data = tmp_path / "reqs.jsonl"
    lines = ['{"prompt": "hello there", "output_tokens": 4}',
             '{"prompt": "' + "word " * 3000 + '", "output_tokens": 4}',
             '{"prompt": "a short one", "output_tokens": 4}']
    data.write_text("\n".join(lines) + "\n")
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({
        "name": "jsonl", "server": {"model": str(tiny_model), "args": {"max_model_len": 128}},
        "profile": {"name": "dataset", "path": str(data), "num_prompts": 4},
        "search_space": "cpu-demo", "workdir": str(tmp_path / "w")}))
    cfg = load_study_config(path)
    Path(cfg.workdir).mkdir(parents=True, exist_ok=True)
    st = optuna.create_study(study_name=cfg.name, storage=cfg.storage_url(),
                             directions=["maximize", "minimize"])
    st.set_metric_names(cfg.metric_names())
    facts = TrialFacts(flags={}, flags_key="0", baseline=True,
                       metrics=dict(zip(cfg.metric_names(), [100.0, 20.0], strict=True)))
    st.add_trial(optuna.trial.create_trial(values=[100.0, 20.0], constraints={"boot_ok": 0.0},
                                           user_attrs=facts.to_attrs()))
    e = cli("export", "--config", str(path))
    assert e.returncode == 0, e.stderr
    err = " ".join(e.stderr.split())
    assert "3 requests, 2 kept, 1 dropped before the first boot" in err
    bench = next(ln.strip() for ln in e.stderr.splitlines() if " bench serve " in ln)
    argv = shlex.split(bench)
    kept = Path(argv[argv.index("--dataset-path") + 1])
    assert kept != data and kept.read_text().splitlines() == [lines[0], lines[2]]
    assert json.loads((kept.parent / "export.json").read_text())["dataset_dropped"]
    r = cli("report", "--config", str(path), "--out", str(tmp_path / "report"))
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "report" / "report.md").read_text()
    assert "- measured on the requests kept: dataset " in md and "1 dropped" in md
