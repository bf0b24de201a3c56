"""The search: Optuna study, objective, sampler, storage, preflight, workers, confirm, the bill.

    record        the trial record: every key stored on an Optuna trial or study, typed
    search_space  the searched flags and their Optuna distributions
    sampler       the sampler a study file names
    storage       Optuna storage URLs (SQLite, PostgreSQL)
    preflight     everything checked before the first boot
    objective     one trial: flags -> boot -> bench -> numbers
    earlier       what a trial reads of the trials before it: failed flags, the incumbent
    suite         a suite's score against the baseline per profile
    study         create, warm-start and run a study
    workers       several worker processes on one storage
    confirm       repeat the finalists, bootstrap intervals against the defaults
    bill          device-minutes spent and left, and where they went
    spend         a trial's wall time by phase (its boot's from vLLM's log), cold boots
    replay        samplers replayed against a measured grid
"""
