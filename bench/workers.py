"""Several workers on one study: throughput with 1, 2 and 4 workers, and the storage's cost.

1. Storage overhead per trial: one in-process `Tuner`, a trainer that returns at once, 100
   trials, on each storage. What remains is tunepilot's and Optuna's bookkeeping per trial
   (gate, ask, params, tell, history reads), which every worker pays.
2. Throughput: `tune create` then N `tune worker` processes on PostgreSQL, N = 1, 2, 4, on two
   quick tasks: `sleep` (0.5 s of waiting: scales with workers unless coordination costs) and
   `cpu` (0.5 s of single-threaded matmuls at one worker: bounded by the machine's cores).
   Trials per minute are counted from the first trial's start to the last one's end, so
   process start-up is left out.

    python bench/workers.py [--trials 24] [--storage postgresql+psycopg2://postgres@127.0.0.1/test]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import optuna

from tunepilot import Float, SearchSpace, Tuner, trainers

TASKS = '''
import time
import numpy as np

def sleep(config, report):
    time.sleep(0.5)
    return (config["x"] - 2.0) ** 2

_A = np.random.default_rng(0).standard_normal((256, 256))

def cpu(config, report):
    # About 0.5 s of matrix products on one core of this machine (calibrated below).
    for _ in range(REPS):
        _A @ _A
    return (config["x"] - 2.0) ** 2
'''


def overhead(url: str, n: int = 100) -> float:
    """Milliseconds per trial of an instant trainer on `url`."""
    tuner = Tuner(trainers.callable(lambda c, r: (c["x"] - 2.0) ** 2),
                  SearchSpace.of(x=Float(-10, 10)), storage=url,
                  study=f"bench-overhead-{uuid.uuid4().hex[:8]}", sampler="random",
                  pruner="none", display=None)
    tuner.run(n_trials=5)  # connections, tables, imports
    start = time.perf_counter()
    tuner.run(n_trials=5 + n)
    ms = (time.perf_counter() - start) / n * 1000
    optuna.delete_study(study_name=tuner.study_name, storage=tuner.storage)
    return ms


def calibrate() -> int:
    import numpy as np

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    a = np.random.default_rng(0).standard_normal((256, 256))
    start = time.perf_counter()
    for _ in range(200):
        a @ a
    return max(1, int(200 * 0.5 / (time.perf_counter() - start)))


def throughput(url: str, task: str, n_workers: int, n_trials: int, workdir: Path) -> dict:
    study = f"bench-{task}-{n_workers}-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{workdir}", "TUNEPILOT_STORAGE": url,
           "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // n_workers))}
    tune = [sys.executable, "-m", "tunepilot"]
    subprocess.run([*tune, "create", "--trainer", f"tasks:{task}", "--config", "space.toml",
                    "--llm", "none", "--pruner", "none", "--storage", url, "--study", study,
                    "--n-trials", str(n_trials)], cwd=workdir, env=env, check=True,
                   capture_output=True)
    procs = [subprocess.Popen([*tune, "worker", "--study", study], cwd=workdir, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(n_workers)]
    for p in procs:
        p.wait()
    trials = optuna.load_study(study_name=study, storage=url).trials
    optuna.delete_study(study_name=study, storage=url)  # leave the database as it was
    first = min(t.datetime_start for t in trials)
    last = max(t.datetime_complete for t in trials)
    wall = (last - first).total_seconds()
    busy = sum(t.duration.total_seconds() for t in trials)
    return {"trials": len(trials), "wall": wall, "per_min": len(trials) / wall * 60,
            "trial_s": busy / len(trials),
            # Time a worker spent between its trials, per trial (coordination and storage).
            "gap_ms": max(0.0, (n_workers * wall - busy) / len(trials) * 1000)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--storage", default="postgresql+psycopg2://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)

    print(f"machine: {os.cpu_count()} cores; optuna {optuna.__version__}")
    print("\nstorage overhead per trial (instant trainer, 100 trials, one process):")
    with tempfile.TemporaryDirectory() as tmp:
        for name, url in [("sqlite", f"sqlite:///{tmp}/o.db"), ("journal", f"journal:{tmp}/o.log"),
                          ("postgresql", args.storage),
                          ("mysql", "mysql+pymysql://root@127.0.0.1:3306/test")]:
            try:
                print(f"  {name:<11} {overhead(url):6.1f} ms/trial")
            except Exception as e:  # a server that is not running
                print(f"  {name:<11} skipped: {type(e).__name__}: {str(e)[:80]}")

    reps = calibrate()
    print(f"\nthroughput on {args.storage.split('@')[-1]} ({args.trials} trials each):")
    print("| task | workers | trials/min | vs 1 worker | mean trial s | between trials ms |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "tasks.py").write_text(TASKS.replace("REPS", str(reps)))
        (workdir / "space.toml").write_text(
            '[space]\nx = { type = "float", low = -10.0, high = 10.0 }\n')
        for task in ("sleep", "cpu"):
            base = None
            for n in (1, 2, 4):
                r = throughput(args.storage, task, n, args.trials, workdir)
                base = base or r["per_min"]
                print(f"| {task} | {n} | {r['per_min']:.1f} | {r['per_min'] / base:.2f}x | "
                      f"{r['trial_s']:.2f} | {r['gap_ms']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
