"""One conformance suite per protocol, parametrised over every backend.

Trainer: every built-in trainer (a Python callable, the same in its own process, the CTR model
on Lightning and on JAX, a user's LightningModule, a user's Flax NNX model) honours the same
contract. Suggester: every suggester tunepilot ships (the LLM suggester on a scripted chat
model, hybrid turns, a failing model) answers in the space, never repeats, and fails only by
`SuggestionFailed`, which the sampler turns into a recorded fallback.
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
    Diverged,
    Float,
    SearchSpace,
    Suggestion,
    SuggestionFailed,
    Tuner,
    trainers,
)
from tunepilot.agent.llm_suggester import LLMSuggester
from tunepilot.agent.review import Reviewer
from tunepilot.agent.suggest import alternate
from tunepilot.memory import History
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
    "hybrid": lambda: alternate(_llm(_answers(20)), startup=2, every=2),
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
