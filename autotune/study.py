"""Create or load the Optuna study, check everything before the first boot, run the trials.

Preflight (before any server boots): the search space parses, the vLLM executable runs, every
flag and choice of the space exists in that vLLM (`vllm serve --help=all`), and max_model_len can
hold the profile. Then the storage is created once (parallel creators of one SQLite file race on
alembic's version table), the baseline (vLLM's defaults) is enqueued first, and trials run until
the study holds `n_trials` complete ones, so the same command resumes an interrupted study.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.bench import build_requests
from autotune.config import StudyConfig
from autotune.errors import ConfigError, StudyError
from autotune.objective import Objective, PhaseHook
from autotune.search_space import CategoricalParam, IntParam, SearchSpace, load_search_space
from autotune.vllm_info import VllmInfo, check_flags, get_vllm_info

# autotune reports trials itself; Optuna's own "Trial N failed" lines would repeat them with a
# traceback (an interrupted trial included)
optuna.logging.set_verbosity(optuna.logging.ERROR)
# multivariate/group TPE and metric names are "experimental" but stable enough for us
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


@dataclass(frozen=True)
class Preflight:
    space: SearchSpace
    vllm: VllmInfo


def preflight(cfg: StudyConfig, space: SearchSpace | None = None) -> Preflight:
    """Every check that can fail without booting a server. A worker passes the space stored
    in the study, so hosts need not hold the same search-space file."""
    space = space or load_search_space(cfg.search_space)
    cfg.server.check_executable()
    model = Path(cfg.server.model)
    # a path (not a hub name such as Qwen/Qwen3-8B) that is missing fails before any boot
    if cfg.server.model.startswith((".", "/", "~")) and not model.expanduser().exists():
        raise ConfigError(f"server.model: {cfg.server.model!r} does not exist (a model directory "
                          "or a model name the server can load)")
    _check_model_len(cfg, space)
    info = get_vllm_info(cfg.server.executable, cfg.server.env)  # ~15 s the first time
    flags: dict[str, list[object] | None] = {f: None for f in cfg.server.args}
    flags.update({f: [v] for f, v in space.fixed.items()})
    for name, p in space.parameters.items():
        flag = p.into or name
        choices = space.choices_by_flag().get(name) if not p.into else None
        flags[flag] = list(choices) if choices is not None else None
    check_flags(info, flags, f"search space {space.name!r}")
    return Preflight(space, info)


def _check_model_len(cfg: StudyConfig, space: SearchSpace) -> None:
    need = cfg.profile.required_model_len()
    fixed = {**cfg.server.args, **space.fixed}
    where, low = None, None
    if "max_model_len" in fixed:
        where, low = "max_model_len", int(fixed["max_model_len"])
    p = space.parameters.get("max_model_len")
    if isinstance(p, IntParam):
        where, low = f"parameters.max_model_len.low ({space.name})", p.low
    elif isinstance(p, CategoricalParam):
        nums = [int(c) for c in p.choices if isinstance(c, int | float)]
        if nums:
            where, low = f"parameters.max_model_len.choices ({space.name})", min(nums)
    if low is None:
        cfg_path = Path(cfg.server.model) / "config.json"
        if cfg_path.exists():
            mpe = json.loads(cfg_path.read_text()).get("max_position_embeddings")
            if mpe is not None and int(mpe) < need:
                raise ConfigError(f"profile: {cfg.profile.name} needs {need} tokens per request "
                                  f"but the model allows {mpe} (max_position_embeddings)")
        return
    if low < need:
        raise ConfigError(f"{where}: {low} is shorter than the profile needs ({need} tokens: "
                          f"{cfg.profile.name}); raise it to at least {need}")


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
    return optuna.samplers.RandomSampler(seed=seed)


HEARTBEAT_S, GRACE_S = 10, 60


def make_storage(url: str, grace_s: float = GRACE_S) -> optuna.storages.BaseStorage:
    """Create (once) and return the storage, with heartbeats: a RUNNING trial whose worker died
    (SIGKILL, lost host) is failed after `grace_s` and its params retried once."""
    retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1)
    kw: dict[str, Any] = {"heartbeat_interval": HEARTBEAT_S, "grace_period": int(grace_s),
                          "heartbeat_stale_trial_callback": retry}
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        kw["engine_kwargs"] = {"connect_args": {"timeout": 60}}
    try:
        storage = optuna.storages.RDBStorage(url, **kw)
    except (ValueError, ImportError) as e:
        raise ConfigError(f"storage: cannot use {url!r}: {e}") from None
    if url.startswith("sqlite:"):
        _immediate_transactions(storage.engine)
    return storage


def _immediate_transactions(engine: Any) -> None:
    """Make every SQLite transaction take the write lock when it begins (BEGIN IMMEDIATE).

    Optuna hands a WAITING trial (the baseline, a re-queued one) to a worker by reading its
    state and writing RUNNING, with SELECT ... FOR UPDATE, which SQLite ignores. Two workers
    that start together could both read WAITING and both run the trial; the second to finish
    then failed with "Cannot tell a COMPLETE trial". Serialized transactions make the read and
    the write one step. SQLAlchemy's recipe: let pysqlite issue no BEGIN of its own."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened before the listeners reconnect with them


