"""`autotune acceptance`: the acceptance profile of the user's real model (and draft) on their own
workload, measured on one boot, and printed as the `server.acceptance` entry a shape-only study
takes (config/acceptance.py; for a draft model, EAGLE or MTP: n-gram and suffix draft from the
text, which random weights never repeat, so for them it prints how often they drafted and
accepted on the user's own weights, and no entry). vLLM counts, over the run, the drafts it
proposed and the draft tokens it accepted at each position: accepted at position i over drafts
is the probability that the first i+1 draft tokens were all accepted (vLLM's spec_decode
metrics), the rates its synthetic rejection sampling takes; 1 + accepted over drafts is the mean
length."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune.config import weights
from autotune.config.acceptance import TEXT_DRAFTED
from autotune.config.study import StudyConfig
from autotune.errors import ConfigError, LoadError
from autotune.measure.runner import run_boot
from autotune.outputs.console import console, out, trial_progress


@dataclass(frozen=True)
class AcceptanceOptions:
    """What to measure: `method` at `k` draft tokens (with `draft`, the draft model's path or
    id, for method draft_model), the study's first workload at `num_prompts` requests."""

    method: str
    k: int
    draft: str | None = None
    num_prompts: int | None = None
    output: Path | None = None
    # more of speculative_config's keys, as the deployment sets them (ngram's prompt_lookup_max
    # and _min: how far back the draft looks changes what it proposes)
    extra: tuple[tuple[str, Any], ...] = ()

    def check(self, cfg: StudyConfig) -> None:
        if self.method == "draft_model" and not self.draft:
            raise ConfigError("--method draft_model: give the draft with --draft PATH")
        if self.draft and self.method != "draft_model":
            raise ConfigError(f"--draft: method {self.method} drafts without a model; use "
                              "--method draft_model, or leave --draft out")
        taken = {"method", "num_speculative_tokens", "model"} & {k for k, _ in self.extra}
        if taken:
            raise ConfigError(f"--spec {sorted(taken)[0]}: set by --method, --k and --draft; "
                              "--spec takes speculative_config's other keys")
        if weights.shape_only(cfg.server):
            raise ConfigError(
                "server.shape_only: the study serves random weights, whose drafts are never "
                "accepted; acceptance is measured on the model's own weights. Run it with a "
                "study file that serves them (without shape_only: true or load_format: dummy)")


def profile_of(counts: dict[str, float], k: int, output_tokens: int = 0, requests: int = 0
               ) -> dict[str, Any] | None:
    """The acceptance profile from vLLM's counters over a run (server_spec_* deltas); None
    where it drafted nothing. With the run's output tokens and requests, also `draft_share`:
    the share of decode steps that drafted (a step emits one token plus those it accepted; a
    request's first token comes from its prefill), which an n-gram draft leaves well below 1."""
    drafts = counts.get("server_spec_drafts", 0.0)
    if drafts <= 0:
        return None
    accepted = counts.get("server_spec_accepted_tokens", 0.0)
    rates = [round(counts.get(f"server_spec_accepted_pos_{i}", 0.0) / drafts, 4)
             for i in range(k)]
    mean = 1.0 + accepted / drafts
    doc: dict[str, Any] = {"mean_length": round(mean, 4), "measured_k": k, "drafts": drafts}
    steps = output_tokens - requests - accepted
    if steps > 0:  # vLLM counts tokens accepted past a request's end: it may read over 1
        doc["draft_share"] = round(drafts / steps, 4)
    if any(f"server_spec_accepted_pos_{i}" in counts for i in range(k)):
        doc["rates"] = [min(r, prev) for r, prev in zip(rates, [1.0, *rates], strict=False)]
    return doc


