"""Trial isolation: each trial in a child process, so that a segfault, an out-of-memory kill or a
hung trial costs one trial, not the search, and GPU memory is returned between trials.

The child builds the trainer itself (from a picklable `build` function, e.g. a trainer spec),
runs one config, and reports each epoch back over a pipe; the parent answers whether to go on,
so pruning works as in-process. Children come from a fork server that has already imported the
trainer's framework: a trial starts in milliseconds, not the seconds an import of Lightning costs.
"""

from __future__ import annotations

import multiprocessing
import signal
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

import optuna

from tunepilot.errors import ChildError, TrialCrashed, TrialFailed, describe
from tunepilot.runtime import interrupts
from tunepilot.trainers.base import Report, Trainer, TrainResult


class TrialTimeout(TrialFailed):
    kind = "timeout"


class Isolated:
    """A trainer that runs `build()`'s trainer in a fresh child process per trial.

    Example:
        >>> trainer = Isolated(functools.partial(trainers.from_spec, "my_pkg.train:fit"),
        ...                    timeout_s=3600)  # doctest: +SKIP
    """

    def __init__(self, build: Callable[[], Trainer], *, timeout_s: float | None = None,
                 preload: tuple[str, ...] = ()):
        self.build = build
        self.timeout_s = timeout_s
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(["tunepilot.runtime.isolate", *preload])

    def __call__(self, config: Mapping[str, Any], report: Report) -> TrainResult:
        parent, child = self._context.Pipe()
        # Not a daemon: a trial may start processes of its own (DataLoader workers, DDP ranks);
        # the `finally` below kills it however the trial ends.
        process = self._context.Process(target=_child, args=(self.build, dict(config), child),
                                        daemon=False)
        process.start()
        child.close()
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        try:
            while True:
                if deadline is not None and time.monotonic() > deadline:
                    raise TrialTimeout(f"the trial ran past its {self.timeout_s:g} s limit "
                                       "(--trial-timeout) and was killed")
                interrupts.check()
                if not parent.poll(0.2):
                    if not process.is_alive() and not parent.poll(0):
                        raise TrialCrashed.of_exit(process.exitcode)
                    continue
                try:
                    kind, payload = parent.recv()
                except EOFError:
                    process.join(5)
                    raise TrialCrashed.of_exit(process.exitcode) from None
                if kind == "epoch":
                    try:
                        report(*payload)
                    except BaseException:
                        parent.send("stop")
                        raise
                    parent.send("go")
                elif kind == "result":
                    return payload
                elif kind == "pruned":
                    raise optuna.TrialPruned(payload)
                else:
                    raise ChildError(*payload)
        finally:
            if process.is_alive():
                process.kill()
            process.join(10)
            parent.close()


class _Stop(Exception):
    pass


def _child(build: Callable[[], Trainer], config: dict[str, Any], conn: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what Ctrl-C means

    def report(epoch: int, val_loss: float) -> None:
        conn.send(("epoch", (epoch, float(val_loss))))
        if conn.recv() == "stop":
            raise _Stop()

    try:
        result = build()(config, report)
        conn.send(("result", result))
    except _Stop:
        pass  # the parent already knows why (pruned or diverged)
    except optuna.TrialPruned as e:
        conn.send(("pruned", str(e)))
    except Exception as e:
        described = describe(e)
        conn.send(("error", (described["kind"], described["message"])))
    finally:
        conn.close()


__all__ = ["ChildError", "Isolated", "TrialCrashed", "TrialTimeout"]
