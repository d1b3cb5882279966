"""A night's database: workers that hold no connection they are not using, ride out a server
restart, and wait for a full server. Each test starts a PostgreSQL server of its own
(`tests/pg_server.py`), since it restarts or fills it."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from optuna.trial import TrialState

from tests.conftest import ROOT, TUNE, run_tune, runs_file, toy_workdir
from tests.pg_server import ThrowawayPostgres
from tunepilot.memory import History

pytestmark = pytest.mark.slow

TOY = """
import time

def sleepy(config, report):
    for epoch in (1, 2):
        time.sleep(0.4)
        report(epoch, (config["x"] - 2.0) ** 2 + 1.0 / epoch)
    return (config["x"] - 2.0) ** 2
"""


@pytest.fixture
def server():
    if os.geteuid() == 0 and subprocess.run(["id", "postgres"], capture_output=True).returncode:
        pytest.skip("no postgres user to run a throwaway server as")
    with ThrowawayPostgres(max_connections=20) as pg:
        yield pg


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return toy_workdir(tmp_path, TOY)


def worker(workdir: Path, url: str, name: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{workdir}", "TUNEPILOT_STORAGE": url}
    return subprocess.Popen([*TUNE, "worker", "--study", "night", "--name", name], cwd=workdir,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def create(workdir: Path, url: str, n_trials: int, *args: str) -> None:
    done = run_tune("create", "--config", "toy.toml", "--trainer", "toy:sleepy", "--llm", "none",
                    "--pruner", "none", "--storage", url, "--study", "night", "--n-trials",
                    str(n_trials), *args, cwd=workdir)
    assert done.returncode == 0, done.stdout + done.stderr


def connections(engine: sqlalchemy.Engine) -> int:
    with engine.connect() as db:
        return int(db.execute(sqlalchemy.text(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tunepilot'"))
            .scalar())


def trials(url: str) -> list[optuna.trial.FrozenTrial]:
    storage = optuna.storages.RDBStorage(url, engine_kwargs={"poolclass": sqlalchemy.pool.NullPool})
    return optuna.load_study(study_name="night", storage=storage).trials


def test_a_worker_holds_no_connection_while_it_trains_and_at_most_two(workdir, server):
    create(workdir, server.url, 6)
    watcher = sqlalchemy.create_engine(server.url, poolclass=sqlalchemy.pool.NullPool)
    seen: list[int] = []
    proc = worker(workdir, server.url, "w1")
    while proc.poll() is None:
        seen.append(connections(watcher))
        time.sleep(0.002)
    out = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode == 0, out
    assert max(seen) <= 2, seen
    # Most of the time it trains, holding none.
    assert seen.count(0) > len(seen) / 2, seen
    assert [t.state for t in trials(server.url)] == [TrialState.COMPLETE] * 6


def test_workers_ride_out_a_server_restart_and_say_so(workdir, server):
    # Heartbeats every 2 s: the outage (8 s) outlasts the grace period (6 s), so a worker back
    # from it must not fail the others' trials as dead before they could beat again.
    create(workdir, server.url, 14, "--heartbeat", "2")
    procs = [worker(workdir, server.url, f"w{i}") for i in (1, 2, 3)]
    watcher = sqlalchemy.create_engine(server.url, poolclass=sqlalchemy.pool.NullPool)
    deadline = time.monotonic() + 120
    while sum(t.state == TrialState.COMPLETE for t in trials(server.url)) < 3:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.2)
    watcher.dispose()
    server.stop("fast")  # what a restart or a fail-over does to the connections
    time.sleep(8)
    server.start()
    outputs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    for out in outputs:
        assert "Traceback" not in out
        assert "! database unreachable (" in out, out
        assert "retrying for up to 300 s (the outage setting); a running trial goes on" in out
        assert "! database back after " in out, out
    log = runs_file(workdir, server.url, "night", ".log").read_text()
    assert log.count("! database unreachable (") >= 3 and "! database back after" in log
    # The budget is exact: every trial ended, none twice, none left running.
    done = trials(server.url)
    history = History.from_study(optuna.load_study(
        study_name="night", storage=optuna.storages.RDBStorage(
            server.url, engine_kwargs={"poolclass": sqlalchemy.pool.NullPool})))
    assert [t.state for t in done] == [TrialState.COMPLETE] * 14, [
        (t.number, t.state, t.user_attrs.get("error")) for t in done]
    assert history.budget_used() == 14


def test_a_full_server_is_waited_for_and_said(workdir, server):
    create(workdir, server.url, 2)
    hogs = []
    hog = sqlalchemy.create_engine(server.url, poolclass=sqlalchemy.pool.NullPool)
    for _ in range(server.max_connections):  # every connection the server allows
        try:
            hogs.append(hog.connect())
        except sqlalchemy.exc.OperationalError:
            break
    proc = worker(workdir, server.url, "w1")
    said: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            said.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while not any("database unreachable" in line for line in said):
        assert time.monotonic() < deadline and proc.poll() is None, "".join(said)
        time.sleep(0.1)
    time.sleep(1.5)
    assert proc.poll() is None  # it waits, it does not exit
    for conn in hogs:
        conn.close()
    assert proc.wait(timeout=120) == 0, "".join(said)
    reader.join(timeout=5)
    text = "".join(said)
    assert "too many clients" in text and "database back after" in text, text
    assert [t.state for t in trials(server.url)] == [TrialState.COMPLETE] * 2


def test_a_storm_of_killed_workers_leaves_every_trial_accounted_for(workdir, server):
    """Workers killed with SIGKILL at random and started again by a supervisor, again and again:
    every trial complete, or failed (killed) and retried once; the budget exact; no trial left
    running; no two trials running one config at once."""
    import random
    import signal

    create(workdir, server.url, 16, "--heartbeat", "1")
    rng = random.Random(0)
    procs = {f"w{i}": worker(workdir, server.url, f"w{i}") for i in (1, 2, 3)}
    kills, start = 0, time.monotonic()
    while time.monotonic() - start < 25 and any(p.poll() is None for p in procs.values()):
        time.sleep(2.5)
        name = rng.choice(sorted(procs))
        if procs[name].poll() is None:
            procs[name].send_signal(signal.SIGKILL)
            procs[name].communicate()
            kills += 1
        procs[name] = worker(workdir, server.url, name)  # the supervisor starts it again
    outputs = [p.communicate(timeout=240)[0] for p in procs.values()]
    assert all(p.returncode == 0 for p in procs.values()), outputs
    assert kills >= 3
    done = trials(server.url)
    storage = optuna.storages.RDBStorage(server.url,
                                         engine_kwargs={"poolclass": sqlalchemy.pool.NullPool})
    history = History.from_study(optuna.load_study(study_name="night", storage=storage))
    assert history.budget_used() == 16
    assert not [t.number for t in done if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    complete = [t for t in done if t.state == TrialState.COMPLETE]
    failed = [t for t in done if t.state == TrialState.FAIL]
    # A failed trial is a killed one: its config retried once (or its retries used up).
    for t in failed:
        retries = [r for r in done if r.system_attrs.get("failed_trial") == t.number]
        assert len(retries) <= 1, (t.number, [r.number for r in retries])
        assert "killed" in str(t.user_attrs.get("error") or history[t.number].error), t.number
    assert len(complete) + len([t for t in failed if not any(
        r.system_attrs.get("failed_trial") == t.number for r in done)]) == 16
    # No two trials ran one config at the same time (trials killed before their config was
    # set have none: two of those are not one config).
    spans = [(t.datetime_start, t.datetime_complete, tuple(sorted(t.params.items())))
             for t in done if t.datetime_start and t.datetime_complete and t.params]
    for i, (s1, e1, c1) in enumerate(spans):
        for s2, e2, c2 in spans[i + 1:]:
            assert not (c1 == c2 and s1 < e2 and s2 < e1), (c1, s1, e1, s2, e2)
