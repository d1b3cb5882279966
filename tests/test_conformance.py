"""One conformance suite per protocol, parametrised over every backend.

Trainer: every built-in trainer (a Python callable, the same in its own process, the CTR model
on Lightning and on JAX, a backend added through the registry, a user's LightningModule, a
user's Flax NNX model) honours the same contract. Suggester: every suggester tunepilot ships
(the LLM suggester on a scripted chat model, hybrid turns, a failing model) answers in the
space, never repeats, and fails only by `SuggestionFailed`, which the sampler turns into a
recorded fallback.
"""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import optuna
import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from tests.conftest import quadratic
from tunepilot import (
    Categorical,
    ConfigError,
    Diverged,
    Float,
    SearchSpace,
    Suggestion,
    SuggestionFailed,
    Tuner,
    trainers,
)
from tunepilot.memory import History
from tunepilot.proposers.llm_suggester import LLMSuggester
from tunepilot.proposers.review import Reviewer, earned_turns
from tunepilot.trainers import builtin
from tunepilot.trainers.base import TrainResult, check_finite

# --- the Trainer protocol --------------------------------------------------------------------


def curvy(config, report):
    """A toy whose best epoch is not its last (so 'best, not last' is tested)."""
    curve = [1.0 + config["x"] ** 2, 0.5 + config["x"] ** 2, 0.7 + config["x"] ** 2]
    for epoch, loss in enumerate(curve, 1):
        report(epoch, loss)
    return curve[-1]


def exploding(config, report):
    report(1, 1.0)
    report(2, float("nan"))
    return 0.0


def _ctr(kind):
    data = trainers.load_data("synthetic:3000")
    return trainers.from_spec(kind, data)


def _user_lightning():
    from tests.lightning_toy import Regression

    return trainers.lightning(lambda config: Regression(config["lr"]))


def _user_flax():
    from flax import nnx

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype(np.float32)
    y = x.sum(1)

    def make(config, rngs):
        return nnx.Sequential(nnx.Linear(4, 8, rngs=rngs), nnx.relu, nnx.Linear(8, 1, rngs=rngs))

    def mse(model, batch):
        return ((model(batch["x"])[:, 0] - batch["y"]) ** 2).mean()

    return trainers.flax(make, mse, ({"x": x[:200], "y": y[:200]}, {"x": x[200:], "y": y[200:]}))


def numpy_ctr(data):
    """A built-in backend written for the registry's test: logistic regression on the CTR
    task's dense features, minibatch gradient descent in NumPy (it trains for real)."""
    import time

    from tunepilot.trainers.ctr_config import EXPLODED
    from tunepilot.trainers.data.ctr import log_loss

    def train(config, report):
        rng = np.random.default_rng(config.get("seed", 0))
        x, y = data.train.dense.astype(np.float64), data.train.y
        w, b, curve, start = np.zeros(x.shape[1]), 0.0, [], time.perf_counter()
        for epoch in range(1, config.get("epochs", 3) + 1):
            for idx in np.array_split(rng.permutation(len(y)), max(1, len(y) // config[
                    "batch_size"])):
                with np.errstate(over="ignore", invalid="ignore"):
                    g = 1.0 / (1.0 + np.exp(-(x[idx] @ w + b))) - y[idx]
                w, b = w - config["lr"] * x[idx].T @ g / len(idx), b - config["lr"] * g.mean()
            with np.errstate(over="ignore", invalid="ignore"):
                p = 1.0 / (1.0 + np.exp(-(data.val.dense @ w + b)))
            loss = log_loss(data.val.y, p) if np.isfinite(p).all() else float("nan")
            if loss > EXPLODED * data.base_logloss:  # the built-ins' rule: it blew up
                raise Diverged(epoch, loss, "")
            report(epoch, loss)
            curve.append(loss)
        return TrainResult(min(curve), tuple(curve), time.perf_counter() - start)

    return train


NUMPY = builtin.BuiltinTrainer("numpy", numpy_ctr, "NumPy", on_gpu=lambda: False,
                               precisions=lambda: ["32-true"])


