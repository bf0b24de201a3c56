"""Speculative trials a study can judge. On random weights (a shape-only study) no draft is
accepted, so a speculative config loses by construction; with a declared acceptance profile
(`server.acceptance`, config/acceptance.py) its trials accept at it instead. A method without
one is left out of the space a shape-only study searches, and the study says so (`left_out`),
instead of spending trials that cannot win. So is a method that drafts from the text
(TEXT_DRAFTED), profile or not: random weights write text that never repeats itself, so it
proposes no drafts for a profile to accept (docs/speculative.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from autotune.config import weights
from autotune.config.acceptance import TEXT_DRAFTED, profile_for
from autotune.config.study import ServerConfig
from autotune.errors import ConfigError
from autotune.tuning.search_space import CategoricalParam, SearchSpace, study_space

METHOD = "speculative_method"


def space_of(search_space: str, server: ServerConfig) -> tuple[SearchSpace, list[str]]:
    """The space a study searches (study_space: its file with server.draft_models added),
    less the speculative methods it cannot judge, and those methods."""
    space = study_space(search_space, server.draft_models)
    if not weights.shape_only(server, space.fixed):
        return space, []
    method = space.parameters.get(METHOD)
    if not isinstance(method, CategoricalParam):
        return space, []
    left = [str(c) for c in method.choices
            if c is not None and profile_for(c, server.acceptance) is None]
    return (without(space, METHOD, left), left) if left else (space, [])


def without(space: SearchSpace, name: str, values: list[Any]) -> SearchSpace:
    """`space` with `values` no longer among parameter `name`'s choices: a parameter sampled
    only for them goes (its `when` can no longer hold), a start that uses them goes, and `name`
    itself goes where one choice is left (it is then fixed: None, the flag left out)."""
    p = space.parameters[name]
    assert isinstance(p, CategoricalParam)
    keep = [c for c in p.choices if c not in values]
    params: dict[str, Any] = {}
    for n, q in space.parameters.items():
        if n == name:
            if len(keep) > 1:
                params[n] = q.model_copy(update={"choices": keep})
            continue
        if name in q.when:
            allowed = [v for v in q.when[name] if v not in values]
            if not allowed or len(keep) <= 1:
                continue
            q = q.model_copy(update={"when": {**q.when, name: allowed}})
        params[n] = q
    gone = set(space.parameters) - set(params)
    starts = [s for s in space.starts if s.get(name) not in values]
    starts = [{k: v for k, v in s.items() if k not in gone} for s in starts]
    return space.model_copy(update={"parameters": params, "starts": [s for s in starts if s]})


def left_out_notes(left: list[str], space: str, declared: Iterable[str] = ()) -> list[str]:
    """What a shape-only study says, one warning each, of the methods it leaves out, and the
    fix: a method that drafts every step can be searched at a declared profile; one that drafts
    from the text cannot, declared (`declared`: the methods server.acceptance names) or not."""
    said = set(declared)
    drafting = [m for m in left if m not in TEXT_DRAFTED]
    text = [m for m in left if m in TEXT_DRAFTED]
    notes = []
    if drafting:
        notes.append(
            f"speculative decoding ({', '.join(drafting)}) left out of search space {space!r}: "
            "on random weights (shape only) no draft is accepted, so such trials cannot win. "
            "Declare the acceptance your real model shows to search them: server.acceptance."
            f"{drafting[0]}: {{mean_length: L, measured_k: K}} (`autotune acceptance` "
            "measures it)")
    if text:
        profiled = [f"server.acceptance.{m}" for m in text if m in said]
        notes.append(
            f"speculative decoding ({', '.join(text)}) left out of search space {space!r}: "
            "these methods draft only where the text repeats itself, and random weights "
            "(shape only) write text that does not, so their trials would have no drafts to "
            "accept" + (f" ({', '.join(profiled)}: not applied)" if profiled else "")
            + ". Study them on your model's own weights (a study without shape_only); a "
            "declared profile emulates draft_model, EAGLE and MTP drafts, which are made every "
            "step")
    return notes


def unused_profiles(server: ServerConfig, left: list[str],
                    fixed: Mapping[str, Any] | None = None) -> str | None:
    """What a shape-only study (the server's, or a space whose `fixed` args serve random
    weights) says of a declared profile for a text-drafted method its space does not search
    (none is applied: launch_flags skips them); None where there is none."""
    dead = [m for m in server.acceptance if m in TEXT_DRAFTED and m not in left]
    if not dead or not weights.shape_only(server, fixed):
        return None
    names = ", ".join(f"server.acceptance.{m}" for m in dead)
    return (f"{names}: not applied. These methods draft only where the text repeats itself, "
            "which random weights (shape only) never do, so there is nothing to accept; "
            "drop the entry, or study them on your model's own weights")


def shape_only_notes(server: ServerConfig, space: SearchSpace, left: list[str]) -> list[str]:
    """Every warning a shape-only study gives of speculation before its first boot: the methods
    left out, then the declared profiles it does not apply."""
    unused = unused_profiles(server, left, space.fixed)
    return left_out_notes(left, space.name, server.acceptance) + ([unused] if unused else [])


def check_emulation(server: ServerConfig, space: SearchSpace, vllm_version: str) -> None:
    """Refuse, before a boot, a declared profile the installed vLLM cannot run: vLLM built for
    CPUs samples on the CPU, which refuses synthetic rejection sampling (its engine dies on the
    first request: "Synthetic acceptance not supported with CPU sampling", vLLM 0.32)."""
    method = space.parameters.get(METHOD)
    searched = isinstance(method, CategoricalParam) and any(
        c is not None and str(c) in server.acceptance for c in method.choices)
    if searched and weights.shape_only(server, space.fixed) and "+cpu" in vllm_version:
        raise ConfigError(
            f"server.acceptance: vLLM {vllm_version} samples on the CPU, which cannot emulate "
            "acceptance (its synthetic rejection sampling needs a GPU sampler). Drop "
            "server.acceptance here (speculative trials are then left out of a shape-only "
            "study), or run the study on a GPU")
