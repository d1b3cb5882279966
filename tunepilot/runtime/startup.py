"""A command's start without Python's cyclic garbage collector.

A command's start builds a few hundred thousand objects that live as long as its process: the
modules it imports, their classes and functions, an ORM's mappings, a storage's caches. The
collector, run every few hundred allocations, looked at them again and again as they grew, full
collections among them: a share of every worker's start worth saving
(bench/README.md#several-workers; the measurement: bench/log/2026-12-07.md). `tune run` and
`tune worker` pause it from their start (`begin`) to their first trial's training (`end`), then
freeze what exists (`gc.freeze`: moved where no collection looks again) and resume it for what
the command builds from then on (a training's objects are collected as ever). Cycles the start
dropped stay with the process, as the frozen objects do. A program that never called `begin` (a
notebook, a script) is left as it was.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_PAUSED = threading.Event()  # set by `begin` where it paused the collector, until `end`


def begin() -> None:
    """Pauses the cyclic collector until `end` (a program that had paused it keeps it so)."""
    if gc.isenabled():
        gc.disable()
        _PAUSED.set()


def end() -> None:
    """The start is over: what exists is frozen and the collector resumes. Once; later calls
    (each trial's) cost nothing."""
    if _PAUSED.is_set():
        _PAUSED.clear()
        gc.freeze()
        gc.enable()


@contextlib.contextmanager
def until_first_trial() -> Iterator[None]:
    """`begin`; `end` on leaving, where no trial trained (a command that stopped before one,
    or that runs none: it waits for other processes)."""
    begin()
    try:
        yield
    finally:
        end()
