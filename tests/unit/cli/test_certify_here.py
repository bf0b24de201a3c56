"""`autotune study --certify-here` (issue 80: certify on the machine a study was resumed on):
what the flag sets, and the combinations it refuses with one clear error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

EXAMPLE = Path(__file__).parents[3] / "examples" / "cpu-demo.yaml"


def test_the_flag_certifies_here_and_refuses_no_certify(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune import api
    from autotune.cli import cli as main

    seen: list[Any] = []
    monkeypatch.setattr(api, "run_session", lambda cfg, *_a: seen.append(cfg))
    ok = CliRunner().invoke(main, ["study", "--config", str(EXAMPLE), "--certify-here"])
    assert ok.exit_code == 0, ok.output
    assert seen[0].certify.here and seen[0].certify.when == "always" and seen[0].planned()
    plain = CliRunner().invoke(main, ["study", "--config", str(EXAMPLE)])
    assert plain.exit_code == 0 and not seen[1].certify.here
    bad = CliRunner().invoke(main, ["study", "--config", str(EXAMPLE), "--certify-here",
                                    "--no-certify"])
    assert bad.exit_code == 2 and "drop --no-certify" in bad.output


def test_workers_are_refused_with_the_field_named(tmp_path: Path) -> None:
    from autotune.config.study import load_study_config
    from autotune.errors import ConfigError
    from autotune.session.study import SessionOptions, pooled_config

    cfg = load_study_config(EXAMPLE, {"certify.here": True, "workdir": str(tmp_path)})
    with pytest.raises(ConfigError, match="--certify-here .* drop --workers"):
        pooled_config(cfg, SessionOptions(EXAMPLE, None, True, 5, 2, None, None, None, False))


def test_a_study_with_no_trials_is_one_clear_error(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.config.study import load_study_config
    from autotune.errors import ConfigError
    from autotune.session import study as mod

    cfg = load_study_config(EXAMPLE, {"certify.here": True, "workdir": str(tmp_path)})
    monkeypatch.setattr(mod, "before_trials", lambda cfg, opts: (None, 0))
    with pytest.raises(ConfigError, match="no trials to certify .* without --certify-here"):
        mod.run_session(cfg, mod.SessionOptions(EXAMPLE, None, True))
