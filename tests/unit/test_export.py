"""Export's choice of a trial from the front."""

import optuna

from autotune.export import knee
from autotune.results import front


def test_knee_picks_the_balanced_point() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    for v in ([100.0, 100.0], [90.0, 20.0], [10.0, 10.0]):
        study.add_trial(optuna.trial.create_trial(values=v))
    study.set_metric_names(["a", "b"])
    picked = knee(front(study), ["a", "b"], ["maximize", "minimize"])
    assert picked.values == {"a": 90.0, "b": 20.0}
