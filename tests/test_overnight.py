"""Unattended runs: SIGTERM, and a `tune` process killed with SIGKILL then resumed."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import optuna
import pytest

from tests.conftest import ROOT, TUNE, run_tune, runs_file, toy_workdir
from tunepilot.memory import History, load_study

TOY = """
import time

def slowish(config, report):
    time.sleep(0.7)
    return (config["x"] - 2.0) ** 2

def sleepy(config, report):
    time.sleep(60)
    return 1.0
"""


@pytest.fixture
def workdir(tmp_path):
    return toy_workdir(tmp_path, TOY)


def start(workdir, *args):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{workdir}"}
    return subprocess.Popen([*TUNE, "run", "--llm", "none", "--config", "toy.toml", *args],
                            cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# The two storages one process at a time runs a study on (a run lock beside the file).
ONE_PROCESS = {"sqlite": "sqlite:///s.db", "journal": "journal:s.log"}


def trials(workdir, study, url="sqlite:///s.db"):
    from tunepilot.memory import open_storage

    url = url.replace("sqlite:///", f"sqlite:///{workdir}/").replace("journal:",
                                                                      f"journal:{workdir}/")
    try:
        storage = open_storage(url, heartbeat_s=None)
        return optuna.load_study(study_name=study, storage=storage).trials
    except Exception:  # not created yet, or being created
        return []


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


def test_sigterm_fails_the_running_trial_and_exits_143(workdir):
    proc = start(workdir, "--trainer", "toy:sleepy", "--storage", "sqlite:///s.db")
    # Mid-trial: the config is stored, the trainer is running. (A signal in the instant between
    # Optuna creating a trial and storing its config leaves it RUNNING; the heartbeat recovers
    # it on the next run, as test_kill_9 shows.)
    wait_for(lambda: any(t.params for t in trials(workdir, "toy-sleepy")))
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, out + err
    assert "interrupted (SIGTERM)" in out and "to resume: tune run" in out
    assert "trial 0 was interrupted: marked failed; its config runs first when" in out
    trial, again = History.from_study(load_study(f"sqlite:///{workdir / 's.db'}", "toy-sleepy"))
    assert trial.state == "fail"
    assert trial.error == {"kind": "interrupted", "message": "SIGTERM"}
    assert again.state == "waiting" and again.params == trial.params  # runs first on resume


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_kill_9_then_resume_loses_nothing_says_so_and_honours_the_budget(workdir, kind):
    """The run after a kill -9 finds the killed trial at once (it holds the study's run lock, so
    a RUNNING trial is a dead process's), fails it, says so on the terminal and in the log, and
    runs its config again in the budget's slot; on the journal too, which has no heartbeat."""
    url = ONE_PROCESS[kind]
    args = ("--trainer", "toy:slowish", "--storage", url, "--n-trials", "8")
    proc = start(workdir, *args)

    def two_done_and_one_running():
        ts = trials(workdir, "toy-slowish", url)
        return (sum(t.state.name == "COMPLETE" for t in ts) >= 2
                and any(t.state.name == "RUNNING" and t.params for t in ts))  # mid-trial

    wait_for(two_done_and_one_running)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    before = {t.number: t for t in trials(workdir, "toy-slowish", url)}
    [running] = [t for t in before.values() if t.state.name == "RUNNING"]
    completed = {n: t.value for n, t in before.items() if t.state.name == "COMPLETE"}

    # At once: no heartbeat grace period to wait for.
    again = run_tune("run", "--llm", "none", "--config", "toy.toml", *args, cwd=workdir,
                     timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    said = (f"trial {running.number} was left running by a process that stopped (killed?): "
            "marked failed; its config runs again, as trial ")
    assert said in again.stdout
    # The trials done before the kill, not counting the one this run found dead and failed.
    assert f"(resuming: {len(completed)} trials done)" in again.stdout
    assert said in runs_file(workdir, url, "toy-slowish", ".log").read_text()
    assert "budget of 8 trials used" in again.stdout
    after = {t.number: t for t in trials(workdir, "toy-slowish", url)}
    assert after[running.number].state.name == "FAIL"  # the interrupted trial
    for number, value in completed.items():  # nothing completed is lost
        assert after[number].state.name == "COMPLETE" and after[number].value == value
    # The killed trial's budget passed to its retry: 8 trials ran to their end, plus the killed.
    finished = [t for t in after.values() if t.state.is_finished()]
    assert len(finished) == 9 and len(after) == 9
    assert sum(t.state.name == "FAIL" for t in finished) == 1
    retried = [t for t in after.values()
               if t.number > running.number and t.params == running.params]
    assert retried and retried[0].state.name == "COMPLETE"  # re-run once with the same config
    # The retry is a trial of its own: not the killed one's error, nor its note.
    from tunepilot.memory import TrialRecord

    record = TrialRecord.from_frozen(after[retried[0].number])
    assert record.error is None and record.why == "" and record.train is not None
