"""The top of the library: a study session as the commands run it. Opening a study (preflight,
requests, storage, tracker) is written once (`open.open_session`); `study.run_session` runs one
end to end; every command reads the one `StudySummary` (autotune.tuning.summary) it computes
after each trial event and hands to the surfaces (the live view, the tables, MLflow, export,
the report)."""