@pytest.fixture
def numpy_builtin(monkeypatch):
    """The NumPy backend, registered as docs/development.md says (one registry entry)."""
    monkeypatch.setitem(builtin.BUILTIN, "numpy", NUMPY)


def _numpy_ctr():
    with pytest.MonkeyPatch.context() as m:
        m.setitem(builtin.BUILTIN, "numpy", NUMPY)
        return _ctr("numpy")


def _isolated():
    from tunepilot.runtime.isolate import Isolated

    return Isolated(functools.partial(trainers.from_spec, "tests.test_conformance:curvy"))


# backend: (make trainer, a config that trains, a config that diverges or a diverging trainer)
TRAINERS = {
    "callable": (lambda: trainers.callable(curvy), {"x": 0.5}, None),
    "isolated": (_isolated, {"x": 0.5}, None),
    "lightning-ctr": (lambda: _ctr("lightning"), {"lr": 3e-3, "batch_size": 512, "epochs": 2},
                      {"lr": 50.0, "batch_size": 256, "epochs": 2}),
    "jax-ctr": (lambda: _ctr("jax"), {"lr": 3e-3, "batch_size": 512, "epochs": 2},
                {"lr": 50.0, "batch_size": 256, "epochs": 2}),
    "numpy-ctr": (_numpy_ctr, {"lr": 0.5, "batch_size": 256, "epochs": 2},
                  {"lr": 1e6, "batch_size": 256, "epochs": 2}),
    "lightning-user": (_user_lightning, {"lr": 0.05, "epochs": 2}, {"lr": 1e6, "epochs": 3}),
    "flax-user": (_user_flax, {"lr": 0.01, "epochs": 2, "batch_size": 50},
                  {"lr": 1e25, "epochs": 3, "batch_size": 50}),
}


@pytest.fixture(scope="module", params=sorted(TRAINERS))
def backend(request):
    make, good, bad = TRAINERS[request.param]
    return request.param, make(), good, bad


def recorder(seen):
    def report(epoch, val_loss):
        check_finite(epoch, val_loss)  # what the loop does first
        seen.append((epoch, val_loss))

    return report


@pytest.mark.slow
def test_a_trainer_reports_every_epoch_and_returns_its_best(backend):
    name, trainer, config, _ = backend
    seen = []
    result = trainer(config, recorder(seen))
    assert isinstance(result, TrainResult)
    assert [e for e, _ in seen] == list(range(1, len(seen) + 1)) and seen
    assert result.curve == pytest.approx(tuple(v for _, v in seen))
    assert math.isfinite(result.best_val_loss)
    assert result.best_val_loss == pytest.approx(min(result.curve))
    assert result.wall_time_s > 0
    if name in ("callable", "isolated"):
        assert result.best_val_loss != result.curve[-1]  # the best epoch, not the last


@pytest.mark.slow
def test_a_pruned_trial_stops_at_once(backend):
    _, trainer, config, _ = backend
    calls = []

    def prune(epoch, val_loss):
        calls.append(epoch)
        raise optuna.TrialPruned(f"pruned at {epoch}")

    with pytest.raises(optuna.TrialPruned):
        trainer(config, prune)
    assert calls == [1]


@pytest.mark.slow
def test_a_diverging_trial_raises_diverged(backend):
    name, trainer, _, bad = backend
    if bad is None:  # the toys: a trainer whose second epoch is NaN
        trainer = trainers.callable(exploding) if name == "callable" else _isolated_exploding()
        bad = {"x": 0.0}
    with pytest.raises(Diverged):
        trainer(bad, recorder([]))


def _isolated_exploding():
    from tunepilot.runtime.isolate import Isolated

    return Isolated(functools.partial(trainers.from_spec, "tests.test_conformance:exploding"))


