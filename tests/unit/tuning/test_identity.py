"""A study's identity (tuning/identity.py): what changes what its numbers mean is recorded when
the study is created and a study file that differs is refused with each difference named; what
a resume may change is not part of it. --force-new sets the old study aside, nothing lost."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from autotune.config.study import StudyConfig
from autotune.errors import StudyError
from autotune.tuning.identity import check_identity, differences, identity, set_aside
from autotune.tuning.record import StudyFacts, study_facts, write_study_facts
from autotune.tuning.search_space import SearchSpace, study_space
from autotune.tuning.study import open_study, stored_config


def cfg_of(tmp_path: Path, **extra: Any) -> StudyConfig:
    data: dict[str, Any] = {
        "name": "s", "server": {"model": "/models/a", "executable": ["vllm"]},
        "profile": {"name": "random", "input_len": 1024, "output_len": 128, "num_prompts": 50},
        "slos": [{"metric": "p99_ttft_ms", "max": 2000}],
        "search_space": "cpu-demo", "workdir": str(tmp_path / "w")}
    for dotted, v in extra.items():  # server__model=... sets server.model
        node = data
        *parents, leaf = dotted.split("__")
        for k in parents:
            node = node.setdefault(k, {})
        node[leaf] = v
    return StudyConfig.model_validate(data)


def space_of(cfg: StudyConfig) -> SearchSpace:
    return study_space(cfg.search_space, cfg.server.draft_models)


def pre_of(cfg: StudyConfig) -> Any:
    """What open_study reads of a preflight: the space as the study searches it."""
    return SimpleNamespace(space=space_of(cfg))


def ident(cfg: StudyConfig) -> dict[str, Any]:
    return identity(cfg, space_of(cfg))


def test_what_a_resume_may_change_is_not_part_of_it(tmp_path: Path) -> None:
    a = ident(cfg_of(tmp_path))
    for change in ({"n_trials": 40}, {"timeout_s": 600.0}, {"budget_gpu_minutes": 30.0},
                   {"sampler__name": "random"}, {"sampler__seed": 7},
                   {"certify__when": "never"}, {"confirm__top": 3}, {"quality__when": "never"},
                   {"workdir": str(tmp_path / "elsewhere")}, {"profile__client_processes": 4},
                   {"profile__client_cpus": "any"}, {"server__boot_timeout_s": 900.0},
                   {"server__env": {"VLLM_CPU_KVCACHE_SPACE": "2"}}):
        assert differences(a, ident(cfg_of(tmp_path, **change))) == [], change


def test_each_difference_is_named_old_then_new(tmp_path: Path) -> None:
    a = ident(cfg_of(tmp_path))
    assert differences(a, ident(cfg_of(tmp_path, server__model="/models/b"))) == [
        'server.model: "/models/a" -> "/models/b"']
    assert differences(a, ident(cfg_of(tmp_path, profile__input_len=128))) == [
        "profile.input_len: 1024 -> 128"]
    # a fixed flag added: not set before (vLLM's default)
    assert differences(a, ident(cfg_of(tmp_path, server__args={"max_model_len": 2048}))) == [
        "server.args.max_model_len: - -> 2048"]
    assert differences(a, ident(cfg_of(tmp_path, slos=[
        {"metric": "p99_ttft_ms", "max": 500}]))) == [
        'slos: ["p99_ttft_ms <= 2000"] -> ["p99_ttft_ms <= 500"]']
    assert differences(a, ident(cfg_of(tmp_path, objectives=[
        {"metric": "total_token_throughput", "direction": "maximize"}]))) == [
        'objectives: ["maximize total_token_throughput", "minimize mean_tpot_ms"] -> '
        '["maximize total_token_throughput"]']
    other_space = [d for d in differences(a, ident(cfg_of(tmp_path, search_space="throughput")))]
    assert other_space and all(d.startswith("search_space.") for d in other_space)


def test_a_capacity_search_is_its_axis_and_range_not_its_precision(tmp_path: Path) -> None:
    cap = {"axis": "concurrency", "low": 1, "high": 64}
    objs = [{"metric": "capacity", "direction": "maximize"}]
    a = ident(cfg_of(tmp_path, capacity=cap, objectives=objs))
    assert differences(a, ident(cfg_of(tmp_path, objectives=objs, capacity={
        **cap, "tolerance": 0.1, "samples": 3, "requests_per_point": 100}))) == []
    assert differences(a, ident(cfg_of(tmp_path, objectives=objs,
                                       capacity={**cap, "high": 256}))) == [
        "capacity.high: 64.0 -> 256.0"]


def test_a_new_study_records_it_and_the_same_file_resumes(tmp_path: Path) -> None:
    cfg = cfg_of(tmp_path)
    st = open_study(cfg, pre=pre_of(cfg))
    assert study_facts(st).identity == ident(cfg)
    st.enqueue_trial({})
    again = open_study(cfg_of(tmp_path, n_trials=30, sampler__name="random"),
                       pre=pre_of(cfg))
    assert len(again.get_trials()) == 1


def test_another_model_or_workload_under_the_same_name_is_refused(tmp_path: Path) -> None:
    """Issue 84: the GPU example copied with its `name:` kept, run on another workload: the
    trial was scored -53.7% against the old workload's baseline, without a word."""
    cfg = cfg_of(tmp_path)
    open_study(cfg, pre=pre_of(cfg)).enqueue_trial({})
    other = cfg_of(tmp_path, server__model="/models/b", profile__input_len=128)
    with pytest.raises(StudyError) as e:
        open_study(other, pre=pre_of(other))
    msg = str(e.value)
    assert "study 's' in sqlite:///" in msg and "was created for another setup" in msg
    assert 'server.model: "/models/a" -> "/models/b"' in msg
    assert "profile.input_len: 1024 -> 128" in msg
    assert "new `name:`" in msg and "--force-new" in msg
    # objectives with other directions: the same error, not the directions one
    flipped = cfg_of(tmp_path, objectives=[{"metric": "mean_tpot_ms", "direction": "minimize"},
                                           {"metric": "total_token_throughput",
                                            "direction": "maximize"}])
    with pytest.raises(StudyError, match="objectives: "):
        open_study(flipped, pre=pre_of(flipped))