def measure_acceptance(cfg: StudyConfig, opts: AcceptanceOptions, workdir: Path
                       ) -> dict[str, Any]:
    """Boot the study's model with `opts.method` at K draft tokens, run the study's first
    workload through it, and print the profile and the study-file entry it makes."""
    opts.check(cfg)
    spec: dict[str, Any] = {"method": opts.method, "num_speculative_tokens": opts.k}
    if opts.draft:
        spec["model"] = opts.draft
    if opts.method == "ngram":
        spec["prompt_lookup_max"] = 4  # vLLM requires it for ngram; --spec may set it
    spec |= dict(opts.extra)
    profile = cfg.workloads()[0]
    if opts.num_prompts is not None:
        profile = profile.model_copy(update={"num_prompts": opts.num_prompts})
    run_dir = workdir / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    with trial_progress("acceptance", profile.num_prompts) as tp:
        res = run_boot(cfg.server, [profile], {"speculative_config": spec}, run_dir,
                       on_phase=tp.phase, on_request=tp.request_done)
    counts = res.point.server_stats
    found = profile_of(counts, opts.k, res.point.metrics.total_output_tokens,
                       res.point.metrics.completed)
    if found is None and opts.method in TEXT_DRAFTED:  # the answer: it never drafts here
        out.print(f"{opts.method} drafted nothing over {profile.num_prompts} requests: this "
                  "workload does not repeat itself where the method looks, so it cannot gain "
                  "on it", highlight=False, soft_wrap=True)
        return _write({"model": cfg.server.model, "method": opts.method, "k": opts.k,
                       "speculative_config": spec, "workload": profile.model_dump(
                           mode="json", exclude_defaults=True),
                       "requests": res.point.metrics.completed, "drafts": 0.0,
                       "draft_share": 0.0, "log_path": res.log_path}, opts, run_dir)
    if found is None:
        raise LoadError(f"vLLM drafted nothing over {profile.num_prompts} requests (its "
                        f"spec_decode counters read no drafts; log: {res.log_path})")
    more = "".join(f" {k}={v}" for k, v in spec.items()
                   if k not in ("method", "num_speculative_tokens"))
    source = (f"autotune acceptance, {cfg.server.model}, {opts.method} K {opts.k}{more}, "
              f"{profile.name} x {profile.num_prompts}, {time.strftime('%Y-%m-%d')}")
    entry = {opts.method: {"rates": found["rates"], "source": source} if "rates" in found
             else {"mean_length": found["mean_length"], "measured_k": opts.k,
                   "source": source}}
    doc = {"model": cfg.server.model, "method": opts.method, "k": opts.k,
           "speculative_config": spec,
           "workload": profile.model_dump(mode="json", exclude_defaults=True),
           "requests": res.point.metrics.completed, **found, "log_path": res.log_path,
           "study_file_entry": {"server": {"acceptance": entry}}}
    rates = ", ".join(f"{r:g}" for r in found.get("rates", []))
    out.print(f"acceptance of {opts.method} at K {opts.k}: mean length "
              f"{found['mean_length']:.2f} over {found['drafts']:.0f} drafts"
              + (f" (on {found['draft_share']:.0%} of decode steps)" if "draft_share" in found
                 else "")
              + (f"; by position {rates}" if rates else ""), highlight=False, soft_wrap=True)
    if opts.method in TEXT_DRAFTED:
        out.print(f"{opts.method} drafts from the text: a shape-only study cannot emulate it "
                  "(random weights write text that does not repeat, so it drafts nothing "
                  "there) and leaves it out; this profile is how it does on your model's own "
                  "weights", highlight=False, soft_wrap=True)
        doc.pop("study_file_entry")
        return _write(doc, opts, run_dir)
    out.print("for a shape-only study of this model, in its study file:\n"
              + yaml.safe_dump(doc["study_file_entry"], sort_keys=False, width=100),
              highlight=False, soft_wrap=True, markup=False)
    return _write(doc, opts, run_dir)


def _write(doc: dict[str, Any], opts: AcceptanceOptions, run_dir: Path) -> dict[str, Any]:
    dest = opts.output or run_dir / "acceptance.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(doc, indent=2) + "\n")
    console.print(f"written to {dest}", highlight=False)
    return doc
