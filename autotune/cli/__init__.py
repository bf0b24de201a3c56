"""The `autotune` command: each subcommand parses its options into the study file's models
(autotune.config) and calls one function of the public API (autotune.api), which runs it and
presents it; nothing else of the package is imported here (pyproject.toml's import contract).

    bench     one server, one benchmark                      (cli/bench.py)
    study     study, create-study, worker, confirm           (cli/study.py)
    inspect   trials, pareto, export                         (cli/inspect.py)
    tools     report, ui, sync, replay, make-tiny-model      (cli/tools.py)
"""

from __future__ import annotations

import signal
import sys
import warnings
from typing import Any

import click
from rich.markup import escape

from autotune import __version__
from autotune.api import AutotuneError, NotCertified, console

DEBUG = {"on": False}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="autotune")
@click.option("--debug", is_flag=True, help="Show Python tracebacks of errors.")
def cli(debug: bool) -> None:
    """Bayesian multi-objective auto-tuner for `vllm serve` configurations."""
    DEBUG["on"] = debug


def _register() -> None:
    from autotune.cli import bench, inspect, study, tools

    for module in (bench, study, inspect, tools):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def _sigterm(_sig: int, _frame: Any) -> None:
    # SIGTERM takes the Ctrl-C path: the running trial's server is stopped, the trial is marked
    # interrupted in the storage, and the same command resumes the study.
    raise KeyboardInterrupt


# commands that run trials in a study's storage: what an interruption leaves there
_TRIAL_COMMANDS = {"study", "worker", "confirm"}


def interrupted_note(args: list[str]) -> str:
    """What to say after Ctrl-C or SIGTERM: a study's trial is marked and resumable; other
    commands (`ui`, `bench`, `report`, ...) just stopped."""
    command = next((a for a in args if not a.startswith("-")), "")
    if command in _TRIAL_COMMANDS:
        return (": a running trial's server was stopped and the trial marked in the storage; "
                "the same command resumes a study")
    return f" ({command or 'autotune'} stopped)"


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """Warnings (MLflow unreachable, a busy load generator) as one line, not file:line source."""
    console.print("[yellow]warning:[/yellow] " + escape(str(message)), highlight=False,
                  soft_wrap=True)


def _quiet_libraries() -> None:
    import optuna

    # autotune reports trials itself; Optuna's own "Trial N failed" lines would repeat them with
    # a traceback (an interrupted trial included)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    # multivariate/group TPE, heartbeats and metric names are "experimental" but stable enough
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def main() -> None:
    signal.signal(signal.SIGTERM, _sigterm)
    warnings.showwarning = _show_warning
    _quiet_libraries()
    try:
        cli.main(standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):
        console.print("[red]interrupted[/red]" + interrupted_note(sys.argv[1:]))
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except NotCertified as e:  # the study printed everything; its last word, its exit code
        console.print(escape(str(e)), highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except AutotuneError as e:
        if DEBUG["on"]:
            raise
        console.print("[bold red]error:[/bold red] " + escape(str(e)), highlight=False,
                      soft_wrap=True)
        log = getattr(e, "log_path", None)
        if log and log not in str(e):
            console.print(f"server log: {log}", highlight=False, soft_wrap=True)
        sys.exit(getattr(e, "exit_code", 1))
