"""`tune dashboard` (optuna-dashboard on the same storage) shows the agent's reasoning; the
dashboard's page and the HTML report render in a real browser (Debian's chromium, headless)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, TUNE, run_tune
from tunepilot import Float, SearchSpace, Suggestion, Tuner, trainers

RATIONALE = "x near 2 looked best <b>so far</b> [red]"


@pytest.fixture
def study_dir(tmp_path: Path) -> Path:
    def suggester(space, history):
        return Suggestion({"x": 1.0 + len(history)}, rationale=RATIONALE, notes="x around 2")

    Tuner(trainers.callable(lambda c, r: (c["x"] - 2.0) ** 2), SearchSpace.of(x=Float(-10, 10)),
          storage=f"sqlite:///{tmp_path / 's.db'}", study="dash", suggester=suggester,
          pruner="none", display=None).run(n_trials=2)
    return tmp_path


@pytest.fixture
def dashboard(study_dir: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([*TUNE, "dashboard", "--storage", "sqlite:///s.db", "--port",
                             str(port)], cwd=study_dir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{base}/api/studies", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"tune dashboard exited: {proc.stdout.read()}")
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _get(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url, timeout=10).read())


def test_the_dashboard_api_shows_proposer_rationale_and_notes(dashboard):
    [summary] = _get(f"{dashboard}/api/studies")["study_summaries"]
    assert summary["study_name"] == "dash"
    trial = _get(f"{dashboard}/api/studies/{summary['study_id']}")["trials"][0]
    attrs = {a["key"]: a["value"] for a in trial["user_attrs"]}
    assert attrs["proposer"] == "llm"
    assert attrs["rationale"] == RATIONALE  # a plain string, shown as it is
    assert attrs["agent_notes"] == "x around 2"


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI: .ci/run installs it with apt-get")
        pytest.skip("no browser: apt-get install chromium (headless Chromium renders the pages)")
    return found


def _render(url: str, tmp_path: Path) -> str:
    proc = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000",
         "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_browser_shows_the_rationale_on_the_trial_page(dashboard, tmp_path):
    [summary] = _get(f"{dashboard}/api/studies")["study_summaries"]
    dom = _render(f"{dashboard}/dashboard/studies/{summary['study_id']}/trials", tmp_path)
    assert "x near 2 looked best &lt;b&gt;so far&lt;/b&gt; [red]" in dom  # as text, escaped


def test_the_browser_renders_the_report(study_dir, tmp_path):
    done = run_tune("report", "--storage", "sqlite:///s.db", "-o", "r.html", cwd=study_dir)
    assert done.returncode == 0, done.stderr
    dom = _render((study_dir / "r.html").as_uri(), tmp_path)
    assert "tunepilot report: dash" in dom
    assert dom.count("<img") >= 2 and "x near 2 looked best &lt;b&gt;so far" in dom


def test_tune_dashboard_as_the_readme_spells_it(study_dir):
    """`tune dashboard`, no flags: the working directory's tunepilot.db on port 8080."""
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 8080)) == 0:
            pytest.skip("port 8080 is taken on this machine")
    (study_dir / "s.db").rename(study_dir / "tunepilot.db")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TUNEPILOT_STORAGE", None)
    proc = subprocess.Popen([*TUNE, "dashboard"], cwd=study_dir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(300):
            try:
                names = [s["study_name"] for s in
                         _get("http://127.0.0.1:8080/api/studies")["study_summaries"]]
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("tune dashboard did not answer on port 8080")
        assert names == ["dash"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
