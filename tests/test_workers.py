"""Several worker processes on one study, on the real PostgreSQL and MariaDB servers.

Every test here starts real `tune worker` (or `tune run --n-workers`) processes; the trials are
a toy that sleeps, so several run at the same time on two cores.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import ROOT, TUNE, run_tune, runs_file, server_url, toy_workdir

TOY = """
import os, time
from pathlib import Path

def slowish(config, report):
    # A marker file per worker process while a trial runs, so a test can kill it mid-trial.
    mark = Path(f"running-{os.getpid()}")
    mark.write_text("")
    try:
        for epoch in (1, 2):
            time.sleep(0.15)
            report(epoch, (config["x"] - 2.0) ** 2 + 1.0 / epoch)
        return (config["x"] - 2.0) ** 2
    finally:
        mark.unlink()
"""


@pytest.fixture(params=["postgresql", "mysql"])
def server(request: pytest.FixtureRequest) -> str:
    return server_url(request.param)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return toy_workdir(tmp_path, TOY)


def worker(workdir: Path, url: str, study: str, name: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{workdir}", "TUNEPILOT_STORAGE": url}
    return subprocess.Popen([*TUNE, "worker", "--study", study, "--name", name], cwd=workdir,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def create(workdir: Path, url: str, study: str, *args: str) -> None:
    done = run_tune("create", "--config", "toy.toml", "--trainer", "toy:slowish", "--llm", "none",
                    "--pruner", "none", "--storage", url, "--study", study, *args, cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert "tune worker --storage" in done.stdout


def overlapping(trials: list[optuna.trial.FrozenTrial]) -> list[tuple[int, int]]:
    """Pairs of trials that ran at the same time."""
    return [(a.number, b.number) for a in trials for b in trials if a.number < b.number
            and a.datetime_start < b.datetime_complete and b.datetime_start < a.datetime_complete]


def test_four_workers_share_one_study(workdir, server, study_name):
    create(workdir, server, study_name, "--n-trials", "16")
    procs = [worker(workdir, server, study_name, f"w{i}") for i in range(4)]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outputs

    trials = optuna.load_study(study_name=study_name, storage=server).trials
    assert sorted(t.number for t in trials) == list(range(16))  # the budget, each number once
    assert all(t.state == TrialState.COMPLETE for t in trials)
    configs = [t.params["x"] for t in trials]
    assert len(set(configs)) == len(configs)
    pairs = overlapping(trials)
    assert pairs, "the workers never ran trials at the same time"
    assert all(trials[a].params != trials[b].params for a, b in pairs)
    # Every worker took part, and said why it stopped.
    assert all("stopped: budget of 16 trials used" in out for out in outputs), outputs
    ran = [int(out.split("stopped: ")[1].split("; ")[1].split(" trials")[0]) for out in outputs]
    assert sum(ran) == 16 and all(n >= 1 for n in ran), ran


def test_target_in_one_worker_stops_all(workdir, server, study_name):
    # (x - 2)^2 <= 4 for a fifth of the range: reached within the 60-trial budget.
    done = run_tune("run", "--config", "toy.toml", "--trainer", "toy:slowish", "--llm", "none",
                    "--pruner", "none", "--storage", server, "--study", study_name,
                    "--n-workers", "4", "--n-trials", "60", "--target", "4", cwd=workdir,
                    timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "starting 4 workers" in done.stdout
    trials = optuna.load_study(study_name=study_name, storage=server).trials
    hits = sorted((t for t in trials if t.value is not None and t.value <= 4),
                  key=lambda t: t.datetime_complete)
    assert hits, "the target was never reached"
    first = hits[0]
    # No trial started after the target was reached; the ones already running finished.
    late = [t.number for t in trials if t.datetime_start > first.datetime_complete]
    assert late == []
    assert len(trials) < 60
    # Every worker names one trial, a hit: the first to reach the target under the study lock.
    # (Two workers can reach it within a trial's length; which of them Optuna marks complete
    # first is a race, and another worker's hit must not rename the study's.)
    named = set(re.findall(r"target 4 reached by trial (\d+)", done.stdout))
    assert len(named) == 1 and int(named.pop()) in {t.number for t in hits}, done.stdout


def test_a_second_trial_at_the_target_does_not_rename_the_first():
    """Two workers' trials can reach the target a moment apart: the study keeps the first's."""
    from tunepilot.memory import History, records
    from tunepilot.memory.stops import Stop

    study = optuna.create_study()
    first = Stop.target(4.0, trial=1, value=1.14)
    assert records.first_target(study, first)
    assert not records.first_target(study, Stop.target(4.0, trial=3, value=0.5))
    assert History.from_study(study).stop == first
    records.stop(study, None)  # a new run starts clean, and its first hit is recorded
    records.first_target(study, Stop.target(4.0, trial=7, value=2.0))
    assert History.from_study(study).stop == Stop.target(4.0, trial=7, value=2.0)


def test_killed_worker_trial_fails_and_is_rerun(workdir, study_name):
    url = server_url("postgresql")
    create(workdir, url, study_name, "--n-trials", "14", "--heartbeat", "1")
    procs = [worker(workdir, url, study_name, f"w{i}") for i in range(3)]
    victim = procs[0]
    deadline = time.monotonic() + 120
    polled = optuna.storages.RDBStorage(url)  # one connection pool for all the polling
    while time.monotonic() < deadline:
        seen = optuna.load_study(study_name=study_name, storage=polled).trials
        if (sum(t.state == TrialState.COMPLETE for t in seen) >= 3
                and (workdir / f"running-{victim.pid}").exists()):
            victim.send_signal(signal.SIGKILL)  # mid-trial: its trainer is running
            break
        time.sleep(0.02)
    else:
        raise AssertionError("worker w0 never ran a trial")
    victim.wait()
    before = {t.number: t.value for t in seen if t.state == TrialState.COMPLETE}
    outputs = [p.communicate(timeout=60)[0] for p in procs[1:]]
    assert [p.returncode for p in procs[1:]] == [0, 0], outputs

    trials = optuna.load_study(study_name=study_name, storage=url).trials
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(failed) == 1, ([(t.number, t.state) for t in trials], outputs)
    killed = failed[0]
    from tunepilot.memory import History

    record = History.from_study(optuna.load_study(study_name=study_name, storage=url))[
        killed.number]
    assert record.error["kind"] == "interrupted" and "heartbeats" in record.error["message"]
    retry = [t for t in trials if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE
    assert retry[0].params == killed.params
    # The survivor that found it said so on its terminal and in the study's log, where it did.
    said = (f"trial {killed.number} of another worker went silent for 3 s (killed, or its "
            f"machine lost): marked failed; its config runs again, as trial {retry[0].number}")
    assert any(said in out for out in outputs), outputs
    assert said in runs_file(workdir, url, study_name, ".log").read_text()
    # Nothing completed is lost; the killed trial's budget passed to its retry.
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 14 and len(trials) == 15
    assert {t.number: t.value for t in complete if t.number in before} == before


def test_a_worker_killed_before_its_trials_first_heartbeat_is_found(workdir, study_name):
    """A worker killed between Optuna creating its trial and the trial's first heartbeat left
    it RUNNING with no beat at all, which Optuna's stale check passes over: the next worker,
    its budget taken, waited for it for ever (CI, 2026-12-07). Here the killed worker had
    popped a queued config; it is failed once silent past the grace period, and queued again."""
    url = server_url("postgresql")
    create(workdir, url, study_name, "--n-trials", "3", "--heartbeat", "1")
    plain = optuna.storages.RDBStorage(url)  # no heartbeat: the killed worker's last act
    study = optuna.load_study(study_name=study_name, storage=plain)
    study.enqueue_trial({"x": 1.5})
    [queued] = study.get_trials(deepcopy=False)
    plain.set_trial_state_values(queued._trial_id, TrialState.RUNNING)  # popped, not sampled
    done = run_tune("worker", "--storage", url, "--study", study_name, "--llm", "none",
                    cwd=workdir, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    trials = optuna.load_study(study_name=study_name, storage=url).trials
    assert trials[0].state == TrialState.FAIL
    assert "trial 0 of another worker went silent for 3 s" in done.stdout
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == 0]
    assert len(retried) == 1 and retried[0].state == TrialState.COMPLETE
    assert retried[0].params == {"x": 1.5}
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 3


def test_sqlite_is_refused_for_several_processes(workdir, storage):
    done = run_tune("run", "--config", "toy.toml", "--trainer", "toy:slowish", "--llm", "none",
                    "--storage", storage, "--n-workers", "2", cwd=workdir)
    assert done.returncode == 2
    assert "SQLite" in done.stderr and "postgresql://" in done.stderr
    done = run_tune("worker", "--storage", storage, cwd=workdir)
    assert done.returncode == 2 and "postgresql://" in done.stderr


def test_worker_needs_a_study_made_by_tune(server, workdir, study_name):
    optuna.create_study(study_name=study_name, storage=server)
    done = run_tune("worker", "--storage", server, "--study", study_name, cwd=workdir)
    assert done.returncode == 2
    assert "tune create" in done.stderr


def test_workers_on_a_journal_file_are_refused_with_the_alternatives(workdir, tmp_path,
                                                                     study_name):
    """Optuna's journal storage has no heartbeat: a killed worker's trial would stay RUNNING
    forever. Several processes on one are refused, saying why and what to use; one process on
    a journal file still runs."""
    url = f"journal:{tmp_path / 'study.log'}"
    for args in (("run", "--n-workers", "2"), ("create",)):
        done = run_tune(*args, "--config", "toy.toml", "--trainer", "toy:slowish", "--llm",
                        "none", "--storage", url, "--study", study_name, cwd=workdir)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "no heartbeat" in done.stderr and "postgresql://" in done.stderr
    done = run_tune("worker", "--storage", url, cwd=workdir)
    assert done.returncode == 2 and "no heartbeat" in done.stderr
    alone = run_tune("run", "--config", "toy.toml", "--trainer", "toy:slowish", "--llm", "none",
                     "--storage", url, "--study", study_name, "--n-trials", "2", cwd=workdir)
    assert alone.returncode == 0, alone.stdout + alone.stderr


def test_the_llm_sees_configs_running_on_other_workers(study_name):
    """Worker B asks while worker A's trial runs: B's prompt lists A's config as running, and
    B's model repeating it is refused, so the two never train the same config."""
    import threading

    from tests.llm_server import ScriptedLLMServer
    from tests.test_llm import SPACE, answer, openai_model, suggester
    from tunepilot import Tuner, trainers
    from tunepilot.memory import open_storage

    url = server_url("postgresql")
    replies = iter([answer(1.0), answer(1.0), answer(3.0)])
    b_result = {}

    def run_b() -> None:
        # No heartbeat for B: with one, B would wait for A's running trial (in case A died),
        # and A waits for B here.
        b = Tuner(trainers.callable(lambda c, r: (c["x"] - 2) ** 2), SPACE,
                  storage=open_storage(url, heartbeat_s=None),
                  study=study_name, suggester=suggester(openai_model(server.base_url)),
                  pruner="none")
        b_result["result"] = b.run(n_trials=2)

    def train_a(config, report):
        thread = threading.Thread(target=run_b)  # B's whole trial happens during A's
        thread.start()
        thread.join()
        return (config["x"] - 2) ** 2

    with ScriptedLLMServer(lambda r: next(replies)) as server:
        a = Tuner(trainers.callable(train_a), SPACE, storage=url, study=study_name,
                  suggester=suggester(openai_model(server.base_url)), pruner="none")
        a.run(n_trials=2)
        prompts = [r["messages"][-1]["content"] for r in server.requests]
    trials = optuna.load_study(study_name=study_name, storage=url).trials
    assert [t.params["x"] for t in trials] == [1.0, 3.0]
    assert "Running now on other workers" in prompts[1] and "#0 x=1" in prompts[1]
    assert "running now" in prompts[2]  # the refusal went back to the model
    assert b_result["result"].stop_reason == "budget of 2 trials used"


