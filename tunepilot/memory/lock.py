"""A lock per study, shared by every worker of that study, held for milliseconds.

Optuna's storages have no compare-and-set, so two workers can both see "19 of 20 trials" and
both start one, or both have the LLM propose the same config at the same instant. Two short
critical sections close those races: counting the trials and creating the next one (the trial
budget), and checking a proposed config against the running ones and recording it (no
duplicates in flight).

Kinds, by storage:
    PostgreSQL   pg_advisory_lock on a connection of the storage's engine, opened while the
                 lock is held and closed with it (the server frees the lock if the worker
                 dies, so a SIGKILL never leaves the study locked)
    MySQL        GET_LOCK / RELEASE_LOCK, likewise per connection
    journal file fcntl.flock on FILE.tunepilot-lock (processes of one machine)
    SQLite, in-memory storages: a lock of this process (one process is all they allow)
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any, Self

from tunepilot.memory.connections import engine_of, idle, working

_WAIT_S = 120  # a lock is held for milliseconds; two minutes means a server in trouble


class _Shared:
    """One study's lock as this process holds it: every `StudyLock` of the study in the
    process is this one lock, re-entrant in the thread that holds it (a worker that holds its
    gate and finds another worker's dead trial takes the lock again, on a connection of the
    same session, instead of waiting for itself)."""

    def __init__(self) -> None:
        self.thread = threading.RLock()
        self.depth = 0
        self.conn: Any = None
        self.file: Any = None


_SHARED: dict[tuple[Any, ...], _Shared] = {}
_SHARED_GUARD = threading.Lock()


class StudyLock:
    """Re-entrant in one thread, across every `StudyLock` of the study in this process;
    `with lock:` or `acquire()` / `release()`."""

    def __init__(self, storage: Any, study_name: str):
        self.name = study_name
        self._depth = 0  # this object's own acquisitions, for `close`
        digest = hashlib.sha1(f"tunepilot:{study_name}".encode()).digest()
        self._key = int.from_bytes(digest[:8], "big", signed=True)
        self._mysql_name = "tunepilot:" + digest.hex()[:40]
        engine = engine_of(storage)
        self._dialect = engine.dialect.name if engine is not None else None
        self._engine = engine if self._dialect in ("postgresql", "mysql", "mariadb") else None
        self._path = _journal_path(storage)
        # A database server's outage, ridden through by the lock's own calls too.
        self._outage = getattr(storage, "outage", None)
        where: Any = (str(self._engine.url) if self._engine is not None else self._path)
        with _SHARED_GUARD:
            self._shared = _SHARED.setdefault((where, study_name), _Shared())

    def acquire(self) -> None:
        shared = self._shared
        shared.thread.acquire()  # the other threads of this process wait here
        try:
            if shared.depth == 0:
                if self._engine is not None:
                    # Free, as it mostly is (held for milliseconds): taken at once, and the
                    # worker keeps its connection for the calls under it. Held by another
                    # worker: waited for holding the lock's connection alone.
                    if not self._call(self._server_acquire, False):
                        with idle(self._engine):
                            self._call(self._server_acquire, True)
                    working(self._engine)
                elif self._path is not None:
                    import fcntl

                    # Not FILE.lock: Optuna's own journal lock uses that name.
                    shared.file = _locked(f"{self._path}.tunepilot-lock", fcntl.LOCK_EX)
                # else SQLite or in-memory: one process, the thread lock is the lock
        except BaseException:
            shared.thread.release()
            raise
        shared.depth += 1
        self._depth += 1

    def release(self) -> None:
        if self._depth == 0:
            return
        shared = self._shared
        self._depth -= 1
        shared.depth -= 1
        try:
            if shared.depth == 0:
                if self._engine is not None:
                    try:
                        self._server_release()
                    except Exception as e:
                        # A server that restarted holds no lock of a connection it dropped.
                        if not _connection_lost(e):
                            raise
                    finally:
                        # Closed (or back to a pool): a worker holds no connection for a lock it
                        # does not hold (its trial trains for minutes; the lock, milliseconds).
                        shared.conn.close()
                        shared.conn = None
                elif shared.file is not None:
                    _unlock(shared.file)
                    shared.file = None
        finally:
            shared.thread.release()

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _call(self, method: Any, *args: Any) -> Any:
        return self._outage.call(method, *args) if self._outage is not None else method(*args)

    def _server_acquire(self, wait: bool) -> bool:
        """Takes the server's lock, waiting for it (`wait`) or not; whether it was taken."""
        from sqlalchemy import text

        shared = self._shared
        if shared.conn is None:
            assert self._engine is not None
            # Autocommit: the lock belongs to the session, not to a transaction left open.
            shared.conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            if self._dialect == "postgresql":
                if not wait:
                    return bool(shared.conn.execute(text("SELECT pg_try_advisory_lock(:k)"),
                                                    {"k": self._key}).scalar())
                shared.conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": self._key})
                return True
            got = shared.conn.execute(text("SELECT GET_LOCK(:n, :t)"),
                                      {"n": self._mysql_name, "t": _WAIT_S if wait else 0}
                                      ).scalar()
        except Exception:  # a connection the server dropped: a new one on the next try
            shared.conn.close()
            shared.conn = None
            raise
        if got != 1 and wait:
            raise TimeoutError(f"the lock of study {self.name!r} was not free within {_WAIT_S} s")
        return got == 1

    def _server_release(self) -> None:
        from sqlalchemy import text

        conn = self._shared.conn
        if self._dialect == "postgresql":
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self._key})
        else:
            conn.execute(text("SELECT RELEASE_LOCK(:n)"), {"n": self._mysql_name})

    def close(self) -> None:
        """Releases what this object holds; the connection goes when nobody holds the lock."""
        while self._depth:
            self.release()
        shared = self._shared
        with shared.thread:
            if shared.depth == 0 and shared.conn is not None:
                shared.conn.close()
                shared.conn = None