def requeue_interrupted(study: optuna.Study) -> list[int]:
    """Enqueue again the params of trials stopped by SIGINT/SIGTERM (once each)."""
    done = set(study.user_attrs.get("requeued", []))
    again = [t for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
             if t.user_attrs.get("interrupted") and t.number not in done]
    for t in again:
        attrs = {"retry_of": t.number}
        if t.user_attrs.get("baseline"):
            continue  # the baseline is enqueued again by _enqueue_baseline
        study.enqueue_trial(t.params, user_attrs=attrs)
    if again:
        study.set_user_attr("requeued", sorted(done | {t.number for t in again}))
    return [t.number for t in again]


def open_study(cfg: StudyConfig, *, create: bool = True) -> optuna.Study:
    storage = make_storage(cfg.storage_url(), cfg.heartbeat_grace_s)
    directions = [o.direction for o in cfg.objectives]
    if not create:
        try:
            return optuna.load_study(study_name=cfg.name, storage=storage)
        except KeyError:
            raise StudyError(f"no study named {cfg.name!r} in {cfg.storage_url()}") from None
    study = optuna.create_study(study_name=cfg.name, storage=storage, directions=directions,
                                sampler=make_sampler(cfg), load_if_exists=True)
    if n := len(study.get_trials(deepcopy=False)):
        study.sampler = make_sampler(cfg, resumed_at=n)
    got = [d.name.lower() for d in study.directions]
    if got != directions:
        raise StudyError(f"study {cfg.name!r} exists with directions {got}, not {directions}; "
                         "use another --study-name")
    return study