def test_the_python_api_does_what_tune_does(workdir, study_name, monkeypatch):
    """The README's notebook cell: create, run_workers, join + run, best, rerun, on the real
    PostgreSQL (the same sequence of calls, with this machine's server as `url`)."""
    import tunepilot as tp

    url = server_url("postgresql")
    monkeypatch.chdir(workdir)
    monkeypatch.syspath_prepend(str(workdir))
    monkeypatch.delitem(sys.modules, "toy", raising=False)  # another test's toy.py
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{workdir}")  # for the worker processes
    cfg = tp.load_config("toy.toml", storage=url, study=study_name, trainer="toy:slowish",
                         llm="none", pruner="none", n_trials=4)
    tuner, notes = tp.create(cfg)
    assert any(n.startswith("strategy: optuna") for n in notes)
    result = tp.run_workers(tuner, cfg, 2)
    assert (result.n_finished, result.stop_reason) == (4, "budget of 4 trials used")
    tuner, joined, _ = tp.join(url, study_name)
    assert joined.n_trials == 4 and joined.trainer == "toy:slowish"
    more = tp.run(tuner, joined.model_copy(update={"n_trials": 5}))
    assert (more.n_finished, more.n_new) == (5, 1)
    trial, config = tp.best(url, study_name)
    assert config == {"epochs": 3, "seed": 0, "x": trial.params["x"]}
    again = tp.rerun(url, study_name, trial.number)
    assert again.result.best_val_loss == pytest.approx(trial.value)
    assert again.difference == pytest.approx(0.0)