def test_a_study_from_before_identities_is_checked_by_its_stored_config(
        tmp_path: Path) -> None:
    """A study created before this change has its config and space stored, no identity: the
    same file resumes it (and records the identity); another model is refused."""
    cfg = cfg_of(tmp_path)
    st = open_study(cfg)  # no preflight: nothing checked, nothing recorded
    write_study_facts(st, StudyFacts(config=stored_config(cfg),
                                     search_space=space_of(cfg).model_dump(mode="json")))
    assert study_facts(st).identity is None
    other = cfg_of(tmp_path, server__model="/models/b")
    with pytest.raises(StudyError, match='server.model: "/models/a" -> "/models/b"'):
        check_identity(st, other, space_of(other))
    assert study_facts(st).identity is None
    check_identity(st, cfg, space_of(cfg))
    assert study_facts(st).identity == ident(cfg)


def test_a_study_from_before_with_nothing_to_compare_resumes(tmp_path: Path) -> None:
    cfg = cfg_of(tmp_path)
    st = open_study(cfg)
    write_study_facts(st, StudyFacts(config={"name": "s", "a_key_autotune_dropped": 1},
                                     search_space={"name": "x"}))
    check_identity(st, cfg, space_of(cfg))  # an old config that no longer parses
    assert study_facts(st).identity == ident(cfg)


def test_force_new_keeps_the_old_study_under_a_new_name(tmp_path: Path) -> None:
    cfg = cfg_of(tmp_path)
    assert set_aside(cfg) is None  # no study yet: nothing to set aside
    st = open_study(cfg, pre=pre_of(cfg))
    st.add_trial(optuna.trial.create_trial(values=[1.0, 2.0]))
    log = cfg.study_dir() / "trial-0000" / "server.log"
    log.parent.mkdir(parents=True)
    log.write_text("booted")
    new = set_aside(cfg)
    assert new is not None and new.startswith("s.old-")
    assert set_aside(cfg) is None
    old = optuna.load_study(study_name=new, storage=cfg.storage_url())
    assert len(old.get_trials()) == 1 and study_facts(old).identity == ident(cfg)
    assert (cfg.study_dir().parent / new / "trial-0000" / "server.log").read_text() == "booted"
    assert not cfg.study_dir().exists()
    other = cfg_of(tmp_path, server__model="/models/b")
    fresh = open_study(other, pre=pre_of(other))  # the name is free: a fresh study
    assert fresh.get_trials() == [] and study_facts(fresh).identity == ident(other)
    # twice in one second: a name of its own each time
    assert set_aside(other) not in (None, new)


def test_a_resume_may_sample_the_same_load_longer_or_shorter(tmp_path: Path) -> None:
    """num_prompts sets how long a measurement samples, not what it measures: a resume cut to
    8 requests is the same study, and so is one whose identity was recorded when it counted."""
    cfg = cfg_of(tmp_path)
    a = ident(cfg)
    shorter = cfg_of(tmp_path, profile__num_prompts=8)
    assert differences(a, ident(shorter)) == []
    study = optuna.create_study()
    write_study_facts(study, StudyFacts(identity={**a, "profile.num_prompts": 50}))
    check_identity(study, shorter, space_of(shorter))  # not refused
    other = cfg_of(tmp_path, profile__num_prompts=8, profile__input_len=128)
    with pytest.raises(StudyError, match="profile.input_len: 1024 -> 128"):
        check_identity(study, other, space_of(other))
