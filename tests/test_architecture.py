"""The house stays standing: the layers of docs/development.md as import contracts, no import
cycle between files, ruff and mypy clean, no file of the package or bench/ past 400 lines."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

MAX_LINES = 400


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed; `pip install -e .[test]` installs it")
    return found


def test_import_contracts_hold():
    proc = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 5 kept, 0 broken." in proc.stdout


def test_a_broken_contract_is_caught(tmp_path):
    """The check can fail: a copy of the package where memory imports the agent is refused."""
    shutil.copytree(ROOT / "tunepilot", tmp_path / "tunepilot",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    history = tmp_path / "tunepilot" / "memory" / "history.py"
    history.write_text(history.read_text() + "\nfrom tunepilot.agent import tuner  # noqa\n")
    proc = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0
    assert "BROKEN" in proc.stdout and "tunepilot.memory.history -> tunepilot.agent" in proc.stdout


def test_no_import_cycle_between_files():
    """Strongly connected components of the module import graph (imports inside functions and
    those only for type checkers included): every one a single module."""
    import grimp

    graph = grimp.build_graph("tunepilot", exclude_type_checking_imports=False)
    modules = sorted(graph.modules)
    edges = {m: graph.find_modules_directly_imported_by(m) for m in modules}
    cycles = [c for c in _components(modules, edges) if len(c) > 1]
    assert cycles == []


def test_ruff_is_clean():
    proc = subprocess.run([_tool("ruff"), "check", "--no-cache", "tunepilot", "tests", "bench"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_is_clean():
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_source_file_is_past_400_lines():
    files = [*(ROOT / "tunepilot").rglob("*.py"), *(ROOT / "bench").glob("*.py")]
    long = {str(p.relative_to(ROOT)): n for p in files
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these by concept: {long}"


def _components(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                found.append(sorted(component))
    return found
