"""The TPE wrapper that draws again instead of proposing a configuration already measured."""

from __future__ import annotations

import json

import optuna

from autotune.tuning.sampler import NoRepeatSampler

CHOICES = {"x": [0, 1, 2, 3], "y": [0, 1]}


def _run(sampler: optuna.samplers.BaseSampler, n: int) -> list[str]:
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    keys = []
    for _ in range(n):
        t = study.ask()
        p = {k: t.suggest_categorical(k, v) for k, v in CHOICES.items()}
        study.tell(t, [p["x"] + p["y"], p["y"]])
        keys.append(json.dumps(p, sort_keys=True))
    return keys


def _tpe(seed: int) -> optuna.samplers.TPESampler:
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=3, multivariate=True,
                                      group=True)


def test_plain_tpe_repeats_itself_on_a_small_space() -> None:
    # the behaviour the wrapper exists for: with a clear winner, TPE proposes it again
    repeats = sum(len(k) - len(set(k)) for k in (_run(_tpe(s), 8) for s in range(5)))
    assert repeats > 0


def test_no_repeat_sampler_proposes_new_configurations_until_none_is_left() -> None:
    for seed in range(5):
        keys = _run(NoRepeatSampler(_tpe(seed), seed=seed), 8)
        after_startup = keys[3:]
        # the 3 random start-up trials may collide (each parameter is drawn on its own); no
        # model-based trial repeats any earlier trial
        assert all(k not in keys[:i + 3] for i, k in enumerate(after_startup)), keys
        # once every configuration has been measured it gives up after its tries, never hangs
        assert len(_run(NoRepeatSampler(_tpe(seed), seed=seed), 10)) == 10
