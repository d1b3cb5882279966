"""Many workers on one PostgreSQL: tunepilot's `tune worker`s beside plain Optuna workers, on a
server of the bench's own (`tests/pg_server.py`: `max_connections` as a stock install has it,
nothing else connected), in the same run.

Each trial sleeps 2-3 s and uses no CPU, so only the coordination is measured. A row: N workers
share 2 x N trials; wall time from the first worker's start to the last one's exit (process
start-up included), the ideal (two trials of 3 s), the peak of the server's client connections
(polled every 20 ms), the workers that exited with an error, and the seconds from the workers'
start to the first trial's start and to the N-th's (the last worker's first trial).
`--plain-sampler gp`: the plain Optuna workers use `GPSampler()` (the model tunepilot's default
draws with) instead of Optuna's default, TPE. `--restart S` stops the server S
seconds after a third of the trials are done and starts it again after `--down` seconds.

    python bench/night.py --workers 4,16,64
    python bench/night.py --workers 8 --restart 3 --down 30 --only tunepilot
    python bench/night.py --workers 8 --storm 600 --kill-every 15 --only tunepilot

`--storm S`: for S seconds a supervisor kills a random worker (SIGKILL) every `--kill-every`
seconds and starts it again, on a budget the workers use up about then (heartbeat 5 s); the
row is followed by the study's accounting: kills, trials complete, failed (killed) and their
retries, the budget used, trials left running, and configs that ran twice at the same time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sqlalchemy
from sqlalchemy.pool import NullPool

from tests.pg_server import ThrowawayPostgres

TOY = '''
import random, time

def sleepy(config, report):
    time.sleep(2.0 + random.random())
    return (config["x"] - 2.0) ** 2
'''

PLAIN = '''
import random, sys, time
import optuna
from optuna.study import MaxTrialsCallback

optuna.logging.set_verbosity(optuna.logging.WARNING)
url, name, total, kind = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sampler = optuna.samplers.GPSampler() if kind == "gp" else None
study = optuna.load_study(study_name=name, storage=url, sampler=sampler)
print("first trial at", time.time(), flush=True)

def objective(trial):
    x = trial.suggest_float("x", -10.0, 10.0)
    time.sleep(2.0 + random.random())
    return (x - 2.0) ** 2

study.optimize(objective, callbacks=[MaxTrialsCallback(total, states=None)])
'''


class Peak:
    """The server's client connections, polled: their peak (the poller's own left out). The
    poller keeps its connection (a new one every 20 ms cost the server a quarter of a core,
    which the workers measured were short of), in autocommit, so each count is read afresh."""

    def __init__(self, url: str):
        self.engine = sqlalchemy.create_engine(url, pool_size=1, isolation_level="AUTOCOMMIT")
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        query = sqlalchemy.text("SELECT count(*) FROM pg_stat_activity "
                                "WHERE backend_type = 'client backend'")
        db = None
        while not self._stop.is_set():
            try:
                db = db or self.engine.connect()
                self.peak = max(self.peak, int(db.execute(query).scalar() or 0) - 1)
            except sqlalchemy.exc.SQLAlchemyError:  # full, or down: the workers' business
                if db is not None:
                    db.invalidate()
                    db = None
            time.sleep(0.02)
        if db is not None:
            db.close()
        self.engine.dispose()

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def completed(url: str, study: str) -> int:
    engine = sqlalchemy.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as db:
            return int(db.execute(sqlalchemy.text(
                "SELECT count(*) FROM trials t JOIN studies s ON s.study_id = t.study_id "
                "WHERE s.study_name = :n AND t.state = 'COMPLETE'"), {"n": study}).scalar() or 0)
    except sqlalchemy.exc.SQLAlchemyError:
        return 0
    finally:
        engine.dispose()


def run(kind: str, n: int, pg: ThrowawayPostgres, work: Path, restart: float | None,
        down: float, sampler: str = "auto", plain: str = "tpe") -> dict[str, object]:
    study = f"{kind}-{n}"
    total = 2 * n
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{work}"}
    if kind == "tunepilot":
        subprocess.run([sys.executable, "-m", "tunepilot", "create", "--trainer", "toy:sleepy",
                        "--config", "toy.toml", "--llm", "none", "--pruner", "none",
                        "--sampler", sampler,
                        "--storage", pg.url, "--study", study, "--n-trials", str(total)],
                       cwd=work, env=env, check=True, capture_output=True)
        argv = [[sys.executable, "-m", "tunepilot", "worker", "--storage", pg.url, "--study",
                 study, "--name", f"w{i}"] for i in range(n)]
    else:
        import optuna

        optuna.create_study(study_name=study, storage=pg.url)
        argv = [[sys.executable, str(work / "plain.py"), pg.url, study, str(total), plain]
                for _ in range(n)]
    start = time.time()
    with Peak(pg.url) as peak:
        procs = [subprocess.Popen(a, cwd=work, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for a in argv]
        if restart is not None:
            while completed(pg.url, study) < total // 3:
                time.sleep(0.2)
            time.sleep(restart)
            pg.stop("fast")
            time.sleep(down)
            pg.start()
        outs = [p.communicate()[0] for p in procs]
    wall = time.time() - start
    failed = [o for p, o in zip(procs, outs, strict=True) if p.returncode != 0]
    return {"kind": kind, "n": n, "wall": wall, "peak": peak.peak, "failed": len(failed),
            "why": failed[0].strip().splitlines()[-1][:160] if failed else "",
            "done": completed(pg.url, study), "total": total, "outs": outs,
            "starts": [s - start for s in starts(pg.url, study)]}


def starts(url: str, study: str) -> list[float]:
    """When the study's trials started (seconds since the epoch), in order."""
    engine = sqlalchemy.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as db:
            # Optuna writes the local time without a zone: read back as local time.
            return sorted(t.timestamp() for t, in db.execute(sqlalchemy.text(
                "SELECT t.datetime_start FROM trials t JOIN studies s ON "
                "s.study_id = t.study_id WHERE s.study_name = :n AND t.datetime_start IS NOT "
                "NULL"), {"n": study}))
    finally:
        engine.dispose()


