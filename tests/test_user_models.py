"""Users' own models: a LightningModule (with or without a data module) and a Flax NNX model."""

from __future__ import annotations

import numpy as np
import optuna
import pytest

from tests.conftest import run_tune
from tunepilot import ConfigError, Float, SearchSpace, Tuner, trainers

pytestmark = pytest.mark.slow

USER_CODE = '''
import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

import tunepilot

rng = np.random.default_rng(0)
X = rng.normal(size=(512, 8)).astype(np.float32)
W = rng.normal(size=(8,)).astype(np.float32)
Y = (X @ W + 0.1 * rng.normal(size=512)).astype(np.float32)


class Regression(pl.LightningModule):
    def __init__(self, lr, log_name="val_loss"):
        super().__init__()
        self.lr, self.log_name = lr, log_name
        self.net = torch.nn.Linear(8, 1)

    def loss(self, batch):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x)[:, 0], y)

    def training_step(self, batch, i):
        return self.loss(batch)

    def validation_step(self, batch, i):
        self.log(self.log_name, self.loss(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.from_numpy(X[:400]), torch.from_numpy(Y[:400])),
                          batch_size=32, shuffle=True)

    def val_dataloader(self):
        return DataLoader(TensorDataset(torch.from_numpy(X[400:]), torch.from_numpy(Y[400:])),
                          batch_size=112)


def make_module(config):
    return Regression(config["lr"])


def make_silent_module(config):
    return Regression(config["lr"], log_name="something_else")


def make_flax(config, rngs):
    from flax import nnx
    return nnx.Sequential(nnx.Linear(8, 16, rngs=rngs), nnx.relu, nnx.Linear(16, 1, rngs=rngs))


def mse(model, batch):
    return ((model(batch["x"])[:, 0] - batch["y"]) ** 2).mean()


flax_trainer = tunepilot.trainers.flax(
    make_flax, mse, ({"x": X[:400], "y": Y[:400]}, {"x": X[400:], "y": Y[400:]}))
'''

SPACE = SearchSpace.of(lr=Float(1e-4, 0.3, log=True), epochs=3)


@pytest.fixture
def user(tmp_path, monkeypatch):
    (tmp_path / "user_models.py").write_text(USER_CODE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    import user_models

    return importlib.reload(user_models)


def test_own_lightning_module_is_tuned(user, storage):
    tuner = Tuner(trainers.lightning(user.make_module), SPACE, storage=storage, study="lit",
                  pruner="none")
    tuner.study.enqueue_trial({"lr": 1e-4})  # a poor start, so improvement is visible
    # lr >= 0.05 (a fifth of the log range) reaches the noise floor: 11 draws find it
    result = tuner.run(n_trials=12)
    first = result.history[0]
    assert len(first.curve) == 3
    assert result.best_value < first.value
    assert result.best_value < 0.5  # the noise floor is 0.01; the start is ~8


def test_own_lightning_module_with_a_data_module(user, storage):
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    class Data(pl.LightningDataModule):
        def __init__(self, batch_size):
            super().__init__()
            self.batch_size = batch_size

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.from_numpy(user.X[:400]),
                                            torch.from_numpy(user.Y[:400])),
                              batch_size=self.batch_size)

        def val_dataloader(self):
            return DataLoader(TensorDataset(torch.from_numpy(user.X[400:]),
                                            torch.from_numpy(user.Y[400:])), batch_size=64)

    class NoLoaders(user.Regression):
        train_dataloader = None
        val_dataloader = None

    trainer = trainers.lightning(lambda c: NoLoaders(c["lr"]), lambda c: Data(c["batch_size"]))
    result = trainer({"lr": 0.1, "batch_size": 16, "epochs": 2}, lambda e, v: None)
    assert len(result.curve) == 2 and result.best_val_loss < 1.0


def test_a_module_that_logs_no_val_loss_stops_the_search_with_the_fix(user, storage):
    tuner = Tuner(trainers.lightning(user.make_silent_module), SPACE, storage=storage,
                  study="silent")
    with pytest.raises(ConfigError, match=r"logged no 'val_loss'.*self.log\('val_loss'"):
        tuner.run(n_trials=5)


