"""`autotune replay` through the real CLI on a small table written straight into a study's
storage (the replay reads measured trials only; nothing boots)."""

import json
import subprocess
import sys
from pathlib import Path

import optuna
import yaml

from autotune.config.study import SamplerConfig, load_study_config
from autotune.tuning.study import open_study


def table_study(tmp_path: Path, tiny_model: Path) -> Path:
    """max_num_seqs {None, 8, 16} x prefix caching {False, True}: (16, True) is the best."""
    p = tmp_path / "table.yaml"
    p.write_text(yaml.safe_dump({
        "name": "t", "server": {"model": str(tiny_model)}, "search_space": "cpu-table",
        "objectives": [{"metric": "total_token_throughput", "direction": "maximize"}],
        "workdir": str(tmp_path / "w")}))
    st = open_study(load_study_config(p))
    st.set_metric_names(["total_token_throughput"])
    dist = {"max_num_seqs": optuna.distributions.CategoricalDistribution([None, 8, 16]),
            "enable_prefix_caching": optuna.distributions.CategoricalDistribution([False, True])}
    for i, seqs in enumerate((None, 8, 16)):
        for j, pc in enumerate((False, True)):
            st.add_trial(optuna.trial.create_trial(
                params={"max_num_seqs": seqs, "enable_prefix_caching": pc}, distributions=dist,
                values=[v := 100.0 + 10 * i + 5 * j],
                user_attrs={"flags": {}, "metrics": {"total_token_throughput": v}}))
    return p


def replay(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune", "replay", "--config", str(cfg),
                           *args], capture_output=True, text=True, timeout=300)


def test_replay_with_warm_starts_and_its_errors(tmp_path: Path, tiny_model: Path) -> None:
    cfg = table_study(tmp_path, tiny_model)
    for args, expect in (
            (["--samplers", "tpe-starts"], "--samplers tpe-starts: no starts to replay"),
            (["--start", "max_num_seqs=999"],
             "--start 1: max_num_seqs=999 was never measured in the table"),
            (["--samplers", "tpe,bayes"], "--samplers: unknown bayes"),
            (["--metric", "mean_tpot_ms"], "study 't' has no trial that measured mean_tpot_ms")):
        p = replay(cfg, *args)
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        assert expect in " ".join(p.stderr.split()), p.stderr
    out = tmp_path / "out"
    p = replay(cfg, "--seeds", "3", "--start", "max_num_seqs=16,enable_prefix_caching=true",
               "--samplers", "tpe,tpe-starts,one-knob", "--out", str(out))
    assert p.returncode == 0, p.stderr
    got = json.loads((out / "summary.json").read_text())
    assert got["baseline_first"] is True and got["configs"] == 6
    assert got["n_startup_trials"] == SamplerConfig().n_startup_trials  # a study's default
    assert got["starts"] == [{"max_num_seqs": 16, "enable_prefix_caching": True}]
    # the baseline, then the start at the best config: within 2% at trial 2 on every seed
    assert got["samplers"]["tpe-starts"]["median_trials_to_2pct"] == 2
    assert (out / "curves.png").stat().st_size > 0
    # the table.json it wrote replays the same, without the storage
    again = tmp_path / "again"
    p = replay(cfg, "--seeds", "3", "--start", "max_num_seqs=16,enable_prefix_caching=true",
               "--samplers", "tpe,tpe-starts,one-knob", "--table", str(out / "table.json"),
               "--storage", f"sqlite:///{tmp_path}/none.db", "--out", str(again))
    assert p.returncode == 0, p.stderr
    assert json.loads((again / "summary.json").read_text())["samplers"] == got["samplers"]
    p = replay(cfg, "--seeds", "2", "--samplers", "tpe", "--n-startup-trials", "0", "--table",
               str(out / "table.json"), "--out", str(again))
    assert p.returncode == 0, p.stderr
    assert json.loads((again / "summary.json").read_text())["n_startup_trials"] == 0
    bad = tmp_path / "bad.json"
    bad.write_text('{"params": 1}')
    p = replay(cfg, "--table", str(bad))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "not a table.json" in p.stderr
