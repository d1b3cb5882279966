"""SIGTERM at a random moment of a `tune run`'s first second of trials: how soon it exits, and how.

    python bench/sigterm.py [--runs 40] [--after 0.3 0.9] [--busy 2]

Each run starts `tune run --llm none` on a trainer that sleeps a minute (in a fresh folder, a
SQLite study), waits for the study's file, sleeps a random `--after` seconds (by then the run is
opening its study, creating its first trial, starting Optuna's heartbeat, or training), and
sends SIGTERM. A run that has not exited 40 s later is killed and counted as hung. Printed: one
line per run (delay, exit code, seconds to exit), then the exit codes counted and the slowest
exits. Expected: every run exits 143 within a few seconds, or -15 (ended by the signal itself,
which a shell reports as 143 too) when it arrives before `tune` has set its handler. Before
2026-12-07 some hung for ever (a heartbeat thread left running) or waited out SQLite's 30 s lock
and crashed, mostly on a loaded machine (as CI's was): `--busy N` keeps N processes spinning
beside the runs. bench/log/2026-12-07.md.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINER = "import time\n\ndef sleepy(config, report):\n    time.sleep(60)\n    return 1.0\n"
SPACE = '[space]\nx = { type = "float", low = -10, high = 10 }\n'


def one(folder: Path, after: float) -> tuple[int | None, float]:
    """(exit code, seconds from SIGTERM to exit); None: still running 40 s later (killed)."""
    (folder / "toy.py").write_text(TRAINER)
    (folder / "toy.toml").write_text(SPACE)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{folder}"}
    proc = subprocess.Popen([sys.executable, "-m", "tunepilot", "run", "--llm", "none",
                             "--config", "toy.toml", "--trainer", "toy:sleepy", "--storage",
                             "sqlite:///s.db"], cwd=folder, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (folder / "s.db").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(after)
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    try:
        code = proc.wait(timeout=40)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None, time.monotonic() - sent
    return code, time.monotonic() - sent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--after", type=float, nargs=2, default=(0.3, 0.9))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--busy", type=int, default=0, help="processes spinning beside the runs")
    args = ap.parse_args()
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.busy)]
    try:
        run(args)
    finally:
        for p in spin:
            p.kill()


def run(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    seen: list[tuple[float, int | None, float]] = []
    for i in range(args.runs):
        folder = Path(tempfile.mkdtemp(prefix="tunepilot-sigterm-"))
        try:
            after = rng.uniform(*args.after)
            code, took = one(folder, after)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        seen.append((after, code, took))
        print(f"run {i}: SIGTERM {after:.2f} s in, exit {'hung' if code is None else code} "
              f"after {took:.1f} s", flush=True)
    codes = collections.Counter("hung" if c is None else str(c) for _, c, _ in seen)
    print("exit codes:", ", ".join(f"{c}: {n}" for c, n in codes.most_common()))
    slowest = sorted((t for *_, t in seen), reverse=True)[:5]
    print("slowest exits (s):", ", ".join(f"{t:.1f}" for t in slowest))


if __name__ == "__main__":
    main()
