"""Shared fixtures: a scratch storage per test, a private data cache, and a toy trainer."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUNE = [sys.executable, "-m", "tunepilot"]


@pytest.fixture(autouse=True, scope="session")
def _data_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Keep generated data out of the person's ~/.cache, and shared by the whole session.
    os.environ["TUNEPILOT_CACHE"] = str(tmp_path_factory.mktemp("cache"))


@pytest.fixture
def storage(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'study.db'}"


SERVERS = {
    "postgresql": "postgresql://postgres@127.0.0.1:5432/test",  # as the README spells it
    "mysql": "mysql+pymysql://root@127.0.0.1:3306/test",
}


def server_url(kind: str) -> str:
    """The URL of a real database server of this machine; skips only outside CI."""
    import sqlalchemy

    url = SERVERS[kind]
    _SERVER_USED[0] = True
    engine = sqlalchemy.create_engine(url)
    try:
        engine.connect().close()
    except Exception as e:
        if os.environ.get("CI"):
            raise RuntimeError(f"{kind} at {url} is not reachable in CI: {e}") from e
        pytest.skip(f"no {kind} server reachable at {url} ({type(e).__name__})")
    finally:
        engine.dispose()  # its pooled connection closes now, not when garbage is collected
    return url


_SERVER_USED = [False]  # a test opened a storage on a database server


@pytest.fixture(autouse=True)
def _server_connections_closed() -> Iterator[None]:
    """Optuna's RDBStorage sits in a reference cycle: each one a test opens on a database
    server keeps its pooled connections until the garbage collector runs, which in a long
    session can be hundreds of tests later. PostgreSQL allows 100 clients (CI failed with "too
    many clients already" in the last tests of a full run): collected after each test that
    asked for a server. (Torn down last, after `study_name` deleted its studies.)"""
    yield
    if _SERVER_USED[0]:
        import gc

        _SERVER_USED[0] = False
        gc.collect()


@pytest.fixture(params=["sqlite", "journal", "postgresql", "mysql"])
def any_storage(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every storage backend tunepilot supports; server-backed ones use the real servers."""
    kind = request.param
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'study.db'}"
    if kind == "journal":
        return f"journal:{tmp_path / 'study.log'}"
    return server_url(kind)


@pytest.fixture
def study_name(request: pytest.FixtureRequest) -> Iterator[str]:
    """A name no other test uses: server databases outlive a test."""
    import uuid

    name = f"{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"
    yield name
    # Server databases outlive the test: leave them as they were.
    import optuna

    _SERVER_USED[0] = True
    for url in SERVERS.values():
        try:
            optuna.delete_study(study_name=name, storage=url)
        except Exception:  # not created there, or no server
            pass


TOY_SPACE = '[space]\nx = { type = "float", low = -10.0, high = 10.0 }\n'
# toy.py's `epochs` trainer: one report per epoch, minimum 0 at x = 2.
TOY_EPOCHS = """
def epochs(config, report):
    loss = (config["x"] - 2.0) ** 2
    for epoch in range(1, config["epochs"] + 1):
        report(epoch, loss + 1.0 / epoch)
    return loss
"""


def toy_workdir(path: Path, code: str, space: str = TOY_SPACE) -> Path:
    """A folder with toy.py (trainer functions) and toy.toml (their space), as a user has."""
    (path / "toy.py").write_text(code)
    (path / "toy.toml").write_text(space)
    return path


def quadratic(config: Mapping[str, Any], report: Any) -> float:
    """Minimum 0 at x = 2; `report` once per 'epoch' so pruning can happen."""
    loss = (config["x"] - 2.0) ** 2
    for epoch in range(1, 4):
        report(epoch, loss + 1.0 / epoch)
    return loss


def run_tune(*args: str, cwd: Path, timeout: float = 300,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`tune ARGS` in a subprocess, as a person would run it."""
    full_env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{cwd}", **(env or {})}
    return subprocess.run([*TUNE, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def runs_file(cwd: Path, storage: str, study: str, suffix: str) -> Path:
    """A study's log (".log") or report (".html") as `tune run` in `cwd` writes it for
    `storage` (tests/test_first_month.py spells the folders out)."""
    from tunepilot.ui.app import runs_path

    return cwd / runs_path(storage, study, suffix)
