"""One error root for tunepilot.

Model-caused problems (a trial that diverges, an LLM answer that does not parse) are recorded on
the trial and the search goes on. Bad input from a person (a config, a flag, a data file) is a
`ConfigError`: the run refuses to start and says what was expected and how to fix it.
"""

from __future__ import annotations

import difflib
import traceback
from collections.abc import Iterable

# The kinds of a failed trial, as recorded and shown. Config-dependent kinds say something about
# the config (the agent should steer away); the others may be a bug.
ERROR_KINDS = ("exception", "diverged", "oom", "timeout", "crashed", "interrupted", "config")
CONFIG_DEPENDENT = ("diverged", "timeout", "oom", "crashed")


class TuneError(Exception):
    """Root of every error tunepilot raises on purpose."""


class ConfigError(TuneError, ValueError):
    """Bad input from a person: a config file, a flag, a search space, a trainer spec.

    The message is one paragraph: what was expected, what was found, and the fix.
    """


class TrialFailed(TuneError):
    """A trial could not produce a usable validation loss; recorded as a FAIL trial."""

    kind = "error"


class Diverged(TrialFailed):
    """The validation loss became NaN or infinite."""

    kind = "diverged"

    def __init__(self, epoch: int, value: float, why: str = ""):
        super().__init__(f"validation loss is {value:.4g} at epoch {epoch}{why}")
        self.epoch = epoch
        self.value = value


class TrialCrashed(TrialFailed):
    """The trial's process (or one of its ranks) died: a signal (SIGSEGV, SIGKILL from the
    out-of-memory killer) or an exit without a result."""

    def __init__(self, message: str, kind: str = "crashed"):
        super().__init__(message)
        self.kind = kind

    @classmethod
    def of_exit(cls, exitcode: int | None, who: str = "the trial's process") -> TrialCrashed:
        """What a child process's exit code says about how it ended."""
        import signal

        if exitcode is not None and exitcode < 0:
            name = signal.Signals(-exitcode).name
            if -exitcode == signal.SIGKILL:
                return cls(f"{who} was killed ({name}), most likely by the out-of-memory killer",
                           kind="oom")
            return cls(f"{who} died with {name}")
        return cls(f"{who} exited with code {exitcode} before reporting")


class ChildError(TrialFailed):
    """An exception inside a trial's child process, carried back as kind + message."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so the running trial is failed cleanly and the run ends."""


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """' Did you mean 'x'?' when a close option exists, else ''."""
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" Did you mean '{close[0]}'?" if close else ""


def is_out_of_memory(e: BaseException) -> bool:
    """Out of memory, of the host or a device, in any framework: MemoryError, torch's
    OutOfMemoryError (CUDA), XLA's RESOURCE_EXHAUSTED (JAX), "MPS backend out of memory"."""
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and ("RESOURCE_EXHAUSTED" in text
                                            or "out of memory" in text.lower())


class StorageUnavailable(TuneError):
    """The database server stayed unreachable past the outage limit (`memory.outage`)."""


def error_kind(e: BaseException) -> str:
    """The recorded kind of a trial's exception (see `ERROR_KINDS`)."""
    if isinstance(e, TrialFailed):
        return e.kind
    if isinstance(e, ConfigError):
        return "config"
    if is_out_of_memory(e):
        return "oom"
    return "exception"


def describe(e: BaseException) -> dict[str, str]:
    """{"kind", "message", "where"} of a trial's exception, as recorded on the trial."""
    if isinstance(e, (TrialFailed, ConfigError)):  # its message says it all; no type name
        return {"kind": error_kind(e), "message": str(e)[:500], "where": ""}
    text = str(e).strip().splitlines()
    first = text[0].strip() if text else ""
    message = (f"{type(e).__name__}: {first}" if first else type(e).__name__)[:500]
    frames = traceback.extract_tb(e.__traceback__)
    # The place a person fixes: the deepest frame of their own code, not of a library it
    # called (torch, numpy), of Python's own modules or of tunepilot; the deepest of all where
    # the whole traceback is a library's.
    theirs = [f for f in frames if not _library_file(f.filename)] or frames[-1:]
    where = (f"{_shown_path(theirs[-1].filename)}:{theirs[-1].lineno} in {theirs[-1].name}"
             if theirs else "")
    return {"kind": error_kind(e), "message": message, "where": where}


def _shown_path(filename: str) -> str:
    """A file as a person opens it from where the run started: relative below the working
    directory (`bad_train.py`), absolute elsewhere."""
    import os

    path = os.path.abspath(filename)
    here = os.getcwd()
    return os.path.relpath(path, here) if path.startswith(here + os.sep) else path


def _library_file(filename: str) -> bool:
    """Whether `filename` is an installed library's, Python's own, or tunepilot's."""
    import os
    import sysconfig

    path = os.path.abspath(filename)
    if filename.startswith("<") or os.sep + "site-packages" + os.sep in path \
            or os.sep + "dist-packages" + os.sep in path:
        return True
    roots = {sysconfig.get_paths()["stdlib"], os.path.dirname(os.path.abspath(__file__))}
    return any(path.startswith(os.path.abspath(r) + os.sep) for r in roots)


def one_of(options: Iterable[str]) -> str:
    """"'a', 'b' or 'c'": the valid options, for a message."""
    quoted = [repr(o) for o in options]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
