from pathlib import Path

import pytest

from autotune.config.study import load_study_config
from autotune.config.workload import ProfileConfig
from autotune.errors import ConfigError

BASE = """
name: s
server: {model: /m}
search_space: cpu-demo
"""


def test_presets() -> None:
    assert ProfileConfig(name="throughput").lengths() == (1024, 128)
    assert ProfileConfig(name="long-context").lengths() == (32000, 100)
    assert ProfileConfig(name="generation-heavy").lengths() == (1000, 2000)
    assert ProfileConfig(name="generation-heavy").required_model_len() == 3000
    assert ProfileConfig(name="sharegpt").lengths() == (None, None)


def test_defaults_and_overrides(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(BASE)
    cfg = load_study_config(p, {"n_trials": 3, "sampler.name": "random"})
    assert cfg.n_trials == 3 and cfg.sampler.name == "random"
    assert [o.metric for o in cfg.objectives] == ["total_token_throughput", "mean_tpot_ms"]
    assert cfg.storage_url().startswith("sqlite:///") and cfg.storage_url().endswith("optuna.db")


@pytest.mark.parametrize(
    ("extra", "expect"),
    [
        ("servr: {}\n", "servr: unknown key"),
        ("n_trials: -1\n", "n_trials: Input should be greater than or equal to 1"),
        ("objectives: [{metric: speed, direction: maximize}]\n", "unknown metric 'speed'"),
        ("slos: [{metric: p99_ttft_ms}]\n", "give exactly one of max or min"),
        ("profile: {name: huge}\n", "profile.name"),
    ],
)
def test_bad_study_files(tmp_path: Path, extra: str, expect: str) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(BASE + extra)
    with pytest.raises(ConfigError) as ei:
        load_study_config(p)
    assert expect in str(ei.value) and str(p) in str(ei.value)


ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("path", sorted([*(ROOT / "examples").glob("cpu-*.yaml"),
                                         *(ROOT / "lab/examples").glob("cpu-*.yaml")]),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cpu_example_fits_its_space(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each CPU example loads, and every profile it runs fits the max_model_len its space
    gives (the built-in cpu-small suite once asked 776 tokens of a 512-token space)."""
    from autotune.config.study import load_study_config
    from autotune.tuning.preflight import check_model_len
    from autotune.tuning.search_space import load_search_space

    monkeypatch.chdir(ROOT)  # spaces given as paths are relative to the repository
    cfg = load_study_config(path)
    check_model_len(cfg, load_search_space(cfg.search_space))


@pytest.mark.parametrize("path", sorted([*(ROOT / "examples").glob("*.yaml"),
                                         *(ROOT / "lab/examples").glob("*.yaml")]),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_works_from_the_repository_alone(path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 70, item 6: the GPU examples named /root/w/... (a lent machine's layout) and told
    the reader to follow ../shared/gpu/README.md, outside the repository. Every example's model,
    draft models and files are the repository's (run from its root), built by a command its
    own comments give, or a Hugging Face hub id (the user's examples: real weights); no path
    outside it; its instructions are in the repository."""
    import yaml

    from autotune.config.hub import is_local
    from autotune.config.study import load_study_config
    from autotune.tuning.search_space import load_search_space

    text = path.read_text()
    doc = yaml.safe_load(text)
    if "server" not in doc:  # a search space beside its study file
        return
    monkeypatch.chdir(ROOT)
    cfg = load_study_config(path)
    load_search_space(cfg.search_space)
    assert "/root/" not in text and "../shared" not in text, path.name
    assert not Path(cfg.workdir).is_absolute() and not str(cfg.workdir).startswith("..")
    models = [cfg.server.model, *cfg.server.draft_models]
    for m in models:
        assert not Path(m).is_absolute(), m
        built = f"make-real-model {m}" in text or f"make-tiny-model {m}" in text
        hub_id = not is_local(m) and m.count("/") == 1
        assert built or hub_id or (ROOT / m / "config.json").is_file(), (path.name, m)