@pytest.mark.parametrize(("flags", "expected"), [
    (("--n-workers", "4"), ["0", "1", "2", "3"]),
    (("--n-workers", "auto", "--gpus-per-trial", "2"), ["0,1", "2,3"]),
])
def test_workers_on_a_gpu_machine_each_see_their_own_devices(workdir, study_name, flags,
                                                               expected):
    """A fake 4-GPU machine (TUNEPILOT_GPUS=4, as nvidia-smi would list them): each worker is
    pinned to its own GPUs through CUDA_VISIBLE_DEVICES, and the trials record which."""
    url = server_url("postgresql")
    done = run_tune("run", "--config", "toy.toml", "--trainer", "toy:slowish", "--llm", "none",
                    "--pruner", "none", "--storage", url, "--study", study_name,
                    *flags, "--n-trials", "8", cwd=workdir, env={"TUNEPILOT_GPUS": "4"},
                    timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    # Each worker names its GPUs as it joins: every one of them is pinned to its own, even a
    # worker that started too late to get any of the 8 trials (on a busy machine, some do).
    out = done.stdout + done.stderr
    pinned = dict(re.findall(r"\[(w\d)\] joined study \S+ on GPUs? (\S+);", out))
    assert sorted(pinned.values()) == expected, out
    assert sorted(pinned) == [f"w{i + 1}" for i in range(len(expected))], out
    # And the 8 trials ran where their workers were pinned (which workers got them is timing).
    trials = optuna.load_study(study_name=study_name, storage=url).trials
    seen = {t.user_attrs["train"]["cuda_visible_devices"] for t in trials}
    assert len(trials) == 8 and seen and seen <= set(expected), seen
    too_many = run_tune("run", "--config", "toy.toml", "--trainer", "toy:slowish", "--llm",
                        "none", "--storage", url, "--study", study_name, "--n-workers", "3",
                        "--gpus-per-trial", "2", cwd=workdir, env={"TUNEPILOT_GPUS": "4"})
    assert too_many.returncode == 2 and "need 6 GPUs; this machine has 4" in too_many.stderr


def test_on_a_cpu_machine_nothing_is_pinned():
    from tunepilot.runtime.devices import assign

    assert assign(3, None, []) == (3, [{}, {}, {}])
    assert assign(None, None, []) == (1, [{}])


def test_which_gpus_workers_may_use(monkeypatch):
    from tunepilot.runtime.devices import gpus

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("TUNEPILOT_GPUS", "0,1,3")  # as the README spells it
    assert gpus() == ["0", "1", "3"]
    monkeypatch.setenv("TUNEPILOT_GPUS", "2")  # a count
    assert gpus() == ["0", "1"]
    monkeypatch.setenv("TUNEPILOT_GPUS", "")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")  # one device id, not a count
    assert gpus() == ["2"]


def readme_worker_commands() -> list[str]:
    """The README's "Several workers, one study" commands, continuation lines joined."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("### Several workers, one study", 1)[1].split("```bash\n", 1)[1]
    block = block.split("```", 1)[0].replace("\\\n", " ")
    return [" ".join(line.split()) for line in block.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


# What the README's placeholders stand for on this machine. The database is `tune`, as the
# README names it; PostgreSQL's trust auth ignores the password.
PLACEHOLDERS = {
    "postgresql": {"USER:PASSWORD": "postgres:anything", "USER": "postgres",
                   "DBHOST": "127.0.0.1"},
}


def tune_database(kind: str) -> str:
    """The server's database `tune`, made if missing."""
    import sqlalchemy

    base = server_url(kind)
    engine = sqlalchemy.create_engine(base, isolation_level="AUTOCOMMIT")
    with engine.connect() as db:
        if kind == "postgresql":
            if not db.execute(sqlalchemy.text(
                    "SELECT 1 FROM pg_database WHERE datname = 'tune'")).first():
                db.execute(sqlalchemy.text("CREATE DATABASE tune"))
        else:
            db.execute(sqlalchemy.text("CREATE DATABASE IF NOT EXISTS tune"))
    engine.dispose()
    return base.rsplit("/", 1)[0] + "/tune"


# The README's commands name PostgreSQL; MySQL's workers are tested below (four workers, a
# fresh database, the target), not by a second run of these commands with another URL.
@pytest.mark.parametrize("kind", ["postgresql"])
def test_the_readme_worker_commands_verbatim(tmp_path, kind):
    """`tune create ...` once, then two `TUNEPILOT_STORAGE=... tune worker --study ctr-night`,
    exactly as the README prints them (placeholders filled in), on the built-in task: both
    workers train trials of the one study, and SIGTERM ends each cleanly."""
    import shlex

    commands = readme_worker_commands()
    assert len(commands) == 2 and commands[0].startswith("tune create --storage postgresql://")
    assert "mysql+pymysql://USER@HOST:3306/DB` works the same" in (ROOT / "README.md").read_text()
    url = tune_database(kind)
    for placeholder, value in PLACEHOLDERS[kind].items():
        commands = [c.replace(placeholder, value) for c in commands]
    create_cmd, worker_cmd = commands
    try:
        optuna.delete_study(study_name="ctr-night", storage=url)
    except KeyError:
        pass
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([*TUNE, *shlex.split(create_cmd)[1:]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assignment, *worker_argv = shlex.split(worker_cmd)
    name, value = assignment.split("=", 1)
    assert name == "TUNEPILOT_STORAGE" and worker_argv[:2] == ["tune", "worker"]
    workers = [subprocess.Popen([*TUNE, *worker_argv[1:]], cwd=tmp_path,
                                env={**env, name: value}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    storage = optuna.storages.RDBStorage(url)  # one connection pool for all the polling
    study = optuna.load_study(study_name="ctr-night", storage=storage)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            trials = study.get_trials(deepcopy=False)
            if sum(t.state == TrialState.COMPLETE for t in trials) >= 2:
                break
            assert all(w.poll() is None for w in workers), [w.communicate()[0] for w in workers]
            time.sleep(0.5)
        else:
            raise AssertionError("the two workers did not finish 2 trials in 240 s")
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        outputs = [w.communicate(timeout=120)[0] for w in workers]
    assert [w.returncode for w in workers] == [143, 143], outputs
    assert study.user_attrs["tunepilot:settings"]["config"]["n_trials"] == 200
    # Each worker trained trials of the one study; numbers are unique across both.
    for out in outputs:
        assert "joined study ctr-night" in out, out
        assert re.search(r"stopped: interrupted \(SIGTERM\); [1-9]\d* trials? run here", out), out
    numbers = [t.number for t in study.trials]
    assert len(numbers) == len(set(numbers)) >= 2
    assert "anything" not in "".join(outputs)  # the password stays out of what it prints
    optuna.delete_study(study_name="ctr-night", storage=storage)
    storage.engine.dispose()


_OPEN_AT = """
import sys, time
from tunepilot.memory import open_storage
start = float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))
open_storage(sys.argv[1])
"""


def fresh_database(kind: str, name: str, tmp_path: Path) -> str:
    """An empty database: a new SQLite file, or `name` dropped and made again on the server."""
    import sqlalchemy

    if kind == "sqlite":
        return f"sqlite:///{tmp_path / (name + '.db')}"
    base = server_url(kind)
    engine = sqlalchemy.create_engine(base, isolation_level="AUTOCOMMIT")
    with engine.connect() as db:
        db.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name}"))
        db.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return base.rsplit("/", 1)[0] + f"/{name}"


@pytest.mark.parametrize("kind", ["sqlite", "postgresql", "mysql"])
def test_workers_started_together_on_a_fresh_database_all_open_it(tmp_path, kind):
    """Four processes open one empty database at the same instant, as workers started together
    on a new database do: each creates Optuna's schema if it is missing, and losing that race
    to another is not an error (before it was handled, 14 of 24 such opens failed here on
    PostgreSQL and MariaDB, and half on SQLite)."""
    url = fresh_database(kind, "tune_fresh", tmp_path)
    start = time.time() + 4.0  # past the processes' imports
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN_AT, url, str(start)],
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
                              stderr=subprocess.PIPE) for _ in range(4)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors


def test_a_worker_with_nothing_left_waits_for_the_others_and_no_longer():
    """`wait_for`: while the trials it waits for run, it sleeps; it returns True as soon as they
    have ended with nothing queued (the worker exits then, not a heartbeat later), and False
    when a trial is queued again (a dead worker's, for it to run) or its time is up."""
    import threading

    from tunepilot.agent.loop import WAIT_POLL_S, wait_for

    study = optuna.create_study()
    running = study.ask()
    ends = threading.Timer(0.6, lambda: study.tell(running, 1.0))
    start = time.monotonic()
    ends.start()
    assert wait_for(study, {running.number}, longest=30.0) is True
    assert time.monotonic() - start < 0.6 + 2 * WAIT_POLL_S

    other = study.ask()
    threading.Timer(0.6, lambda: study.enqueue_trial({"x": 1.0})).start()
    assert wait_for(study, {other.number}, longest=30.0) is False  # a trial to run
    assert [t.state for t in study.trials][-1] == TrialState.WAITING
    assert wait_for(study, {other.number}, longest=1.0) is False  # still queued
    study.tell(other, 2.0)
    study.tell(study.ask(), 3.0)
    third = study.ask()
    start = time.monotonic()
    assert wait_for(study, {third.number}, longest=1.0) is False  # still running: time up
    assert time.monotonic() - start >= 1.0
