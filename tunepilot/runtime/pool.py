"""Worker processes on this machine, all on one study.

Each worker is ``python -m tunepilot worker`` (the same process a person starts by hand on
another machine). The storage URL reaches them in ``TUNEPILOT_STORAGE``, never on their command
line (``ps`` shows argv to every user). They run in sessions of their own, so a Ctrl-C in the
terminal reaches each of them once, through the parent, which passes it on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tunepilot.errors import Terminated
from tunepilot.runtime import interrupts


@dataclass(frozen=True)
class PoolResult:
    exit_codes: tuple[int, ...]
    interrupted: KeyboardInterrupt | None  # Ctrl-C or SIGTERM (`Terminated`) passed on


def threads_per_worker(n: int) -> str:
    """One share of the cores each: on a busy machine more threads per process run slower."""
    return str(max(1, (os.cpu_count() or 1) // n))


def run_workers(storage: str, study: str, n: int, *, args: Sequence[str] = (),
                env: Mapping[str, str] | None = None,
                per_worker: Sequence[Mapping[str, str]] = ()) -> PoolResult:
    """Starts `n` workers on `study` and waits for them. Ctrl-C or SIGTERM is passed on to each
    (each fails its running trial cleanly) and reported in the result, not raised.
    `per_worker[i]`: worker i's own environment (its GPUs, from `devices.assign`)."""
    full_env = {**os.environ, **(env or {}), "TUNEPILOT_STORAGE": storage}
    full_env.setdefault("OMP_NUM_THREADS", threads_per_worker(n))
    own = list(per_worker) or [{} for _ in range(n)]
    procs = [subprocess.Popen([sys.executable, "-m", "tunepilot", "worker", "--study", study,
                               "--name", f"w{i + 1}", *args], env={**full_env, **own[i]},
                              start_new_session=True)
             for i in range(n)]
    interrupted: KeyboardInterrupt | None = None
    with interrupts.raising():
        while any(p.poll() is None for p in procs):
            try:
                for p in procs:
                    p.wait()
            except KeyboardInterrupt as e:
                interrupted = e
                sig = signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT
                for p in procs:
                    if p.poll() is None:
                        p.send_signal(sig)
    return PoolResult(tuple(p.returncode for p in procs), interrupted)