def _journal_path(storage: Any) -> str | None:
    backend = getattr(storage, "_backend", None)
    path = getattr(backend, "_file_path", None)
    return str(path) if path is not None else None


class OneProcessRun:
    """One process at a time runs a study of a SQLite file or a journal file: the study lock
    above is per process there, SQLite allows one writer, and the journal has no heartbeat to
    tell a live trial from a killed one. A file lock beside the database says who holds it;
    the operating system frees it when that process dies, however it dies. So while it is held,
    a trial of the study still RUNNING from before is one whose process died."""

    def __init__(self, storage: Any, study_name: str):
        engine = engine_of(storage)
        database = engine.url.database if engine is not None and \
            engine.dialect.name == "sqlite" else None
        if database == ":memory:":
            database = None
        self.kind = "SQLite" if database else "journal"
        database = database or _journal_path(storage)
        self.study = study_name
        self.database = database
        self.path = None
        if database:
            digest = hashlib.sha1(study_name.encode()).hexdigest()[:10]
            self.path = f"{database}.{digest}.tunepilot-run"
        self._file: Any = None

    def acquire(self) -> None:
        """Raises `ConfigError` when another process runs the study."""
        if self.path is None or self._file is not None:
            return
        import fcntl
        import os

        from tunepilot.errors import ConfigError

        try:
            f = _locked(self.path, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                with open(self.path) as held:
                    holder = held.read().strip() or "another process"
            except FileNotFoundError:  # its holder ended this instant
                holder = "another process"
            why = ("SQLite allows one writer" if self.kind == "SQLite" else
                   "a journal file has no heartbeat to tell a killed process's trial from a "
                   "running one")
            raise ConfigError(
                f"Study {self.study} in {self.database} is being run by {holder}. One "
                f"process at a time runs a study there ({why}): wait for that run, stop "
                "it, or run several workers on a database server (--storage "
                "postgresql://USER@HOST/DB or mysql+pymysql://USER@HOST/DB)."
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"process {os.getpid()}")
        f.flush()
        self._file = f

    def release(self) -> None:
        """Ends the run: the lock file goes (a clean working directory), then the lock."""
        if self._file is not None:
            _unlock(self._file)
            self._file = None


def _locked(path: str, flags: int) -> Any:
    """`path` opened and `fcntl.flock`ed with `flags` (BlockingIOError with LOCK_NB when another
    process holds it). A holder that finished removes the file (`_unlock`): a lock taken on the
    file it removed is a lock on nothing, so the path is opened again until the lock is on the
    file the path names."""
    import fcntl
    import os

    while True:
        f = open(path, "a+")  # noqa: SIM115  # held open while locked
        try:
            fcntl.flock(f, flags)
        except BaseException:
            f.close()
            raise
        try:
            if os.stat(path).st_ino == os.fstat(f.fileno()).st_ino:
                return f
        except FileNotFoundError:
            pass
        f.close()


def _unlock(f: Any) -> None:
    """Removes a lock file `_locked` holds, then drops the lock: no file stays behind a run, and
    nobody holds a lock on a removed file (see `_locked`)."""
    import contextlib
    import os

    with contextlib.suppress(FileNotFoundError):
        os.unlink(f.name)
    f.close()  # closing the descriptor drops the flock


def _connection_lost(e: BaseException) -> bool:
    from tunepilot.memory.outage import connection_lost

    return connection_lost(e)
