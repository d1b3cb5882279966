"""One conformance suite for the memory, run against every storage backend."""

from __future__ import annotations

import time

from tests.conftest import quadratic
from tunepilot import Float, SearchSpace, Tuner, trainers
from tunepilot.memory import History, attrs, load_study

SPACE = SearchSpace.of(x=Float(-10.0, 10.0))


def tuner(storage, name, fn=quadratic):
    return Tuner(trainers.callable(fn), SPACE, storage=storage, study=name, pruner="none",
                 settings={"config": {"n_trials": 6}})


def test_resume_keeps_trials_attrs_and_settings(any_storage, study_name):
    first = tuner(any_storage, study_name).run(n_trials=4)
    assert first.n_new == 4
    second = tuner(any_storage, study_name).run(n_trials=6)
    assert (second.n_finished, second.n_new) == (6, 2)
    study = load_study(any_storage, study_name)
    history = History.from_study(study)
    assert [t.number for t in history] == list(range(6))
    assert all(t.proposer == "optuna" for t in history)
    assert all(len(t.curve) == 3 for t in history)  # per-epoch reports are kept
    assert all(t.duration_s is not None for t in history)
    assert history.best_trial.value == second.best_value
    assert history.settings == {"config": {"n_trials": 6}}
    assert study.user_attrs[attrs.SETTINGS] == {"version": 2, "config": {"n_trials": 6}}


def test_failures_are_recorded_with_their_cause(any_storage, study_name):
    def crash(config, report):
        raise MemoryError("out of memory in layer 3")

    tuner(any_storage, study_name, crash).run(n_trials=1)
    [trial] = History.from_study(load_study(any_storage, study_name))
    assert trial.state == "fail"
    assert trial.error["kind"] == "oom"
    assert "out of memory in layer 3" in trial.error["message"]


def test_the_documented_urls_open_and_a_missing_driver_says_so():
    """postgresql:// (psycopg 3) and mysql+pymysql:// come with tunepilot; a driver that is not
    installed is named as such, not blamed on the server."""
    import pytest

    from tests.conftest import server_url
    from tunepilot import ConfigError
    from tunepilot.memory import open_storage

    assert server_url("postgresql").startswith("postgresql://")
    open_storage(server_url("postgresql"))
    open_storage(server_url("mysql"))
    with pytest.raises(ConfigError, match="database driver is not installed"):
        open_storage("postgresql+pg8000://postgres@127.0.0.1:5432/test")


def test_the_study_lock_is_one_lock_in_a_process_and_reentrant_in_its_thread(any_storage,
                                                                             study_name):
    """A worker holds its study lock from its gate until Optuna creates the trial; if it finds
    another worker's dead trial then, the code that records it takes the lock again through
    another `StudyLock`. That must not wait for itself (it did, forever, on PostgreSQL), while
    another thread still waits."""
    import threading

    from tunepilot.memory import open_storage
    from tunepilot.memory.lock import StudyLock

    storage = open_storage(any_storage)
    gate, other = StudyLock(storage, study_name), StudyLock(storage, study_name)
    entered = threading.Event()

    def elsewhere() -> None:
        with StudyLock(storage, study_name):
            entered.set()

    gate.acquire()
    thread = threading.Thread(target=elsewhere)
    thread.start()
    other.acquire()  # the same thread: at once
    other.release()
    other.close()
    assert not entered.wait(0.3)  # another thread waits for the holder
    gate.release()
    assert entered.wait(30)
    thread.join()
    gate.close()


def test_a_server_with_no_connection_left_is_said_so_with_what_to_do(monkeypatch):
    """What PostgreSQL says when its max_connections are taken, as Optuna wraps it (a
    StorageInternalError whose own words are "an exception is raised during the commit")."""
    import optuna
    import pytest

    from tunepilot.errors import StorageUnavailable
    from tunepilot.memory import outage, store

    def full(url: str, beat: object, create_tables: bool = True) -> None:
        try:
            raise RuntimeError('connection to server at "127.0.0.1", port 5432 failed: FATAL:  '
                               "sorry, too many clients already")
        except RuntimeError as e:
            raise optuna.exceptions.StorageInternalError(
                "An exception is raised during the commit.") from e

    monkeypatch.setattr(store, "_rdb_storage", full)
    heard: list[str] = []
    monkeypatch.setattr(outage, "ANNOUNCE", [heard.append])
    start = time.monotonic()
    with pytest.raises(StorageUnavailable) as said:  # waited for, then given up on
        store.open_storage("postgresql://me:s3cret@127.0.0.1:5432/tune", outage_s=1.0)
    assert 1.0 <= time.monotonic() - start < 10
    text = str(said.value)
    assert "past the 1 s this worker waits" in text and "too many clients" in text
    assert "max_connections" in text and "s3cret" not in text
    assert len(heard) == 1 and heard[0].startswith("database unreachable (")
    assert "too many clients" in heard[0] and "retrying for up to 1 s" in heard[0]


