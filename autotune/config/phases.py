"""The phases that end a study: confirm (the front's best booted again, docs/noise.md) and
certify (the pick against vLLM's defaults over boots, docs/certify.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from autotune.config.base import StrictModel


class ConfirmConfig(StrictModel):
    """The confirm phase at the end of a study (`docs/noise.md`)."""

    when: Literal["auto", "always", "never"] = Field(
        "auto", description="auto: when the median trial took at least auto_min_trial_s; "
        "`autotune study --confirm/--no-confirm` overrides it.")
    top: int = Field(2, ge=1, description="Finalists: the front's best configs by the first "
                     "objective.")
    repeats: int = Field(3, ge=1, description="More boots of each finalist and of the baseline, "
                         "interleaved.")
    auto_min_trial_s: float = Field(120.0, gt=0, description="With when: auto, confirm when the "
                                    "median trial took at least this long.")


class CertifyConfig(StrictModel):
    """How a study with a budget (`--budget-gpu-minutes`, `--timeout`) certifies its pick
    (autotune.tuning.certify, docs/certify.md)."""

    when: Literal["auto", "always", "never"] = Field(
        "auto", description="auto: when the study has a budget or a timeout (the budget is then "
        "a plan: a reserve to certify, the rest to explore); always: after every study run; "
        "never: explore the whole budget and end with one measurement each.")
    coverage: float = Field(0.9, gt=0.5, lt=1, description="The coverage of the certified "
                            "gain's interval over boots.")
    min_gain: float = Field(
        0.2, gt=0, description="The smallest gain over vLLM's defaults the plan reserves "
        "enough boots to certify (a larger one certifies in fewer, and leaves the rest unspent "
        "or to explore on the next run).")
    noise: float = Field(
        0.06, gt=0, lt=1, description="The spread between boots of one config (relative sd) the "
        "plan assumes until the defaults were booted twice (then theirs): 0.06 from three "
        "boots of the dense 8B shape on one H100 (64.0, 58.45, 64.0 req/s); an MoE spread "
        "more (15-36% between boots of one host).")
    max_boots: int = Field(5, ge=2, le=20, description="Boots of the pick and of the defaults "
                           "at most, the first pass's included.")
    explore_trials: int = Field(
        3, ge=1, description="Trials the plan leaves room for before its reserve (vLLM's "
        "defaults, the space's start and one sampled config): a reserve that leaves none "
        "certifies nothing, since the pick is then the defaults (lab/certify_split.py).")
    reference: bool = Field(True, description="Check the certified pick with `vllm bench "
                            "serve` on a stock server at its capacity (capacity studies).")
    here: bool = Field(
        False, description="Certify on this machine too (`autotune study --certify-here`): a "
        "study resumed here whose pick was certified on other machines explores no more; it "
        "boots pairs of the pick and the defaults here, pools them with the other machines' "
        "(each machine's boots against its own) and checks the reference here, at this "
        "machine's capacity.")
