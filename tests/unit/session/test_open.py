"""--force-new (session/open.py start_afresh): the study of that name, its folder and its MLflow
experiment are kept under a new name, so the fresh study's runs never join the old one's."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.outputs.tracking import Tracker
from autotune.session.open import start_afresh
from tests.unit.tuning.test_identity import cfg_of, pre_of


def test_force_new_renames_the_study_and_its_mlflow_experiment(tmp_path: Path) -> None:
    from autotune.tuning.study import open_study

    cfg = cfg_of(tmp_path)
    open_study(cfg, pre=pre_of(cfg)).add_trial(optuna.trial.create_trial(values=[1.0, 2.0]))
    old = Tracker(cfg)
    old.open_run(optuna.load_study(study_name=cfg.name, storage=cfg.storage_url()), {})
    assert old.experiment_id is not None and old.parent_id is not None
    start_afresh(cfg, None, no_mlflow=False)
    (new,) = [s for s in optuna.get_all_study_names(cfg.storage_url()) if s != cfg.name]
    exp = old.client.get_experiment(old.experiment_id)
    assert exp.name == new and exp.tags["autotune.study"] == new
    # the fresh study gets an experiment and a study run of its own
    fresh = Tracker(cfg)
    fresh.open_run(open_study(cfg, pre=pre_of(cfg)), {})
    assert fresh.experiment_id not in (None, old.experiment_id)
    assert fresh.parent_id not in (None, old.parent_id)
