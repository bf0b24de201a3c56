"""A hub id's tokenizer and config, found as vLLM finds them (autotune.config.hub): in a hub
cache laid out as huggingface_hub lays it out, or asked of the hub; never the network here."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from autotune.config import hub
from autotune.config.study import model_max_len
from autotune.errors import ConfigError
from autotune.load.datasets import load_tokenizer
from autotune.tuning.preflight import check_model


def fake_cache(root: Path, tiny_model: Path, repo: str = "org/name", rev: str = "abc123"
               ) -> Path:
    """`root` as a hub cache holding `repo` at `rev` (refs/main) with tiny_model's files."""
    folder = root / ("models--" + repo.replace("/", "--"))
    snap = folder / "snapshots" / rev
    snap.mkdir(parents=True)
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_model / f, snap / f)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(rev)
    return snap


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache, offline: nothing here may reach the network."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return tmp_path / "hub"


def test_a_hub_id_in_the_hub_cache_resolves(cache: Path, tiny_model: Path) -> None:
    snap = fake_cache(cache, tiny_model)
    assert hub.cached("org/name") == str(snap)
    assert hub.local_dir("org/name", "server.model") == str(snap)
    check_model("org/name")  # the study's preflight: tokenizer.json found, nothing raised
    check_model(str(tiny_model), tokenizer="org/name")
    assert load_tokenizer("org/name").encode("hello").ids
    assert model_max_len("org/name") == model_max_len(str(tiny_model))
    assert hub.cached(str(tiny_model)) == str(tiny_model)  # a path stays itself


def test_hf_home_sets_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                tiny_model: Path) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snap = fake_cache(tmp_path / "hf" / "hub", tiny_model)
    assert hub.cached("org/name") == str(snap)


def test_an_unknown_id_offline_is_one_clear_error(cache: Path) -> None:
    with pytest.raises(ConfigError) as e:
        check_model("meta-llama/Llama-3.1-8B-Instruct")
    text = str(e.value)
    assert text.startswith("server.model: 'meta-llama/Llama-3.1-8B-Instruct' is not a folder")
    for said in ("HF_HUB_OFFLINE is set", str(cache), "hf download meta-llama/Llama-3.1-8B",
                 "huggingface-cli download", "HF_TOKEN", "set server.tokenizer to a local "
                 "folder"):
        assert said in text, text
    assert "--tokenizer DIR" not in text
    with pytest.raises(ConfigError, match=r"^server\.tokenizer: 'org/other' is not a folder"):
        check_model("meta-llama/Llama-3.1-8B-Instruct", tokenizer="org/other")
    with pytest.raises(ConfigError, match=r"^server\.tokenizer: 'org/other' is not a folder"):
        load_tokenizer("org/other")
    assert model_max_len("org/other") is None  # unknown: the boot decides


def test_a_missing_id_is_downloaded_with_the_tokenizer_and_config_only(
        cache: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.delenv("HF_HUB_OFFLINE")
    calls: list[dict[str, Any]] = []

    def download(repo: str, **kw: Any) -> str:
        calls.append({"repo": repo, **kw})
        if kw["local_files_only"]:
            raise LocalEntryNotFoundError("not in the cache")
        return str(fake_cache(cache, tiny_model, repo))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    check_model("org/name")
    assert [c["local_files_only"] for c in calls] == [True, False]
    assert calls[1]["allow_patterns"] == ["config.json", "tokenizer.json",
                                          "tokenizer_config.json"]  # not the weights
    assert calls[1]["cache_dir"] == str(cache)


def test_a_gated_model_says_hf_token(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError

    monkeypatch.delenv("HF_HUB_OFFLINE")

    def download(repo: str, **kw: Any) -> str:
        if kw["local_files_only"]:
            raise LocalEntryNotFoundError("not in the cache")
        # made without the HTTP response its constructor wants: only its class is read
        raise GatedRepoError.__new__(GatedRepoError)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    with pytest.raises(ConfigError, match=r"a gated model, and HF_TOKEN is not set"):
        check_model("meta-llama/Llama-3.1-8B-Instruct")
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    with pytest.raises(ConfigError, match=r"a gated model, and HF_TOKEN's account has no "
                                          r"access to it"):
        check_model("meta-llama/Llama-3.1-8B-Instruct")


def test_a_snapshot_without_tokenizer_json_names_the_fix(cache: Path, tiny_model: Path
                                                         ) -> None:
    snap = fake_cache(cache, tiny_model)
    (snap / "tokenizer.json").unlink()
    with pytest.raises(ConfigError, match=r"^server\.model: no tokenizer\.json in 'org/name' "
                                          r"\(the hub's files, .*\); .*set server\.tokenizer"):
        check_model("org/name")
