"""The built-in CTR task on real JAX/Flax/Optax training, and its parity with Lightning."""

from __future__ import annotations

import optuna
import pytest

from tunepilot import ConfigError, Diverged, Float, SearchSpace, Tuner, trainers
from tunepilot.trainers.base import no_report
from tunepilot.trainers.data import synthetic

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data():
    return synthetic(6003)  # a ragged last batch at every batch size used here


@pytest.fixture(scope="module")
def jt():
    from tunepilot.trainers import jax_trainer

    return jax_trainer


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_learns_well_below_the_base_rate(data, jt, precision):
    result = jt.train_ctr({"lr": 3e-3, "batch_size": 256, "epochs": 2, "precision": precision},
                          no_report, data=data)
    assert len(result.curve) == 2
    assert result.best_val_loss == min(result.curve)
    assert result.best_val_loss < data.base_logloss - 0.04, (result.curve, data.base_logloss)


def test_one_compilation_per_shape_and_none_within_or_across_epochs(jt):
    data = synthetic(5011)  # shapes no other test uses, so nothing is compiled yet
    before = jt.compilations()
    jt.train_ctr({"lr": 1e-3, "batch_size": 384, "epochs": 3, "dropout": 0.1}, no_report, data=data)
    assert jt.compilations() - before == 2  # one epoch program + one evaluation program
    # Another learning rate, dropout and weight decay: the same compiled programs.
    result = jt.train_ctr({"lr": 5e-3, "batch_size": 384, "epochs": 2, "dropout": 0.4,
                           "weight_decay": 1e-5, "seed": 3}, no_report, data=data)
    assert result.extra["compilations"] == 0
    # A new batch size needs a new epoch program only.
    result = jt.train_ctr({"lr": 5e-3, "batch_size": 640, "epochs": 1}, no_report, data=data)
    assert result.extra["compilations"] == 1


def test_a_blown_up_run_is_reported_as_diverged(data, jt):
    with pytest.raises(Diverged):
        jt.train_ctr({"lr": 10.0, "batch_size": 256, "epochs": 2}, no_report, data=data)


def test_fp16_is_refused_with_the_alternatives(data, jt):
    with pytest.raises(ConfigError, match="bf16-mixed"):
        jt.train_ctr({"precision": "16-mixed"}, no_report, data=data)


def test_pruning_stops_a_jax_trial(data, jt):
    epochs_seen = []

    def prune_at_2(epoch, val_loss):
        epochs_seen.append(epoch)
        if epoch == 2:
            raise optuna.TrialPruned("pruned")

    with pytest.raises(optuna.TrialPruned):
        jt.train_ctr({"lr": 1e-3, "batch_size": 1024, "epochs": 5}, prune_at_2, data=data)
    assert epochs_seen == [1, 2]


def test_divergence_becomes_a_fail_trial_and_the_search_goes_on(data, storage):
    space = SearchSpace.of(lr=Float(1e-3, 20.0, log=True), epochs=1, batch_size=512)
    tuner = Tuner(trainers.ctr_jax(data), space, storage=storage, study="nan", pruner="none")
    tuner.study.enqueue_trial({"lr": 15.0})
    tuner.study.enqueue_trial({"lr": 3e-3})
    result = tuner.run(n_trials=2)
    first, second = result.history
    assert first.state == "fail" and first.error["kind"] == "diverged"
    assert second.state == "complete"


@pytest.mark.parametrize("config", [
    {"lr": 3e-3, "batch_size": 512, "dropout": 0.1, "epochs": 2},
    {"lr": 1e-2, "batch_size": 2048, "dropout": 0.3, "epochs": 2, "precision": "bf16-mixed"},
])
def test_lightning_and_jax_agree(data, jt, config):
    from tunepilot.trainers.lightning_trainer import train_ctr as lightning_train

    jax_curve = jt.train_ctr(config, no_report, data=data).curve
    torch_curve = lightning_train(config, no_report, data=data).curve
    # Same model, init distributions, optimizer and data order policy; different random
    # streams. Measured gap on this data: <= 0.005 per epoch. Tolerance: 0.015.
    for a, b in zip(jax_curve, torch_curve, strict=True):
        assert abs(a - b) < 0.015, (jax_curve, torch_curve)
