"""One error root for tunepilot.

Model-caused problems (a trial that diverges, an LLM answer that does not parse) are recorded on
the trial and the search goes on. Bad input from a person (a config, a flag, a data file) is a
`ConfigError`: the run refuses to start and says what was expected and how to fix it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


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


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so the running trial is failed cleanly and the run ends."""


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """' Did you mean 'x'?' when a close option exists, else ''."""
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" Did you mean '{close[0]}'?" if close else ""