def test_own_flax_model_is_tuned_and_can_be_pruned(user, storage):
    result = Tuner(user.flax_trainer, SPACE.merged(SearchSpace.of(batch_size=32)),
                   storage=storage, study="flax", pruner="none").run(n_trials=5)
    # Small learning rates barely move in 3 epochs: the search must tell them apart.
    values = [t.value for t in result.history]
    assert result.best_value < 0.5 * max(values)
    assert all(len(t.curve) == 3 for t in result.history)

    seen = []

    def prune(epoch, loss):
        seen.append(epoch)
        raise optuna.TrialPruned()

    with pytest.raises(optuna.TrialPruned):
        user.flax_trainer({"lr": 1e-2, "epochs": 5}, prune)
    assert seen == [1]


def test_flax_data_with_mismatched_lengths_is_refused():
    with pytest.raises(ConfigError, match="one common first dimension"):
        trainers.flax(lambda c, r: None, lambda m, b: 0.0,
                      ({"x": np.zeros((4, 2)), "y": np.zeros(5)}, {"x": np.zeros((2, 2))}))


def test_cli_specs_for_user_models(user, tmp_path):
    (tmp_path / "space.toml").write_text(
        '[space]\nlr = { type = "float", low = 1e-3, high = 0.3, log = true }\n')
    for spec in ("lightning:user_models:make_module", "user_models:flax_trainer"):
        proc = run_tune("run", "--llm", "none", "--trainer", spec, "--config", "space.toml",
                        "--n-trials", "2",
                        "--epochs", "2", "--storage", "sqlite:///s.db", cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "2 finished" in proc.stdout


def test_a_user_s_trainer_settings_and_callbacks_are_in_effect(storage):
    """Your own Trainer settings (a tuned accumulate_grad_batches) and your own callback run
    beside tunepilot's reporting callback: fewer optimizer steps with more accumulation."""
    import lightning.pytorch as pl

    from tests.lightning_toy import Regression
    from tunepilot import Categorical

    class CountSteps(pl.Callback):
        def __init__(self):
            self.steps = 0

        def on_before_optimizer_step(self, trainer, module, optimizer):
            self.steps += 1

    counters = []

    def fresh(config):
        counters.append(CountSteps())
        return [counters[-1]]

    trainer = trainers.lightning(
        lambda config: Regression(config["lr"]),
        trainer_kwargs=lambda config: {"accumulate_grad_batches": config["accumulate"],
                                       "gradient_clip_val": 1.0},
        callbacks=fresh)
    space = SearchSpace.of(lr=Float(1e-3, 0.1, log=True), accumulate=Categorical([1, 4]),
                           epochs=2)
    tuner = Tuner(trainer, space, storage=storage, study="own-trainer", pruner="none",
                  display=None)
    tuner.enqueue({"lr": 0.05, "accumulate": 1})
    tuner.enqueue({"lr": 0.05, "accumulate": 4})
    result = tuner.run(n_trials=2)
    assert [len(t.curve) for t in result.history] == [2, 2]  # our reporting ran too
    assert [c.steps for c in counters] == [8, 2]  # 4 batches x 2 epochs, accumulated by 1 / 4


def test_a_user_s_own_optax_optimizer(storage):
    import optax
    from flax import nnx

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype(np.float32)
    y = x.sum(1)
    made = []

    def sgd(config):
        made.append(config["momentum"])
        return optax.sgd(config["lr"], momentum=config["momentum"])

    def model(config, rngs):
        return nnx.Linear(4, 1, rngs=rngs)

    def mse(m, batch):
        return ((m(batch["x"])[:, 0] - batch["y"]) ** 2).mean()

    trainer = trainers.flax(model, mse, ({"x": x[:200], "y": y[:200]},
                                         {"x": x[200:], "y": y[200:]}), optimizer=sgd)
    space = SearchSpace.of(lr=Float(1e-3, 0.1, log=True), momentum=Float(0.0, 0.9),
                           epochs=2, batch_size=50)
    result = Tuner(trainer, space, storage=storage, study="optax", pruner="none",
                   display=None).run(n_trials=3)
    assert result.n_finished == 3 and result.best_value < 3.5  # var(y) = 4: it learned
    assert made == [t.params["momentum"] for t in result.history]  # one optimizer per trial


def test_a_precision_the_device_cannot_run_is_refused_before_the_first_trial(tmp_path):
    (tmp_path / "space.toml").write_text(
        '[space]\nprecision = { type = "categorical", choices = ["32-true", "16-mixed"] }\n')
    done = run_tune("run", "--llm", "none", "--config", "space.toml", "--data", "synthetic:2000",
                    "--storage", "sqlite:///s.db", cwd=tmp_path)
    assert done.returncode == 2
    assert "precision '16-mixed' cannot run here" in done.stderr
    assert "remove it from [space] precision" in done.stderr
    assert not (tmp_path / "s.db").exists() or not optuna.load_study(
        study_name="lightning-synthetic-2000", storage="sqlite:///" + str(tmp_path / "s.db")
    ).trials


def test_a_user_s_own_flax_train_step(storage):
    import jax
    from flax import nnx

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype(np.float32)
    y = x.sum(1)
    calls = []

    def mse(m, batch):
        return ((m(batch["x"])[:, 0] - batch["y"]) ** 2).mean()

    @nnx.jit
    def clipped_step(model, optimizer, batch, clip):
        loss, grads = nnx.value_and_grad(mse)(model, batch)
        norm = jax.numpy.sqrt(sum((g ** 2).sum() for g in jax.tree.leaves(grads)))
        grads = jax.tree.map(lambda g: g * jax.numpy.minimum(1.0, clip / (norm + 1e-9)), grads)
        optimizer.update(model, grads)
        return loss

    def step(config):  # the user's step, with a tuned parameter of its own
        def run(model, optimizer, batch):
            calls.append(config["clip"])
            return clipped_step(model, optimizer, batch, config["clip"])
        return run

    trainer = trainers.flax(lambda config, rngs: nnx.Linear(4, 1, rngs=rngs), mse,
                            ({"x": x[:200], "y": y[:200]}, {"x": x[200:], "y": y[200:]}),
                            step=step)
    space = SearchSpace.of(lr=Float(1e-2, 0.1, log=True), clip=Float(0.1, 10.0, log=True),
                           epochs=2, batch_size=50)
    result = Tuner(trainer, space, storage=storage, study="step", pruner="none",
                   display=None).run(n_trials=2)
    assert result.n_finished == 2
    # 4 batches x 2 epochs per trial, each through the user's step with its trial's clip.
    assert calls == [t.params["clip"] for t in result.history for _ in range(8)]
    assert all(len(t.curve) == 2 for t in result.history)  # validated by loss_fn each epoch


@pytest.mark.parametrize("native", [True, False])
def test_the_default_space_offers_bf16_only_where_the_cpu_computes_it(monkeypatch, native):
    monkeypatch.setattr(trainers.builtin, "cpu_bf16_native", lambda: native)
    monkeypatch.setattr(trainers.builtin, "on_gpu", lambda trainer: False)
    space = trainers.default_space("lightning")
    if native:
        assert list(space.params["precision"].choices) == ["32-true", "bf16-mixed"]
    else:  # one precision left: a fixed setting, not a choice the search spends trials on
        assert "precision" not in space.params and space.fixed["precision"] == "32-true"
    # A space of the user's that names bf16 still runs; where it is emulated, it is said.
    notes = trainers.builtin.check_space("lightning", SearchSpace.of(precision="bf16-mixed"))
    assert any("emulated on this CPU" in n for n in notes) is (not native)


def test_cpu_bf16_is_read_from_the_cpu_flags(tmp_path):
    amd = tmp_path / "epyc"
    amd.write_text("model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 fma\n")
    sapphire = tmp_path / "spr"
    sapphire.write_text("flags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    assert trainers.builtin.cpu_bf16_native(amd) is False
    assert trainers.builtin.cpu_bf16_native(sapphire) is True
    assert trainers.builtin.cpu_bf16_native(tmp_path / "missing") is True  # not Linux: assumed


DDP_ON_CPU = {"accelerator": "cpu", "devices": 2, "strategy": "ddp"}


def test_a_trial_over_two_processes_with_ddp_reports_once_per_epoch(storage, tmp_path):
    """`devices=2, strategy="ddp"` on the CPU: two ranks, each on half the data; rank 0's loss
    reaches the study once per epoch, and the user's callback ran on both ranks."""
    from tests.lightning_toy import MarkRanks, Regression

    trainer = trainers.lightning(lambda config: Regression(config["lr"]),
                                 trainer_kwargs=DDP_ON_CPU, callbacks=[MarkRanks(tmp_path)])
    tuner = Tuner(trainer, SearchSpace.of(lr=Float(1e-3, 0.1, log=True), epochs=3),
                  storage=storage, study="ddp", pruner="none", display=None)
    result = tuner.run(n_trials=1)
    trial = result.history[0]
    assert trial.state == "complete" and len(trial.curve) == 3
    assert sorted(tuner.study.trials[0].intermediate_values) == [1, 2, 3]
    # 200 rows in batches of 50, split over 2 ranks: 2 steps per epoch on each, 6 in all.
    marks = {p.name: p.read_text() for p in tmp_path.glob("rank*")}
    assert marks == {"rank0-of-2": "6", "rank1-of-2": "6"}
    assert trial.train.device == "torch:cpu (2 ranks)" and trial.train.peak_memory_mb > 0


def test_a_ddp_trial_is_pruned_once_on_every_rank(storage, tmp_path):
    from tests.lightning_toy import MarkRanks, Regression

    trainer = trainers.lightning(lambda config: Regression(config["lr"]),
                                 trainer_kwargs=DDP_ON_CPU, callbacks=[MarkRanks(tmp_path)])
    tuner = Tuner(trainer, SearchSpace.of(lr=Float(1e-3, 0.1, log=True), epochs=5),
                  storage=storage, study="ddp-pruned", display=None,
                  pruner=optuna.pruners.ThresholdPruner(upper=1e-9))  # prunes at epoch 1
    result = tuner.run(n_trials=1)
    assert result.history[0].state == "pruned"
    assert list(tuner.study.trials[0].intermediate_values) == [1]
    # Both ranks stopped after the first epoch (2 steps), none waited for the other.
    assert {p.name: p.read_text() for p in tmp_path.glob("rank*")} == {
        "rank0-of-2": "2", "rank1-of-2": "2"}


def test_out_of_memory_on_one_rank_fails_the_trial_as_oom_and_the_search_goes_on(storage):
    from tests.lightning_toy import OutOfMemoryOnRank1

    trainer = trainers.lightning(lambda config: OutOfMemoryOnRank1(config["lr"]),
                                 trainer_kwargs=DDP_ON_CPU)
    tuner = Tuner(trainer, SearchSpace.of(lr=Float(1e-3, 0.1, log=True), epochs=2),
                  storage=storage, study="ddp-oom", pruner="none", display=None)
    result = tuner.run(n_trials=2)
    assert [t.state for t in result.history] == ["fail", "fail"]
    error = result.history[0].error
    assert error["kind"] == "oom" and "rank 1" in error["message"]
    assert "OutOfMemoryError" in error["message"]


def test_a_ddp_module_that_does_not_pickle_is_refused_with_the_fix(storage):
    from tests.lightning_toy import Regression

    class Local(Regression):  # defined in a function: a rank cannot import it
        pass

    trainer = trainers.lightning(lambda config: Local(config["lr"]), trainer_kwargs=DDP_ON_CPU)
    tuner = Tuner(trainer, SearchSpace.of(lr=Float(1e-3, 0.1, log=True), epochs=1),
                  storage=storage, study="ddp-local", pruner="none", display=None)
    with pytest.raises(ConfigError, match="must pickle.*in a module"):
        tuner.run(n_trials=1)
