"""`autotune acceptance` (session/acceptance.py): vLLM's spec_decode counters over a run read as
the profile a shape-only study declares; what it refuses, before any boot."""

from __future__ import annotations

import pytest

from autotune.config.acceptance import AcceptanceProfile
from autotune.config.study import StudyConfig
from autotune.errors import ConfigError
from autotune.session.acceptance import AcceptanceOptions, profile_of


def cfg(**server: object) -> StudyConfig:
    return StudyConfig.model_validate({
        "name": "s", "server": {"model": "/m", "executable": ["vllm"], **server},
        "search_space": "cpu-demo"})


def test_the_counters_read_as_a_profile_the_study_file_takes() -> None:
    counts = {"server_spec_drafts": 200.0, "server_spec_accepted_tokens": 170.0,
              "server_spec_accepted_pos_0": 100.0, "server_spec_accepted_pos_1": 50.0,
              "server_spec_accepted_pos_2": 20.0}
    found = profile_of(counts, 3)
    assert found == {"mean_length": 1.85, "measured_k": 3, "drafts": 200.0,
                     "rates": [0.5, 0.25, 0.1]}
    # 20 requests of 32 tokens: 620 tokens after the prefills', 170 of them accepted drafts,
    # so 450 decode steps, 200 of which drafted
    assert profile_of(counts, 3, output_tokens=640, requests=20)["draft_share"] == 0.4444
    declared = AcceptanceProfile(rates=found["rates"])
    assert declared.mean_length_at(3) == pytest.approx(found["mean_length"])
    # a vLLM without the per-position counter: the mean length alone
    assert profile_of({"server_spec_drafts": 10.0, "server_spec_accepted_tokens": 5.0}, 2) == {
        "mean_length": 1.5, "measured_k": 2, "drafts": 10.0}
    assert profile_of({}, 3) is None


def test_what_it_refuses_before_a_boot() -> None:
    with pytest.raises(ConfigError, match="measured on the model's own weights"):
        AcceptanceOptions("ngram", 3).check(cfg(shape_only=True))
    with pytest.raises(ConfigError, match="--draft PATH"):
        AcceptanceOptions("draft_model", 3).check(cfg())
    with pytest.raises(ConfigError, match="use --method draft_model"):
        AcceptanceOptions("ngram", 3, draft="/d").check(cfg())
    AcceptanceOptions("ngram", 3).check(cfg())


def test_spec_keys_reach_the_launch_and_the_profile_names_them(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--spec prompt_lookup_max=6 --spec prompt_lookup_min=2`: the boot's speculative_config
    takes them over the ngram default (4); n-gram gets no study-file entry (a shape-only study
    cannot emulate it), a draft model's entry's source says what was measured;
    --method's, --k's and --draft's own keys are refused, and a bad KEY=VALUE is one error."""
    from pathlib import Path
    from types import SimpleNamespace

    from click.testing import CliRunner

    from autotune.cli import cli as main
    from autotune.session import acceptance

    launched: list[dict[str, object]] = []

    def boot(server: object, profiles: object, flags: dict[str, object], run_dir: Path,
             **_kw: object) -> SimpleNamespace:
        launched.append(flags["speculative_config"])  # type: ignore[arg-type]
        stats = {"server_spec_drafts": 10.0, "server_spec_accepted_tokens": 4.0,
                 "server_spec_accepted_pos_0": 3.0, "server_spec_accepted_pos_1": 1.0}
        return SimpleNamespace(point=SimpleNamespace(
            server_stats=stats, metrics=SimpleNamespace(completed=8, total_output_tokens=128)),
            log_path="x.log")

    monkeypatch.setattr(acceptance, "run_boot", boot)
    opts = AcceptanceOptions("ngram", 2, extra=(("prompt_lookup_max", 6),
                                                ("prompt_lookup_min", 2)))
    doc = acceptance.measure_acceptance(cfg(), opts, Path(str(tmp_path)))
    assert launched == [{"method": "ngram", "num_speculative_tokens": 2,
                         "prompt_lookup_max": 6, "prompt_lookup_min": 2}]
    # n-gram drafts from the text: no entry for a shape-only study, which cannot emulate it
    assert "study_file_entry" not in doc and doc["draft_share"] == round(10 / 116, 4)
    # n-gram that never drafted: the answer (it cannot gain on this workload), not an error
    monkeypatch.setattr(acceptance, "run_boot", lambda *a, **k: SimpleNamespace(
        point=SimpleNamespace(server_stats={}, metrics=SimpleNamespace(
            completed=8, total_output_tokens=128)), log_path="x.log"))
    doc = acceptance.measure_acceptance(cfg(), AcceptanceOptions("ngram", 2), Path(str(tmp_path)))
    assert doc["drafts"] == 0.0 and doc["draft_share"] == 0.0
    monkeypatch.setattr(acceptance, "run_boot", boot)
    opts = AcceptanceOptions("draft_model", 2, draft="/d",
                             extra=(("draft_tensor_parallel_size", 1),))
    doc = acceptance.measure_acceptance(cfg(), opts, Path(str(tmp_path)))
    src = doc["study_file_entry"]["server"]["acceptance"]["draft_model"]["source"]
    assert "model=/d draft_tensor_parallel_size=1" in src
    with pytest.raises(ConfigError, match="--spec model: set by"):
        AcceptanceOptions("ngram", 3, extra=(("model", "/d"),)).check(cfg())
    example = Path(__file__).parents[2] / "examples" / "cpu-demo.yaml"
    bad = CliRunner().invoke(main, ["acceptance", "--config", str(example), "--method",
                                    "ngram", "--spec", "prompt_lookup_max"])
    assert bad.exit_code == 2 and "give KEY=VALUE" in bad.output
