"""The study's sampler: the configured Optuna sampler, with TPE wrapped so that it never
proposes a measured configuration again."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config.study import StudyConfig


class NoRepeatSampler(optuna.samplers.BaseSampler):
    """Wraps a model-based sampler so that it never proposes again the params of a finished or
    running trial. With few trials, multivariate TPE models its "good" set on one or two trials
    and its best candidate is often one of them (the fourth H100 study ran trials 6 and 7 with
    the same flags: 170 s of boot and benchmark, and one of its 16 trials, for no new
    information). A repeated sample is drawn again up to `tries` times; if the model keeps
    choosing measured points, an unmeasured point is drawn at random from the same space."""

    def __init__(self, inner: optuna.samplers.BaseSampler, seed: int | None = None,
                 tries: int = 10) -> None:
        self.inner, self.tries = inner, tries
        self.random = optuna.samplers.RandomSampler(seed=seed)

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, optuna.distributions.BaseDistribution]:
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial,
        search_space: dict[str, optuna.distributions.BaseDistribution],
    ) -> dict[str, Any]:
        params = self.inner.sample_relative(study, trial, search_space)
        if not params:  # start-up trials: the inner sampler draws each parameter on its own
            return params

        def key(p: dict[str, Any]) -> str:
            return json.dumps({k: p.get(k) for k in params}, sort_keys=True, default=str)

        seen = {key(t.params) for t in study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
            if t.number != trial.number}
        for _ in range(self.tries):
            if key(params) not in seen:
                return params
            params = self.inner.sample_relative(study, trial, search_space)
        for _ in range(100 * self.tries):  # cheap: no model
            params = {name: self.random.sample_independent(study, trial, name, dist)
                      for name, dist in search_space.items()}
            if key(params) not in seen:
                break
        return params

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str,
        param_distribution: optuna.distributions.BaseDistribution,
    ) -> Any:
        return self.inner.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()


def make_sampler(cfg: StudyConfig, resumed_at: int = 0) -> optuna.samplers.BaseSampler:
    """The configured sampler. A resumed study offsets the seed by its trial count: the same
    seed would replay the random start-up draws of the first run (seen on the H100 study,
    where trials 3 and 4 repeated trials 1 and 2 after a restart)."""
    s = cfg.sampler
    seed = None if s.seed is None else s.seed + resumed_at
    if s.name == "tpe":
        return NoRepeatSampler(optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=s.n_startup_trials, multivariate=True, group=True),
            seed=seed)
    if s.name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=s.population_size)
    if s.name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=s.n_startup_trials)
    if s.name == "grid":  # the grid is enqueued (study.enqueue_grid); nothing is sampled
        return NoRepeatSampler(optuna.samplers.RandomSampler(seed=seed), seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)
