"""Opening studies on an Optuna storage URL; the storage IS tunepilot's memory.

URL forms:
    sqlite:///tunepilot.db                      one machine, one process (the default)
    postgresql://user@host:5432/db              several workers, several machines
    mysql+pymysql://user@host/db                several workers, several machines
    journal:./study.log  (or a path ending .log) one process at a time, an append-only file
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunepilot.errors import ConfigError, StorageUnavailable, did_you_mean
from tunepilot.memory import held
from tunepilot.memory.connections import worker_pool, working
from tunepilot.memory.recovery import _RETRIES, StaleTrial
from tunepilot.memory.redact import redact

if TYPE_CHECKING:
    import optuna

DEFAULT_STORAGE = "sqlite:///tunepilot.db"
_RDB_PREFIXES = ("sqlite", "postgresql", "postgres", "mysql", "mariadb", "oracle", "mssql")


def open_storage(url: str, *, heartbeat_s: int | None = 10, retry_stale: int = 1,
                 outage_s: float | None = None, worker: bool = False,
                 create_tables: bool = True) -> optuna.storages.BaseStorage:
    """An Optuna storage for `url`; raises `ConfigError` with the accepted forms.

    Database storages get a heartbeat: a running trial whose process died (kill -9, a lost
    machine) is marked FAIL once its heartbeat is 3 x `heartbeat_s` old, and re-queued up to
    `retry_stale` times with the same config. The journal file storage has no heartbeat: one
    process at a time runs a study there, which finds a killed run's trial (`recover`).

    On a database server (PostgreSQL, MySQL) the storage holds no connection between its calls
    (a trial trains for minutes, its storage calls take milliseconds; what many workers need:
    bench/README.md#several-workers), and every call rides out an outage of up to `outage_s`
    seconds (`riding.Riding`; default `outage.OUTAGE_S`). A server with no connection left when
    the storage is opened is waited for the same way. A `worker`'s storage keeps one connection
    for its calls from its opening on, a reader's none until it takes the study lock
    (`connections.worker_pool`).
    """
    from optuna.storages.journal import JournalFileBackend

    if url.startswith("journal:") or url.endswith(".log"):
        path = Path(url.removeprefix("journal:"))
        path.parent.mkdir(parents=True, exist_ok=True)
        _check_journal(path)
        journal = held.HeldJournalStorage(JournalFileBackend(str(path)))
        _RETRIES[journal] = retry_stale
        return journal
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    if scheme == "grpc":
        raise ConfigError(
            f"Storage {redact(url)!r}: Optuna's gRPC storage proxy is not supported. Through it "
            "a worker has no heartbeat (a killed worker's trial would stay RUNNING, counted "
            "against the budget, never retried) and no study lock (two workers could train one "
            "config at once). Give the workers the database's URL itself: each holds at most "
            "two connections, and none while it trains (docs/overnight.md#past-one-databases-"
            "connections).")
    if "://" not in url or scheme not in _RDB_PREFIXES:
        raise ConfigError(
            f"Storage URL {redact(url)!r} is not one tunepilot can open. Use sqlite:///FILE.db "
            "(one process), postgresql://USER@HOST/DB or mysql+pymysql://USER@HOST/DB (several "
            f"workers), or journal:FILE.log (one process, an append-only file).{_url_hint(url)}"
        )
    beat: dict[str, Any] = {}
    if url in ("sqlite://", "sqlite:///:memory:"):
        heartbeat_s = None  # dies with this process: nothing to recover; and one thread only
    if heartbeat_s:
        beat = {"heartbeat_interval": heartbeat_s, "grace_period": 3 * heartbeat_s,
                "heartbeat_stale_trial_callback": StaleTrial(3 * heartbeat_s)}
    try:
        if url.startswith("sqlite"):
            storage = _rdb_storage(url, beat, create_tables)
            _RETRIES[storage] = retry_stale
            return storage
        return _on_server(url, beat, retry_stale, outage_s, worker, create_tables)
    except StorageUnavailable:  # a full server, waited for past the outage limit
        raise
    except Exception as e:  # sqlalchemy raises many kinds; all mean "cannot open this URL"
        if url.startswith("sqlite") and any(m in f"{e} {e.__cause__}" for m in _SQLITE_DAMAGED):
            file, said = url.split(":///", 1)[-1], _one_line(e.__cause__ or e)
            raise ConfigError(
                f"The SQLite file {file} is damaged ({said}): tunepilot reads and "
                f"writes nothing there. {_sqlite_loss(Path(file))} Restore it from a backup; "
                f"or keep it aside (mv {file} {file}.damaged) and run the same command again, "
                "which starts the study anew."
            ) from None
        if isinstance(e, ImportError) or "Failed to import DB access module" in str(e):
            raise ConfigError(
                f"Cannot open storage {redact(url)}: its database driver is not installed "
                f"({_one_line(e)}). postgresql:// uses psycopg 3 (pip install "
                "'psycopg[binary]'), mysql+pymysql:// uses PyMySQL (pip install pymysql); "
                "both come with tunepilot, so reinstall it, or name a driver you have, e.g. "
                "postgresql+psycopg2://."
            ) from None
        said = f"{type(e).__name__}: {_one_line(e)}"
        if e.__cause__ is not None:  # Optuna's StorageInternalError hides what the server said
            said += f" ({_one_line(e.__cause__)})"
        raise ConfigError(
            f"Cannot open storage {redact(url)}: {said}. Check that "
            "the database server is running and the URL (user, host, port, database) is right; "
            "for MySQL use mysql+pymysql://."
        ) from None


def _sqlite_loss(path: Path) -> str:
    """What a damaged SQLite file has lost, plainly: a file cut short (its header declares more
    pages than it has) lost everything past the cut, and SQLite reads none of what is left (a
    salvage with `sqlite3 FILE .recover` failed on such a file here, and left an empty one)."""
    try:
        with path.open("rb") as f:
            header = f.read(100)
        size = path.stat().st_size
    except OSError:
        return "It cannot be read at all."
    if len(header) == 100 and header.startswith(b"SQLite format 3\x00"):
        page = int.from_bytes(header[16:18], "big")
        page = 65536 if page == 1 else page
        declared = page * int.from_bytes(header[28:32], "big")
        if declared > size:
            return (f"It was cut short: {size:,} of the {declared:,} bytes it held are there, "
                    "and what lay past the cut (most of its trials) is lost; SQLite reads none "
                    "of the rest.")
    return "Some of its pages are unreadable, and SQLite reads none of the file."


# What SQLite says of a file that is not a whole database (cut short, overwritten).
_SQLITE_DAMAGED = ("file is not a database", "database disk image is malformed")


def _check_journal(path: Path) -> None:
    """A journal file whose last record is cut short (its process killed mid-write, or the
    file truncated) is refused, not read as if whole: Optuna would drop the record silently.
    A writer may be mid-record right now, so a partial end is looked at twice."""
    import time

    for attempt in range(2):
        try:
            size = path.stat().st_size
            if size == 0:
                return
            with path.open("rb") as f:
                f.seek(-1, 2)
                if f.read(1) == b"\n":
                    return
                f.seek(0)
                whole = f.read().rfind(b"\n") + 1
        except FileNotFoundError:
            return
        if attempt == 0:
            time.sleep(0.5)
    raise ConfigError(
        f"The journal file {path} ends in a partial record ({size - whole} bytes after the "
        "last whole one: its process was killed while writing, or the file was cut short); "
        "tunepilot reads and writes nothing there until it is mended. Keep a copy (cp "
        f"{path} {path}.bak), then cut the partial record off: truncate -s {whole} {path}"
    )


# What a database says when two processes create Optuna's schema at once: each checks that a
# table is missing, then one CREATE (or the version row's INSERT) loses. Seen here with four
# workers started together on a fresh SQLite file (half of them failed) and with a notebook's
# `Tuner.load` opening the file `tune run` had just made.
_SCHEMA_RACE = ("already exists", "unique constraint failed: alembic_version",
                "unique constraint failed: version_info", "duplicate key value",
                "duplicatetable", "uniqueviolation", "duplicate entry")
SCHEMA_ATTEMPTS = 8


def _rdb_storage(url: str, beat: dict[str, Any],
                 create_tables: bool = True) -> optuna.storages.RDBStorage:
    """Optuna's RDBStorage; a lost race with another process creating the schema is tried
    again (the winner's tables are there by then, and creating them again is a no-op).
    `create_tables` False: no look for each table and no creation (they are there, or the
    version check that follows fails before writing anything)."""
    import random
    import time

    import optuna

    for attempt in range(SCHEMA_ATTEMPTS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return held.HeldRDBStorage(url, engine_kwargs=_engine_kwargs(url),
                                           skip_table_creation=not create_tables, **beat)
        except Exception as e:
            if attempt == SCHEMA_ATTEMPTS - 1 or not any(
                    m in f"{type(e).__name__} {e}".lower() for m in _SCHEMA_RACE):
                raise
            time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))  # let the winner commit
    raise AssertionError("unreachable")


def open_study(storage: str | optuna.storages.BaseStorage, name: str, *,
               sampler: optuna.samplers.BaseSampler | None = None,
               pruner: optuna.pruners.BasePruner | None = None) -> optuna.Study:
    """Resumes the study, or creates it when it is not there yet (looked up first: a worker
    or a resumed run finds it, where a creation tried first fails and rolls back)."""
    import optuna

    if isinstance(storage, str):
        storage = open_storage(storage)
    try:
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler,
                                 pruner=pruner)
    except KeyError:  # created now (by another process too, meanwhile: then loaded)
        pass
    return optuna.create_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner,
                               direction="minimize", load_if_exists=True)


def load_study(storage: str | optuna.storages.BaseStorage, name: str | None) -> optuna.Study:
    """An existing study: `name`, or with None the only one, or the newest of several (as
    `choose_study` picks it); raises `ConfigError` listing the studies the storage holds."""
    import optuna

    if isinstance(storage, str):
        storage = open_existing(storage)
    name, _ = choose_study(storage, name)
    return optuna.load_study(study_name=name, storage=storage)


def choose_study(storage: str | optuna.storages.BaseStorage, name: str | None, *,
                 url: str | None = None) -> tuple[str, str | None]:
    """The study a command reads, and a line that says which when the person named none (as
    `git` names the branch): the only study, or the newest of several (the last created), with
    the others and the flag that picks one. Raises `ConfigError` for a name that is not there.
    `url`: the storage's, for the messages, where `storage` is one opened already."""
    if isinstance(storage, str):
        url, storage = storage, open_existing(storage)
    if name is not None:  # one look-up, not a read of every study the server holds
        try:
            storage.get_study_id_from_name(name)
            return name, None
        except KeyError:
            pass
    names = [s.study_name for s in sorted(storage.get_all_studies(), key=lambda s: s._study_id)]
    where = f" in {redact(url)}" if url else ""
    if name is None and names:
        newest = names[-1]
        if len(names) == 1:
            return newest, f"study {newest} (the only one{where})"
        others = ", ".join(names[:-1])
        return newest, (f"study {newest} (the newest of {len(names)}{where}; the others: "
                        f"{others}; pick one with --study NAME)")
    if name is None:  # no studies at all
        raise ConfigError(f"No tunepilot studies{where} yet. Run `tune run` (or `tune create`) "
                          "there first, or pass --storage with the URL the search used.")
    if name not in names:
        listing = ", ".join(names) if names else "none"
        hint = did_you_mean(name, names) if name else ""
        raise ConfigError(
            f"No study named {name!r}{where}.{hint} Studies there: {listing}. Pass one with "
            "--study NAME."
        )
    return name, None


def open_existing(url: str, *, worker: bool = False,
                  **options: Any) -> optuna.storages.BaseStorage:
    """The storage at `url`, which must hold Optuna's tables already: a reader (`tune show`,
    `best`, `report`, `prompt`, `dashboard`) never creates a file, a table or a row, so a
    wrong `--storage` leaves an application's database as it was. `worker`: its calls share
    one connection, kept until its engine is disposed (`tune worker`'s look at the study).
    `options`: `open_storage`'s (a reader's has no heartbeat: it beats for no trial)."""
    if url.startswith("journal:") or url.endswith(".log"):
        path = Path(url.removeprefix("journal:"))
        if not path.is_file():
            raise ConfigError(f"No study journal at {path}. Run `tune run` first, or pass "
                              "--storage with the URL the search used.")
        return open_storage(url, heartbeat_s=None)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        raise ConfigError(
            f"No study database at {url}. Run `tune run` first, or pass --storage with "
            "the URL the search used."
        )
    # Opened without creating a table (the version check fails, before writing anything, where
    # Optuna's tables are missing); the tables are looked at only then, to say what the database
    # holds (a look of its own cost every worker a connection and the dialect's first queries).
    try:
        return open_storage(url, **{"heartbeat_s": None, **options}, worker=worker,
                            create_tables=False)
    except ConfigError:
        _no_tables(url)
        raise


def _no_tables(url: str) -> None:
    """Raises `ConfigError` where the database at `url` has no Optuna tables."""
    tables = _tables(url)
    if tables is not None and "studies" not in tables:
        held = f" (it holds {', '.join(sorted(tables)[:8])})" if tables else " (it is empty)"
        raise ConfigError(
            f"No tunepilot studies in {redact(url)}: it has no Optuna tables{held}, and "
            "tunepilot wrote nothing there. Pass --storage with the URL the search used, or "
            "start a search there with `tune run --storage URL`."
        )


def _tables(url: str) -> set[str] | None:
    """The table names of the database at `url`, read without writing; None where it cannot
    be read (`open_storage` then says why: a damaged file, a server that is down)."""
    import sqlalchemy

    try:
        # One connection for the dialect's first look and the read (disposed below).
        engine = sqlalchemy.create_engine(url, **_engine_kwargs(url, worker=True))
    except Exception:
        return None
    try:
        return set(sqlalchemy.inspect(engine).get_table_names())
    except Exception:  # sqlalchemy raises many kinds; open_storage words each one
        return None
    finally:
        engine.dispose()


def _on_server(url: str, beat: dict[str, Any], retry_stale: int, outage_s: float | None,
               worker: bool, create_tables: bool = True) -> optuna.storages.BaseStorage:
    """A database server's storage: Optuna's RDB storage and its cache, each call ridden
    through outages; opened once the server has a connection to give."""
    from optuna.storages._cached_storage import _CachedStorage

    from tunepilot.memory.outage import OUTAGE_S, Outage, server_full
    from tunepilot.memory.riding import Riding

    outage = Outage(OUTAGE_S if outage_s is None else outage_s)
    rdb = outage.call(_rdb_storage, url, beat, create_tables, retry_if=server_full)
    if worker:
        # From here, not from the opening: Optuna's schema check holds two connections at once,
        # and a second kept in the pool from it stayed open through the worker's whole start
        # (64 workers starting together went past the 80 they must fit in:
        # bench/README.md#several-workers).
        working(rdb.engine)
    _RETRIES[rdb] = retry_stale
    # Its calls are added after the class from Optuna's protocols, which mypy cannot see.
    return Riding(_CachedStorage(rdb), outage)  # type: ignore[abstract]


def _engine_kwargs(url: str, worker: bool = False) -> dict[str, Any]:
    if url.startswith("sqlite"):
        # Wait for a writer instead of failing at once with "database is locked".
        return {"connect_args": {"timeout": 30}}
    # One connection kept for a worker's calls from the study lock to its trial's training and
    # from its end to the next lock (a connection per call cost the server a process for each of
    # a trial's two dozen calls: bench/README.md#several-workers); none while it trains or waits
    # (`idle`), nor, in a reader, before its first lock: Optuna's default pool sat open through
    # every training, several a worker, and a few dozen workers filled a stock PostgreSQL. No
    # ping before each call (a round trip each): one the server dropped (a restart) fails its
    # call, which the outage rider tries again on a new one (`riding.Riding`).
    kwargs: dict[str, Any] = {"poolclass": worker_pool(worker), "pool_size": 1,
                              "max_overflow": -1}
    if url.startswith(("postgresql", "postgres")):
        # Seen in pg_stat_activity, so a person can count a night's workers there.
        kwargs["connect_args"] = {"application_name": "tunepilot"}
    return kwargs


def _url_hint(url: str) -> str:
    scheme = url.split(":", 1)[0]
    hint = did_you_mean(scheme, [*_RDB_PREFIXES, "journal"])
    return hint


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else ""
