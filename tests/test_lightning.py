"""The built-in CTR task on real Lightning training (small generated data)."""

from __future__ import annotations

import optuna
import pytest

from tests.conftest import run_tune
from tunepilot import ConfigError, Diverged
from tunepilot.trainers.base import no_report
from tunepilot.trainers.data import synthetic

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data():
    return synthetic(6000)


@pytest.fixture(scope="module")
def train_ctr():
    from tunepilot.trainers.lightning_trainer import train_ctr

    return train_ctr


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_learns_well_below_the_base_rate(data, train_ctr, precision):
    result = train_ctr({"lr": 3e-3, "batch_size": 256, "epochs": 2, "precision": precision},
                       no_report, data=data)
    assert len(result.curve) == 2
    assert result.best_val_loss == min(result.curve)
    assert result.best_val_loss < data.base_logloss - 0.04, (result.curve, data.base_logloss)
    assert result.samples_per_s and result.samples_per_s > 0


def test_a_blown_up_run_is_reported_as_diverged(data, train_ctr):
    with pytest.raises(Diverged, match="blew up"):
        train_ctr({"lr": 10.0, "batch_size": 256, "epochs": 2}, no_report, data=data)


def test_unknown_settings_and_cpu_fp16_are_refused(data, train_ctr):
    with pytest.raises(ConfigError, match="momentum: unknown setting"):
        train_ctr({"lr": 1e-3, "momentum": 0.9}, no_report, data=data)
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="16-mixed' needs a CUDA GPU"):
            train_ctr({"precision": "16-mixed"}, no_report, data=data)


def test_pruning_reaches_into_lightning(data, train_ctr):
    def prune_at_2(epoch, val_loss):
        if epoch == 2:
            raise optuna.TrialPruned("pruned after epoch 2")

    with pytest.raises(optuna.TrialPruned):
        train_ctr({"lr": 1e-3, "batch_size": 1024, "epochs": 4}, prune_at_2, data=data)


def test_real_search_stops_at_a_reachable_target_and_resumes(tmp_path):
    # Base-rate log-loss of synthetic:8000 is 0.559; decent configs reach ~0.47 in 2 epochs.
    args = ("run", "--llm", "none", "--data", "synthetic:8000", "--epochs", "2", "--storage",
            "sqlite:///s.db",
            "--seed", "1")
    proc = run_tune(*args, "--target", "0.51", "--n-trials", "30", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "target 0.51 reached by trial" in proc.stdout
    study = optuna.load_study(study_name="lightning-synthetic-8000",
                              storage=f"sqlite:///{tmp_path / 's.db'}")
    n_first = len(study.trials)
    assert study.best_value <= 0.51
    assert n_first < 30  # stopped early
    assert "Bayes-optimal" in proc.stdout  # the floor is printed

    again = run_tune(*args, "--target", "0.51", "--n-trials", "30", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "already reached" in again.stdout

    more = run_tune(*args, "--n-trials", str(n_first + 2), cwd=tmp_path)
    assert more.returncode == 0, more.stderr
    study = optuna.load_study(study_name="lightning-synthetic-8000",
                              storage=f"sqlite:///{tmp_path / 's.db'}")
    assert [t.number for t in study.trials] == list(range(n_first + 2))
    assert study.best_value <= 0.51  # the best is kept


def test_ctrl_c_during_lightning_fit_fails_the_trial_and_exits_130(tmp_path):
    # Lightning turns Ctrl-C into sys.exit(1); the search must still end as interrupted.
    import os
    import signal
    import subprocess
    import time

    from tests.conftest import ROOT, TUNE

    storage = f"sqlite:///{tmp_path / 's.db'}"
    proc = subprocess.Popen(
        # No early stop (--epoch-patience 0): trial 0 is still in fit when Ctrl-C comes.
        [*TUNE, "run", "--llm", "none", "--data", "synthetic:4000", "--epochs", "500", "--storage",
         storage, "--epoch-patience", "0"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            study = optuna.load_study(study_name="lightning-synthetic-4000", storage=storage)
        except KeyError:
            continue
        trial = study.trials[0] if study.trials else None
        if trial is not None and trial.intermediate_values:  # inside fit, past an epoch
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    from tunepilot.memory import History, load_study

    trial, again = History.from_study(load_study(storage, "lightning-synthetic-4000"))
    assert trial.state == "fail" and trial.error["kind"] == "interrupted"
    # Its config is queued to run first on resume, a clean copy.
    assert again.state == "waiting" and again.params == trial.params and again.error is None
    assert again.retry_of == (trial.number,)


def test_rerun_reproduces_a_trial(tmp_path):
    args = ("--storage", "sqlite:///s.db")
    proc = run_tune("run", "--llm", "none", "--data", "synthetic:3000", "--epochs", "2",
                    "--n-trials", "2", "--pruner", "none", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    study = optuna.load_study(study_name="lightning-synthetic-3000",
                              storage=f"sqlite:///{tmp_path / 's.db'}")
    recorded = study.trials[1]
    assert recorded.user_attrs["train"]["device"].startswith("torch:")
    assert "lightning" in recorded.user_attrs["train"]["versions"]
    again = run_tune("rerun", "1", *args, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    value = float(again.stdout.split("now: value ")[1].split()[0])
    # Same machine, same seed and config: CPU training repeats to float noise.
    assert value == pytest.approx(recorded.value, abs=1e-4), again.stdout
