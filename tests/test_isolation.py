"""Trial isolation: hung, crashing and OOM-killed trials cost one trial, not the search."""

from __future__ import annotations

import optuna
import pytest

from tests.conftest import TOY_SPACE, run_tune, toy_workdir
from tunepilot.memory import History, load_study

TOY = """
import ctypes, os, signal, time

def misbehave(config, report):
    x = config["x"]
    if x < -6:
        time.sleep(60)                      # hangs
    elif x < -3:
        ctypes.string_at(0)                 # segfaults
    elif x < 0:
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does
    for epoch in (1, 2, 3):
        report(epoch, (x - 2) ** 2 + 1 / epoch)
    return (x - 2) ** 2
"""


def test_hung_segfaulting_and_killed_trials_are_failed_and_the_search_goes_on(tmp_path):
    toy_workdir(tmp_path, TOY)
    storage = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="toy-misbehave", storage=storage)
    for x in (-8.0, -5.0, -1.0, 2.5):  # one of each, then a good one
        study.enqueue_trial({"x": x})
    proc = run_tune("run", "--llm", "none", "--config", "toy.toml", "--trainer", "toy:misbehave",
                    "--storage", "sqlite:///s.db", "--n-trials", "6", "--trial-timeout", "3",
                    "--pruner", "none", cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "isolation: each trial runs in its own process, killed after 3 s" in proc.stdout
    history = History.from_study(load_study(storage, "toy-misbehave"))
    hung, segv, killed, good = history[:4]
    assert (hung.state, hung.error["kind"]) == ("fail", "timeout")
    assert (segv.state, segv.error["kind"]) == ("fail", "crashed")
    assert "SIGSEGV" in segv.error["message"]
    assert (killed.state, killed.error["kind"]) == ("fail", "oom")
    assert good.state == "complete" and good.value == pytest.approx(0.25)
    assert good.curve == pytest.approx((1.25, 0.75, 0.25 + 1 / 3))  # reports crossed the pipe
    assert len(history.finished()) == 6


def test_pruning_works_across_the_process_boundary(tmp_path):
    toy_workdir(tmp_path, TOY, TOY_SPACE.replace("-10.0", "0.0"))
    proc = run_tune("run", "--llm", "none", "--config", "toy.toml", "--trainer", "toy:misbehave",
                    "--storage", "sqlite:///s.db", "--n-trials", "12", "--isolate",
                    "--sampler", "random", cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    history = History.from_study(load_study(f"sqlite:///{tmp_path / 's.db'}", None))
    pruned = [t for t in history if t.state == "pruned"]
    assert pruned and all(len(t.curve) == 2 for t in pruned)  # MedianPruner warms up 2 epochs
