"""`AgentSampler` is an ordinary Optuna sampler: the generic cases Optuna ships for third-party
samplers (`optuna.testing.pytest_samplers`) pass against it, with a suggester that declines every
trial and with one that proposes, and with a fallback of each kind Optuna tests itself with."""

from __future__ import annotations

import random
import warnings

import optuna
import pytest
from optuna.testing.pytest_samplers import (
    BasicSamplerTestCase,
    MultiObjectiveSamplerTestCase,
    RelativeSamplerTestCase,
)

from tunepilot import Float, Int, SearchSpace, Suggestion
from tunepilot.proposers.suggest import AgentSampler

# The names the generic objectives use, with ranges of their own: a proposal is used where it
# fits the objective's distribution, and the fallback samples the rest.
OWN = SearchSpace.of(x=Float(-1.0, 1.0), y=Int(-1, 1), z=Float(-1.0, 1.0))


def declining(space, history):
    return None


class Proposing:
    """A suggester with opinions: a fresh config from its space every time."""

    def __init__(self) -> None:
        self.rng = random.Random(0)

    def __call__(self, space, history):
        return Suggestion({"x": self.rng.uniform(-1, 1), "y": self.rng.randint(-1, 1),
                           "z": self.rng.uniform(-1, 1)}, rationale="scripted")


SUGGESTERS = {"declining": lambda: declining, "proposing": Proposing}


def agent_sampler(suggester, fallback):
    return lambda: AgentSampler(OWN, SUGGESTERS[suggester](), fallback())


class TestBasic(BasicSamplerTestCase):
    @pytest.fixture(params=[("declining", "tpe"), ("proposing", "tpe"),
                            ("declining", "random"), ("proposing", "random")])
    def sampler(self, request):
        suggester, fallback = request.param
        make = {"tpe": lambda: optuna.samplers.TPESampler(seed=0),
                "random": lambda: optuna.samplers.RandomSampler(seed=0)}[fallback]
        return agent_sampler(suggester, make)


class TestRelative(RelativeSamplerTestCase):
    @pytest.fixture(params=["declining", "proposing"])
    def sampler(self, request):
        return agent_sampler(request.param, lambda: optuna.samplers.TPESampler(
            n_startup_trials=0, multivariate=True, seed=0))


class TestMultiObjective(MultiObjectiveSamplerTestCase):
    @pytest.fixture(params=["declining", "proposing"])
    def sampler(self, request):
        return agent_sampler(request.param, lambda: optuna.samplers.NSGAIISampler(seed=0))


# --- the three failures found by these cases, as regression tests -----------------------------

def test_sample_relative_answers_only_for_the_space_it_is_given():
    """PartialFixedSampler takes 'y' out of the space: it must not come back from us."""
    study = optuna.create_study(sampler=AgentSampler(OWN, Proposing(),
                                                     optuna.samplers.TPESampler(seed=0)))
    trial = study.ask()
    space = {"x": OWN.params["x"].distribution(), "z": OWN.params["z"].distribution()}
    params = study.sampler.sample_relative(study, study._storage.get_trial(trial._trial_id),
                                           space)
    assert set(params) == {"x", "z"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.sampler = optuna.samplers.PartialFixedSampler({"y": 0}, study.sampler)

    def objective(t):
        return t.suggest_float("x", -1, 1) + t.suggest_int("y", -1, 1) + t.suggest_float("z", -1, 1)

    study.optimize(objective, n_trials=3)
    assert [t.params["y"] for t in study.trials[1:]] == [0, 0, 0]


def test_an_objective_with_parameters_the_tuned_space_lacks():
    """Past TPE's start-up, a declining suggester's fallback must not sample 'w' (ours has no
    'w') as a relative parameter of a space that lacks it."""
    study = optuna.create_study(sampler=AgentSampler(OWN, declining, optuna.samplers.TPESampler(
        n_startup_trials=2, multivariate=True, seed=0)))

    def objective(t):
        return t.suggest_float("x", -1, 1) ** 2 + t.suggest_float("w", 0, 5)

    study.optimize(objective, n_trials=6)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


def test_a_multi_objective_study_with_a_suggester():
    study = optuna.create_study(directions=["minimize", "maximize"],
                                sampler=AgentSampler(OWN, Proposing()))
    study.optimize(lambda t: (t.suggest_float("x", -1, 1), t.suggest_float("z", -1, 1)),
                   n_trials=3)
    assert len(study.trials) == 3
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    assert all(t.user_attrs["proposer"] == "llm" for t in study.trials)


def test_reseed_rng_reseeds_the_per_trial_fallback():
    def per_trial(number):
        return optuna.samplers.RandomSampler(seed=number)

    def draws(reseed):
        sampler = AgentSampler(OWN, None, fallback_for_trial=per_trial)
        if reseed:
            sampler.reseed_rng()
        study = optuna.create_study(sampler=sampler)
        study.optimize(lambda t: t.suggest_float("x", -1, 1), n_trials=3)
        return [t.params["x"] for t in study.trials]

    assert draws(False) == draws(False)  # seeded per trial: the same draws
    assert draws(True) != draws(False)  # after reseed_rng: others