def storm(n: int, pg: ThrowawayPostgres, work: Path, seconds: float, every: float) -> str:
    """`n` workers under a storm of kills (see the module's text); the accounting in words."""
    import random
    import signal

    import optuna

    from tunepilot.memory import History

    study, total = f"storm-{n}", int(0.7 * n * seconds / 2.5)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{work}"}
    subprocess.run([sys.executable, "-m", "tunepilot", "create", "--trainer", "toy:sleepy",
                    "--config", "toy.toml", "--llm", "none", "--pruner", "none", "--storage",
                    pg.url, "--study", study, "--n-trials", str(total), "--heartbeat", "5",
                    "--sampler", "tpe"], cwd=work, env=env, check=True, capture_output=True)

    def start(i: int) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "tunepilot", "worker", "--storage",
                                 pg.url, "--study", study, "--name", f"w{i}"], cwd=work,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)

    rng = random.Random(0)
    procs = [start(i) for i in range(n)]
    kills, begin = 0, time.time()
    while time.time() - begin < seconds and any(p.poll() is None for p in procs):
        time.sleep(every)
        i = rng.randrange(n)
        if procs[i].poll() is None:
            procs[i].send_signal(signal.SIGKILL)
            procs[i].wait()
            kills += 1
            procs[i] = start(i)
    errors = [p.communicate()[1] for p in procs]
    failed = sum(p.returncode != 0 for p in procs)
    storage = optuna.storages.RDBStorage(pg.url, engine_kwargs={"poolclass": NullPool})
    loaded = optuna.load_study(study_name=study, storage=storage)
    trials = loaded.trials
    history = History.from_study(loaded)
    state = {s: sum(t.state.name == s for t in trials) for s in ("COMPLETE", "FAIL", "RUNNING",
                                                                  "WAITING")}
    retried = sum(1 for t in trials if t.system_attrs.get("failed_trial") is not None)
    # Trials killed before their config was set have none: not "one config" run twice.
    spans = sorted((t.datetime_start, t.datetime_complete, tuple(sorted(t.params.items())),
                    t.number) for t in trials
                   if t.datetime_start and t.datetime_complete and t.params)
    pairs = [(n1, n2) for i, (s1, e1, c1, n1) in enumerate(spans)
             for s2, _, c2, n2 in spans[i + 1:] if c1 == c2 and s2 < e1]
    twice = f"{len(pairs)}" + (f" (trials {pairs[:5]})" if pairs else "")
    unset = sum(1 for t in trials if not t.params)
    return (f"storm of {time.time() - begin:.0f} s, {n} workers, a kill every {every:g} s: "
            f"{kills} kills; {len(trials)} trials: {state['COMPLETE']} complete, "
            f"{state['FAIL']} failed (killed), {retried} retries; budget used "
            f"{history.budget_used()} of {total}; left running {state['RUNNING']}, waiting "
            f"{state['WAITING']}; configs running twice at once {twice}; killed before a config "
            f"was set {unset}; workers that exited "
            f"with an error at the end {failed}" + (f" ({errors[0][-200:]})" if failed else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="4,16,64")
    parser.add_argument("--only", choices=("tunepilot", "optuna"))
    parser.add_argument("--max-connections", type=int, default=100)
    parser.add_argument("--restart", type=float, help="stop the server this many seconds "
                        "after a third of the trials are done")
    parser.add_argument("--down", type=float, default=30.0)
    parser.add_argument("--show", type=int, default=0, help="print the first N workers' output")
    parser.add_argument("--sampler", default="auto", help="tunepilot's sampler [auto]")
    parser.add_argument("--plain-sampler", choices=("tpe", "gp"), default="tpe",
                        help="plain Optuna's sampler [tpe: Optuna's default]")
    parser.add_argument("--storm", type=float, help="seconds of kills (see the module's text)")
    parser.add_argument("--kill-every", type=float, default=15.0)
    args = parser.parse_args()
    kinds = [args.only] if args.only else ["tunepilot", "optuna"]
    print(f"# night bench {time.strftime('%Y-%m-%d %H:%M')}: PostgreSQL max_connections "
          f"{args.max_connections}; trials sleep 2-3 s", flush=True)
    print("| workers | trials | | wall s | ideal s | peak connections | failed | complete | "
          "first trial starts, s | the N-th starts, s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp, \
            ThrowawayPostgres(args.max_connections) as pg:
        work = Path(tmp)
        (work / "toy.py").write_text(TOY)
        (work / "toy.toml").write_text('[space]\nx = { type = "float", low = -10.0, '
                                       'high = 10.0 }\n')
        (work / "plain.py").write_text(PLAIN)
        for n in (int(x) for x in args.workers.split(",")):
            if args.storm:
                print(storm(n, pg, work, args.storm, args.kill_every), flush=True)
                continue
            for kind in kinds:
                row = run(kind, n, pg, work, args.restart, args.down, args.sampler,
                          args.plain_sampler)
                who = (f"tunepilot ({args.sampler})" if kind == "tunepilot" else
                       f"plain Optuna ({args.plain_sampler})")
                began = list(row["starts"])  # type: ignore[call-overload]
                when = (f"{began[0]:.1f} | {began[min(n, len(began)) - 1]:.1f}" if began
                        else "- | -")
                print(f"| {n} | {row['total']} x 2-3 s | {who} | {row['wall']:.1f} | 6 | "
                      f"{row['peak']} | {row['failed']} of {n} | {row['done']} | {when} |"
                      + (f" first error: {row['why']}" if row["failed"] else ""), flush=True)
                for out in list(row["outs"])[:args.show]:  # type: ignore[call-overload]
                    print("\n".join("    " + line for line in out.splitlines()))


if __name__ == "__main__":
    main()