def test_a_built_in_trainer_registered_in_one_place_runs_as_any_other(numpy_builtin, tmp_path):
    """docs/development.md, "Adding a built-in trainer": one registry entry gives a backend the
    task's data, default space, checks, study name and task text, through `tune run`'s path."""
    from tunepilot.agent import studies
    from tunepilot.agent.build import from_config
    from tunepilot.config import load_config

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    cfg = load_config(trainer="numpy", data="synthetic:2000", epochs=2, n_trials=3, llm="none",
                      storage=storage)
    tuner, notes = from_config(cfg, display=None)
    assert cfg.study_name() == "numpy-synthetic-2000"
    assert set(tuner.space.params) == {"lr", "batch_size", "dropout"}
    assert tuner.space.fixed["precision"] == "32-true"  # its device's one precision
    assert notes[0].startswith("data: synthetic CTR")
    result = tuner.run(n_trials=3)
    assert result.n_finished == 3 and result.best_value is not None
    assert "with NumPy on synthetic:2000" in studies.next_prompt(storage, cfg.study_name())
    with pytest.raises(ConfigError, match="does not understand"):
        from_config(load_config(trainer="numpy", data="synthetic:2000", llm="none",
                                storage=storage, study="other",
                                space={"momentum": {"type": "float", "low": 0, "high": 1}}))


# --- the Suggester protocol ------------------------------------------------------------------

SPACE = SearchSpace.of(x=Float(-10.0, 10.0), opt=Categorical(["adam", "sgd"]))


def _answers(n):
    return [json.dumps({"config": {"x": -9.0 + 1.5 * i, "opt": "adam"}, "rationale": f"try {i}"})
            for i in range(n)]


def _llm(responses):
    return LLMSuggester(FakeListChatModel(responses=responses), model_name="scripted",
                        task="toy", n_trials=8, structured=False)


def _function_suggester(space, history):
    x = -8.0 + len(history)
    return Suggestion({"x": x, "opt": "sgd"}, "llm", rationale="a line search")


def _reviews(n):
    """Accepts the sampler's candidate, then overrides it, in turn."""
    return [json.dumps({"decision": "override" if i % 2 else "accept",
                        "config": {"x": -9.5 + 1.5 * i, "opt": "sgd"},
                        "rationale": f"review number {i} of the candidate"}) for i in range(n)]


SUGGESTERS = {
    "llm": lambda: _llm(_answers(20)),
    "review": lambda: Reviewer(_llm(_reviews(20)), max_override_share=0.5),
    "hybrid": lambda: earned_turns(_llm(_answers(20)), startup=2, share=0.5),
    "function": lambda: _function_suggester,
    # Repeats its first answer: the second trial's answers are refused as repeats.
    "llm-repeating": lambda: _llm([_answers(1)[0]] * 20),
    "llm-garbage": lambda: _llm(["not json at all"] * 20),
}


@pytest.mark.parametrize("name", sorted(SUGGESTERS))
def test_a_suggester_answers_in_the_space_or_fails_by_suggestion_failed(name):
    suggest = SUGGESTERS[name]()
    history = History()
    try:
        suggestion = suggest(SPACE, history)
    except SuggestionFailed as e:
        assert name == "llm-garbage" and str(e)
        return
    assert name != "llm-garbage"
    if suggestion is not None:
        assert SPACE.snap(suggestion.params) == dict(suggestion.params)
        assert suggestion.proposer in ("llm", "optuna", "fallback", "enqueued", "human")


@pytest.mark.parametrize("name", sorted(SUGGESTERS))
def test_a_suggester_drives_a_study_without_repeats(name, storage):
    tuner = Tuner(trainers.callable(quadratic), SPACE, storage=storage, study=name,
                  suggester=SUGGESTERS[name](), pruner="none")
    result = tuner.run(n_trials=6)
    assert result.n_finished == 6
    keys = [t.key for t in result.history]
    assert len(set(keys)) == 6  # nobody proposed a config twice
    for t in result.history:
        assert SPACE.snap(t.params) == dict(t.params)
        assert t.proposer in ("llm", "optuna", "fallback")
        if t.proposer == "fallback":
            assert t.fallback_reason  # a failure is recorded with its cause
    proposers = {t.proposer for t in result.history}
    expected = {"llm": {"llm"}, "function": {"llm"}, "hybrid": {"llm", "optuna"},
                "review": {"llm", "optuna"},
                "llm-repeating": {"llm", "fallback"}, "llm-garbage": {"fallback"}}[name]
    assert proposers == expected
