"""The exception tree of autotune. Every error autotune raises on purpose is one of these.

    AutotuneError                    root: the CLI turns any of these into one message and exit 1
     +-- ConfigError                 bad user input (study file, search space, flags, paths)
     +-- ServerError                 one vLLM server process
     |    +-- ServerBootError        exited before it became healthy (exit code + root-cause line)
     |    +-- ServerBootTimeout      still not healthy at the boot deadline
     |    |    +-- ServerBootStarved  ... while other work starved the machine (unmeasured
     |    |                           where the study's boots show the timeout is ample)
     |    +-- ServerDiedError        exited while it was serving (crash mid-benchmark)
     +-- LoadError                   the benchmark could not produce a measurement
     +-- ClientError                 the load generator itself failed (not the server's doing)
     |    +-- ClientProcessError     one of its client processes died or never started: the
     |                               machine's, so the trial is unmeasured and tried again
     +-- Unmeasured                  a trial measured nothing for a reason that is not its
     |                               config's (a starved boot): recorded, its config tried again
     +-- StudyError                  the study storage or its state
          +-- TrialError             a trial raised something autotune did not expect: it is
          |                          recorded on the trial, the study stops, the same command
          |                          resumes it
          +-- NotCertified           a study with a budget ended without certifying its pick
                                     (exit 3: the gain's interval holds no gain; 4: the budget
                                     ran out first; 5: it was too small to explore beyond
                                     vLLM's defaults); everything else was printed before it

Expected trial failures (boot errors, timeouts, crashes) are ServerError/LoadError: the study
records them on the trial with their cause and goes on. Anything else raised inside a trial
(ClientError included) is recorded on the trial and stops the study with a TrialError.
"""

from __future__ import annotations


class AutotuneError(Exception):
    """Root of autotune's exceptions."""


class ConfigError(AutotuneError):
    """Bad input: names the file or field and the fix."""


class ServerError(AutotuneError):
    """A vLLM server process failed. `cause` is the one line a user should read first."""

    def __init__(self, message: str, *, cause: str | None = None, log_path: str | None = None):
        super().__init__(message)
        self.cause = cause or message
        self.log_path = log_path


class ServerBootError(ServerError):
    """The server exited before it was healthy."""

    def __init__(
        self, returncode: int, cause: str | None, *, log_path: str | None = None
    ) -> None:
        msg = f"vLLM server exited with code {returncode} during boot"
        if cause:
            msg += f": {cause}"
        super().__init__(msg, cause=cause or f"exit code {returncode}", log_path=log_path)
        self.returncode: int | None = returncode


class ServerBootHung(ServerBootError):
    """The engine failed to start and the server did not exit."""

    def __init__(self, grace_s: float, cause: str | None, *, log_path: str | None = None
                 ) -> None:
        ServerError.__init__(
            self, f"vLLM's engine failed to start and the server had not exited {grace_s:g} s "
            f"later (stopped)" + (f": {cause}" if cause else ""),
            cause=cause or "engine failed to start; the server hung", log_path=log_path)
        self.returncode = None


class ServerBootTimeout(ServerError):
    """The server did not become healthy before the deadline."""


class ServerBootStarved(ServerBootTimeout):
    """The server was not healthy at the deadline while other work starved the machine
    (autotune.server.starved; `starved` says how): the config's verdict waits for a boot that
    had the CPUs (tuning/failures.py)."""

    def __init__(self, message: str, starved: str, *, cause: str | None = None,
                 log_path: str | None = None) -> None:
        super().__init__(message, cause=cause, log_path=log_path)
        self.starved = starved


class ServerDiedError(ServerError):
    """The server exited while serving requests."""


class LoadError(AutotuneError):
    """The load generator could not measure (for example every request failed)."""


class ClientError(AutotuneError):
    """The load generator failed for a reason of its own (a request could not be built). Not a
    verdict on the server's config: a study stops on it."""


class ClientProcessError(ClientError):
    """A client process of the load generator died or never said it was ready (on a GPU
    worker: it could not import autotune while its files were replaced). The machine's doing:
    the trial is recorded unmeasured and its config tried again, as a starved boot's is."""


class Unmeasured(AutotuneError):
    """A trial that measured nothing for a reason that is not its config's (its boot timed out
    on a starved machine, or after the same flags had booted in the study): recorded as
    unmeasured, never infeasible, and its config enqueued again once."""


class StudyError(AutotuneError):
    """The study's storage or state is not what the command needs."""


class NotCertified(StudyError):
    """A planned study's pick was not certified (autotune.tuning.certify): the message is the
    certification's sentence, `exit_code` its status's (3 not certified, 4 budget spent, 5
    budget too small to explore)."""

    def __init__(self, sentence: str, exit_code: int) -> None:
        super().__init__(sentence)
        self.exit_code = exit_code


class TrialError(StudyError):
    """An unexpected exception inside a trial (a bug, or the machine under the study changed).

    The trial is recorded with the exception's type and message, and the study stops with one
    error line; the same command resumes it (the trial's params are enqueued again)."""

    def __init__(self, number: int, exc: BaseException, log_path: str | None = None) -> None:
        where = f"; its log: {log_path}" if log_path else ""
        super().__init__(f"trial {number} stopped on an unexpected {type(exc).__name__}: {exc}"
                         f"{where}. The trial is recorded; the same command resumes the study "
                         "(--debug shows the traceback)")
        self.number = number
        self.log_path = log_path


class MeasurementWarning(UserWarning):
    """A measurement to read with care (too short, a saturated load generator): shown, and kept
    with the trial that gave it."""