def completed(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def baseline_trial(study: optuna.Study) -> FrozenTrial | None:
    for t in completed(study):
        if t.user_attrs.get("baseline") and not t.user_attrs.get("failure"):
            return t
    return None


def _enqueue_baseline(study: optuna.Study) -> None:
    trials = study.get_trials(deepcopy=False)
    if any(t.user_attrs.get("baseline") and t.state in (TrialState.COMPLETE, TrialState.WAITING,
                                                         TrialState.RUNNING) for t in trials):
        return
    study.enqueue_trial({}, user_attrs={"baseline": True})


TrialHook = Callable[[optuna.Study, FrozenTrial], None]


def prepare_study(cfg: StudyConfig, pre: Preflight) -> optuna.Study:
    """Create (or load) the study and everything a worker needs from it: the config and the
    search space as study attributes, the baseline enqueued, interrupted trials enqueued again.
    `autotune study` calls it; `autotune create-study` calls it once before remote workers."""
    study = open_study(cfg)
    study.set_metric_names([o.metric for o in cfg.objectives])
    study.set_user_attr("config", cfg.model_dump(mode="json"))
    study.set_user_attr("search_space", pre.space.model_dump(mode="json"))
    study.set_user_attr("vllm_version", pre.vllm.version)
    if cfg.baseline:
        _enqueue_baseline(study)
    requeue_interrupted(study)
    return study


def claimed(study: optuna.Study) -> tuple[int, int]:
    """(complete, running) trials, after failing those whose worker stopped beating."""
    optuna.storages.fail_stale_trials(study)
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
    done = sum(t.state == TrialState.COMPLETE for t in trials)
    return done, len(trials) - done


def run_trials(
    study: optuna.Study,
    cfg: StudyConfig,
    pre: Preflight,
    requests: list[Any],
    *,
    on_phase: PhaseHook | None = None,
    on_trial: TrialHook | None = None,
    worker: dict[str, Any] | None = None,
) -> int:
    """Run trials one at a time until complete + running trials reach `cfg.n_trials`, counted
    in the storage, so several workers (processes or hosts) share one budget. Returns the
    number of trials this call ran. Two workers that check at the same moment can overshoot
    the budget by one trial each; none is ever run twice (Optuna hands each trial to one
    worker)."""
    objective = Objective(cfg, pre.space, requests, cfg.study_dir(), on_phase, worker=worker)
    callbacks = [on_trial] if on_trial is not None else []
    deadline = time.monotonic() + cfg.timeout_s if cfg.timeout_s else None
    durations: list[float] = []
    ran = 0
    while True:
        done, running = claimed(study)
        if done >= cfg.n_trials:
            return ran
        if deadline is not None and not fits_before(deadline, time.monotonic(), durations):
            if on_phase is not None:
                on_phase(-1, f"timeout: the next trial (about {trial_estimate(durations):.0f} s) "
                             "would end after it; stopping", {})
            return ran
        if done + running >= cfg.n_trials:
            # the rest is running elsewhere; wait, in case one of them dies: its worker's
            # heartbeat stops, the trial is failed as stale and retried (by us)
            if on_phase is not None:
                on_phase(-1, f"waiting for {running} trial(s) of other workers", {})
            time.sleep(WAIT_POLL_S)
            continue
        started = time.monotonic()
        study.optimize(objective, n_trials=1, callbacks=callbacks, catch=())
        durations.append(time.monotonic() - started)
        ran += 1


def trial_estimate(durations: list[float]) -> float:
    """How long the next trial may take: the longest this run has seen, leaving out its first
    trial (which boots cold: imports, kernel JIT, a new compile cache) once there are others."""
    if not durations:
        return 0.0
    return max(durations[1:]) if len(durations) > 1 else durations[0]


def fits_before(deadline: float, now: float, durations: list[float]) -> bool:
    """Whether a trial started now is expected to end before `deadline` (`timeout_s`): a study
    on a machine lent for a fixed time stops between trials, not in the middle of one."""
    return now + trial_estimate(durations) < deadline


WAIT_POLL_S = 5.0


def run_study(
    cfg: StudyConfig,
    *,
    on_phase: PhaseHook | None = None,
    on_trial: TrialHook | None = None,
    pre: Preflight | None = None,
    on_start: Callable[[optuna.Study, list[Any]], None] | None = None,
) -> optuna.Study:
    """Run trials in this process until the study holds `cfg.n_trials` complete ones (or
    `timeout_s` passes)."""
    pre = pre or preflight(cfg)
    requests = build_requests(cfg.profile, cfg.server.tokenizer_dir)
    study = prepare_study(cfg, pre)
    if on_start is not None:
        on_start(study, requests)
    run_trials(study, cfg, pre, requests, on_phase=on_phase, on_trial=on_trial)
    return study


def delta(value: float, base: float) -> float:
    return (value - base) / base if base else 0.0


def trial_rows(study: optuna.Study, metric_names: list[str]) -> list[dict[str, Any]]:
    """One dict per trial: number, state, feasibility, values, deltas, flags, cause."""
    base = baseline_trial(study)
    rows = []
    for t in study.get_trials(deepcopy=False):
        feasible = t.state == TrialState.COMPLETE and all(v <= 0 for v in t.constraints.values())
        row: dict[str, Any] = {
            "number": t.number,
            "state": t.state.name,
            "feasible": feasible,
            "baseline": bool(t.user_attrs.get("baseline")),
            "flags": t.user_attrs.get("flags", {}),
            "params": dict(t.params),
            "cause": t.user_attrs.get("cause"),
            "timings": t.user_attrs.get("timings", {}),
        }
        for i, m in enumerate(metric_names):
            v = t.values[i] if t.values and not t.user_attrs.get("failure") else None
            row[m] = v
            row[f"delta_{m}"] = (delta(v, base.values[i]) if v is not None and base
                                 and base.values else None)
        rows.append(row)
    return rows


def feasible_front(study: optuna.Study) -> list[FrozenTrial]:
    """The Pareto front among feasible trials (Optuna's best_trials honour constraints)."""
    return [t for t in study.best_trials if not t.user_attrs.get("failure")]
