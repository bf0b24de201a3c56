"""What each command runs, end to end, as one typed call the public API (autotune.api) hands
on: a study (`study.run_session`; `workers`, `confirm`, `certify`), opened once (`open`),
read (`inspect`: its summary, tables and export), checked again (`checks`), one config
(`bench`), samplers replayed (`replay`) and the smaller tools (`tools`). Every command reads
the one `StudySummary` (autotune.tuning.summary) computed after each trial event and handed to
the surfaces (the live view, the tables, MLflow, export, the report)."""