def test_the_grpc_proxy_is_refused_with_what_would_not_hold(tmp_path):
    """`tune worker --storage grpc://...`: refused before anything runs, saying which pieces
    would not hold through Optuna's proxy (docs/overnight.md#past-one-databases-connections)."""
    from tests.conftest import run_tune

    done = run_tune("worker", "--storage", "grpc://127.0.0.1:13000", "--study", "s",
                    cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stderr
    assert "gRPC storage proxy is not supported" in said and "no heartbeat" in said
    assert "no study lock" in said and "Traceback" not in said
    assert "docs/overnight.md#past-one-databases-connections" in said
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_worker_keeps_one_connection_between_its_lock_and_its_training_and_none_else():
    """A reader (`tune show`) opens a connection for each call and closes it, until it takes
    the study lock; from then on its calls share one, kept, as a worker's do from its storage's
    opening; while it trains or waits (`idle`: for the lock, for the other workers) it keeps
    none; under the lock, two (the lock taken on the kept one where it is free at once)."""
    import threading
    import time

    import optuna
    import sqlalchemy

    from tests.conftest import server_url
    from tunepilot.memory.connections import engine_of, idle
    from tunepilot.memory.lock import StudyLock
    from tunepilot.memory.store import open_storage

    storage = open_storage(server_url("postgresql"))
    engine = engine_of(storage)
    sid = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE])
    events: list[str] = []  # the connections opened and closed from here
    for name in ("connect", "close"):
        sqlalchemy.event.listen(engine.pool, name, lambda *a, name=name: events.append(name))

    def calls(n: int) -> list[str]:
        events.clear()
        for _ in range(n):
            storage.get_all_trials(sid, deepcopy=False)
        return list(events)

    try:
        assert calls(3) == ["connect", "close"] * 3  # a reader keeps nothing
        events.clear()
        with StudyLock(storage, f"study-{sid}"):  # the lock's connection, one for the calls
            for _ in range(5):
                storage.get_all_trials(sid, deepcopy=False)
            assert events == ["connect", "connect"]
        assert events == ["connect", "connect", "close"]  # one of the two kept
        assert calls(5) == []  # between the lock and the training: the kept one
        with idle(engine):  # training
            assert events == ["close"]
            assert calls(3) == ["connect", "close"] * 3
        assert calls(3) == ["connect"]  # after it, one kept again
        gate = StudyLock(storage, f"study-{sid}")
        events.clear()
        with gate:  # free: taken on the kept one at once; one more for the calls under it
            assert events == []
            assert calls(2) == ["connect"]
        # Held by another worker: waited for on the one connection it had (the kept one
        # became the lock's), none opened to wait; the calls under it get one when it is in.
        other = sqlalchemy.create_engine(server_url("postgresql"),
                                         poolclass=sqlalchemy.pool.NullPool)
        under: list[list[str]] = []

        def waiter() -> None:
            with gate:
                under.append(calls(2))

        with other.connect() as held:
            held.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": gate._key})
            events.clear()
            thread = threading.Thread(target=waiter)
            thread.start()
            time.sleep(0.5)
            assert thread.is_alive() and events == []
            held.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": gate._key})
            thread.join(30)
        other.dispose()
        assert under == [["connect"]]
        gate.close()
        # A worker's storage (`tune worker`) keeps one from its opening on: its start's calls
        # (the study's settings, its trials) share one.
        worker = open_storage(server_url("postgresql"), worker=True)
        engine = engine_of(worker)
        for name in ("connect", "close"):
            sqlalchemy.event.listen(engine.pool, name, lambda *a, name=name: events.append(name))
        events.clear()
        for _ in range(3):
            worker.get_all_trials(sid, deepcopy=False)
        assert events == ["connect"]
        events.clear()
        with idle(engine):
            assert events == ["close"]
    finally:
        storage.delete_study(sid)
        engine_of(storage).dispose()
        engine.dispose()
