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


def test_knee_of_two_trials_weighs_relative_changes() -> None:
    """The H100 suite study's front (docs/results/suite-h100): trial 1 leads throughput by 0.2%,
    trial 5 has 23% lower TPOT. Scaled to [0, 1] over the front, both sat one unit from utopia
    and the first won the tie; by relative change trial 5 is the knee."""
    study = optuna.create_study(directions=["maximize", "minimize"])
    for v in ([1.1242, 0.8577], [1.1222, 0.6592]):
        study.add_trial(optuna.trial.create_trial(values=v))
    study.set_metric_names(["a", "b"])
    assert knee(front(study), ["a", "b"], ["maximize", "minimize"]).number == 1


def test_knee_falls_back_to_the_front_scale_for_values_at_or_below_zero() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    for v in ([0.0, 10.0], [5.0, 20.0], [10.0, 100.0]):
        study.add_trial(optuna.trial.create_trial(values=v))
    study.set_metric_names(["a", "b"])
    assert knee(front(study), ["a", "b"], ["maximize", "minimize"]).values == {"a": 5.0,
                                                                               "b": 20.0}
