"""The screens a study ends on, from its summary: every trial, the feasible Pareto front, the
confirm phase's table, what to deploy and the bill. `autotune study` prints them all at its end
(`end_of_study`); `confirm` prints the confirm table alone."""

from __future__ import annotations

from pathlib import Path

from autotune.config import weights
from autotune.config.study import StudyConfig
from autotune.outputs.console import command_hint, console, out
from autotune.outputs.tables import (
    capacity_line,
    confirm_lines,
    confirm_table,
    front_tables,
    trials_table,
)
from autotune.tuning.confirm import ConfirmResult
from autotune.tuning.summary import CERTIFY_RULES, StudySummary


def print_tables(summary: StudySummary, cfg: StudyConfig) -> None:
    """Every trial, then the feasible Pareto front (pooled values; the recommendation first,
    or apart from it with the reason where it is not on it)."""
    out.print(trials_table(summary, cfg, title=f"study {cfg.name}"))
    for shown in front_tables(summary, cfg):
        out.print(shown, highlight=False, soft_wrap=True)


def print_confirm(res: ConfirmResult, cfg: StudyConfig) -> None:
    """The confirm phase's table and what it says of each finalist."""
    out.print(confirm_table(res))
    for line in confirm_lines(res):
        out.print(line, highlight=False)
    if res.left:
        console.print(f"confirm phase stopped for --timeout: {res.left} boot(s) of its plan not "
                      "run (the next would have ended after it); the same command resumes it",
                      highlight=False)
    console.print(f"written to {cfg.study_dir() / 'confirm.json'}", highlight=False)


def deploy_lines(summary: StudySummary, cfg: StudyConfig, config_path: Path) -> list[str]:
    """What to deploy, at the end of a study: the summary's recommendation, its serve line, its
    gain over vLLM's defaults with its interval (or "one measurement"), that it is shape only
    where the servers loaded random weights (config/weights.py), and how to export it."""
    from autotune.outputs.export import serve_line

    pick = summary.picked
    if pick is None:
        return []
    head = summary.headline()
    if summary.certification is not None and summary.recommendation.rule in CERTIFY_RULES:
        who = f"vLLM's defaults (trial {pick.number})" if pick.baseline else \
            f"trial {pick.number}"
        head = f"{who} ({head})"  # the sentence may speak of another trial: name this one
    said = capacity_line(cfg, pick)
    shape = [f"  {weights.STATEMENT}"] if weights.shape_only(cfg.server, pick.flags) else []
    return [f"deploy: {head}", *([f"  {said}"] if said else []), "  " + serve_line(cfg, pick),
            *shape, "full export (YAML, bench line, sizing): "
            + command_hint(f"export --config {config_path}")]


def end_of_study(summary: StudySummary, cfg: StudyConfig, res: ConfirmResult | None,
                 note: str, bill: list[str], config_path: Path) -> None:
    """Everything `autotune study` prints once its trials are done, in order."""
    print_tables(summary, cfg)
    if res is not None:
        print_confirm(res, cfg)
    if note:
        console.print(note, highlight=False)
    deploy = deploy_lines(summary, cfg, config_path) or (
        [weights.STATEMENT] if weights.shape_only(cfg.server) else [])  # nothing to deploy
    for line in [*deploy, *bill]:
        out.print(line, highlight=False, soft_wrap=True)
