"""Ctrl-C and SIGTERM that are never lost.

Python raises KeyboardInterrupt wherever the interpreter happens to be. Inside a C library's
callback into Python (llama.cpp's log callback, for one) the exception is printed and dropped,
and the search would run on. So the handler also records the signal, and `check()` raises it
again at safe points: after each proposal and at each epoch report.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from tunepilot.errors import Terminated

_requested: int | None = None


def _exception(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _handler(signum: int, frame: Any) -> None:
    global _requested
    if _requested is not None:  # the second signal: give up on a clean stop
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
    global _requested
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _handler) for s in (signal.SIGINT, signal.SIGTERM)}
    _requested = None
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        _requested = None
