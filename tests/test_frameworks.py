"""The framework as a choice of each trial: `--trainer both` dispatches each trial to the
Lightning or the JAX trainer of the built-in task, in one study."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import optuna
import pytest
from conftest import ROOT, TUNE, run_tune, server_url

from tunepilot import SearchSpace, trainers
from tunepilot.errors import ConfigError
from tunepilot.memory import History
from tunepilot.trainers import builtin
from tunepilot.ui.clock import framework_lines


@pytest.fixture(scope="module")
def small() -> object:
    return trainers.load_data("synthetic", rows=3000)


def test_each_trial_runs_on_the_framework_its_config_names(small: object) -> None:
    train = trainers.from_spec("both", small)
    config = {"lr": 3e-3, "batch_size": 512, "precision": "32-true", "dropout": 0.1,
              "epochs": 1, "seed": 0}
    seen: list[str] = []
    for framework in ("jax", "lightning"):
        result = train({**config, "framework": framework}, lambda epoch, loss: None)
        seen.append(result.extra["framework"])
        assert 0.0 < result.best_val_loss < 1.0 and result.wall_time_s > 0
    assert seen == ["jax", "lightning"]
    with pytest.raises(ConfigError, match="framework 'tensorflow' is not a built-in one"):
        train({**config, "framework": "tensorflow"}, lambda epoch, loss: None)


def test_the_space_offers_both_and_refuses_others() -> None:
    space = builtin.default_space("both")
    assert list(space.params["framework"].choices) == ["lightning", "jax"]  # type: ignore[union-attr]
    builtin.check_space("both", space)  # accepted as it is offered
    with pytest.raises(ConfigError, match="framework may hold 'lightning', 'jax', not 'tf'"):
        builtin.check_space("both", SearchSpace.of(framework=builtin.Categorical(["jax", "tf"])))
    # Only what both frameworks run here: 16-mixed (Lightning on CUDA) is not offered.
    assert "16-mixed" not in builtin.device_precisions("both")
    with pytest.raises(ConfigError, match="does not understand"):  # the single ones refuse it
        builtin.check_space("lightning", space)


@pytest.mark.slow
def test_a_study_over_both_frameworks_is_resumed_by_a_worker(tmp_path: Path,
                                                            study_name: str) -> None:
    """`tune create` over both frameworks on PostgreSQL; a worker killed (SIGKILL) after two
    trials; another resumes the study and runs it to its budget: both frameworks ran, each
    record says which, no trial is left running."""
    url = server_url("postgresql")
    where = ("--storage", url, "--study", study_name)
    made = run_tune("create", "--trainer", "both", *where, "--rows", "3000", "--epochs", "1",
                    "--n-trials", "6", "--target", "0.01", cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr

    def history() -> History:
        return History.from_study(optuna.load_study(study_name=study_name, storage=url))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen([*TUNE, "worker", *where, "--llm", "none"], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while len(history().finished()) < 2 and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.5)
    first.kill()
    first.wait()
    assert 2 <= len(history().finished()) < 6, "the first worker was not stopped mid-study"
    second = run_tune("worker", *where, "--llm", "none", cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    found = history()
    said = framework_lines(found)  # the summary's and the report's lines on the frameworks
    assert sorted(line.split(":")[0] for line in said if line.startswith("framework ")) == \
        ["framework jax", "framework lightning"]
    assert not found.running()
    # With a target the clock is the goal: the default pruner (successive halving) may stop a
    # trial after its first epoch; only the one the kill cut short may have failed.
    ran = [t for t in found if t.state in ("complete", "pruned")]
    assert found.budget_used() == 6 and len(ran) >= 5
    assert {t.params["framework"] for t in ran} == {"lightning", "jax"}
    done = [t for t in ran if t.state == "complete"]
    for t in done:  # the record says which ran it: the trainer's own word, beside the config
        assert t.user_attrs["train"]["framework"] == t.params["framework"]
    assert found.goal["target"] == 0.01
