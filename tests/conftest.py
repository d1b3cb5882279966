"""Shared fixtures: a scratch storage per test, a private data cache, and a toy trainer."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUNE = [sys.executable, "-m", "tunepilot.agent.cli"]


@pytest.fixture(autouse=True, scope="session")
def _data_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Keep generated data out of the person's ~/.cache, and shared by the whole session.
    os.environ["TUNEPILOT_CACHE"] = str(tmp_path_factory.mktemp("cache"))


@pytest.fixture
def storage(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'study.db'}"


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
