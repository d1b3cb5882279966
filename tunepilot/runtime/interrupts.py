"""Ctrl-C and SIGTERM that are never lost.

Python raises KeyboardInterrupt wherever the interpreter happens to be. Inside a C library's
callback into Python (llama.cpp's log callback, for one) the exception is printed and dropped,
and the search would run on. So the handler also records the signal, `check()` raises it
again at safe points (after each proposal, at each epoch report), and if the process is still
running 5 s later the signal is delivered once more.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from tunepilot.errors import Terminated

_requested: int | None = None
_redeliver: threading.Timer | None = None
REDELIVER_AFTER_S = 5.0


def _exception(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _handler(signum: int, frame: Any) -> None:
    global _requested, _redeliver
    if _requested is None:
        # If the exception below is swallowed (raised inside a C callback or a finalizer), a
        # second delivery raises it again wherever the interpreter is by then.
        _redeliver = threading.Timer(REDELIVER_AFTER_S, signal.raise_signal, (signum,))
        _redeliver.daemon = True
        _redeliver.start()
    else:  # delivered again: one more signal after this ends the process at once
        signal.signal(signum, signal.SIG_DFL)
    _requested = signum
    raise _exception(signum)


def check() -> None:
    """Raises the interrupt that arrived while a C library had control, if any."""
    if _requested is not None:
        raise _exception(_requested)


@contextlib.contextmanager
def raising() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt and SIGTERM raises `Terminated`, reliably."""
    global _requested, _redeliver
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _handler) for s in (signal.SIGINT, signal.SIGTERM)}
    _requested, _redeliver = None, None
    try:
        yield
    finally:
        if _redeliver is not None:
            _redeliver.cancel()
        for s, h in previous.items():
            signal.signal(s, h)
        _requested = None
