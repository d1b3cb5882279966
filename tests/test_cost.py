"""The default search when the goal is the clock: a cost model beside the loss model
(`tunepilot.proposers.cost`)."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

import optuna
import pytest

from tunepilot import Categorical, Float, SearchSpace, TrainResult, Tuner, trainers
from tunepilot.memory import History
from tunepilot.proposers import auto, cost

SPACE = SearchSpace.of(x=Float(-4.0, 4.0))


def _symmetric(config: Mapping[str, Any], report: Any) -> TrainResult:
    """Two optima equally good (x = -2 and x = 2); the negative side costs 60 s a trial, the
    positive 1 s."""
    x = float(config["x"])
    return TrainResult((x * x - 4.0) ** 2 / 16.0, (), 60.0 if x < 0 else 1.0)


def _tuner(name: str) -> Tuner:
    return Tuner(trainers.callable(_symmetric), SPACE, storage="sqlite:///:memory:",
                 study=name, seed=3, display=None)


@pytest.mark.parametrize("goal, kind", [
    ({"target": 0.01, "timeout": None, "n_trials": 20}, "gp-cost"),
    ({"target": None, "timeout": 3600.0, "n_trials": 20}, "gp-cost"),
    ({"target": None, "timeout": None, "n_trials": 20}, "gp"),
    ({}, "gp"),  # a study from before goals were recorded
])
def test_the_rule_follows_the_goal(goal: dict[str, Any], kind: str) -> None:
    tuner = _tuner("rule")
    tuner.run(n_trials=auto.startup(SPACE))
    history = dataclasses.replace(History.from_study(tuner.study), goal=goal)
    chosen, why = auto.choose(history, SPACE, auto.startup(SPACE) + 1)
    assert chosen == kind
    assert ("per expected second" in why) == (kind == "gp-cost")


def test_the_run_records_its_goal_and_says_the_rule(capsys: pytest.CaptureFixture[str]) -> None:
    tuner = Tuner(trainers.callable(_symmetric), SPACE, storage="sqlite:///:memory:",
                  study="said", seed=3)
    tuner.run(n_trials=2, target=-1.0)
    assert History.from_study(tuner.study).goal == {"target": -1.0, "timeout": None,
                                                     "n_trials": 2}
    out = capsys.readouterr().out
    assert "cost: the goal is the target -1" in out and "per expected second" in out
    tuner.run(n_trials=3)  # a trial budget alone: nothing said of cost
    assert "cost:" not in capsys.readouterr().out
    assert History.from_study(tuner.study).goal["target"] is None


def test_the_costs_weight_cools_as_the_budget_is_spent() -> None:
    timed = {"target": None, "timeout": 100.0, "n_trials": 50}
    assert cost.rule_for(timed) == cost.rule_for({**timed, "target": 0.1}) == "carbo"
    assert [cost.cost_weight("carbo", timed, s, 10) for s in (0.0, 25.0, 100.0, 150.0)] == \
        [1.0, 0.75, 0.0, 0.0]
    counted = {"target": 0.1, "timeout": None, "n_trials": 40}
    assert cost.rule_for(counted) == "target"
    assert [cost.cost_weight("target", counted, 1e9, n) for n in (0, 10, 40, 50)] == \
        [1.0, 0.75, 0.0, 0.0]


def test_under_a_target_the_draws_buy_the_chance_of_reaching_it() -> None:
    """With a target (and no time budget) the GP's acquisition is the log chance that a
    config's loss is at the target or under it, in place of expected improvement; the chance
    is highest where the losses were lowest, and beside running trials it is the batch form."""
    import numpy as np
    from optuna._gp import acqf as acqfs
    from optuna._gp import gp, prior
    from optuna._gp.search_space import SearchSpace as GPSpace

    space = {"x": optuna.distributions.FloatDistribution(-4.0, 4.0)}
    losses = {-3.0: 0.9, -1.0: 0.5, 0.5: 0.1, 2.0: 0.3, 3.5: 0.8}
    done = [optuna.trial.create_trial(params={"x": x}, distributions=space, value=v)
            for x, v in losses.items()]
    internal = GPSpace(space)
    x = internal.get_normalized_params(done)
    y = -np.array(list(losses.values()))
    gpr = gp.fit_kernel_params(X=x, Y=(y - y.mean()) / y.std(),
                               is_categorical=internal.is_categorical,
                               log_prior=prior.default_log_prior,
                               minimum_noise=prior.DEFAULT_MINIMUM_NOISE_VAR,
                               deterministic_objective=False)
    ei = acqfs.LogEI(gpr=gpr, search_space=internal, threshold=float(y.max()))
    sampler = cost.CostGP(rule="target", goal={"target": 0.05, "n_trials": 20}, seed=0)
    chance = sampler.chance(ei, done, gpr, internal, 0.05, None)
    assert isinstance(chance, acqfs.LogPI)
    assert chance._threshold == pytest.approx((-0.05 - y.mean()) / y.std())
    at = chance.eval_acqf(torch_of(x)).numpy()
    order = np.argsort(list(losses.values()))
    assert list(np.argsort(-at)) == list(order)  # the lower the loss seen, the higher the chance
    assert (at < 0).all()  # a log chance: no config has reached 0.05
    batch = sampler.chance(ei, done, gpr, internal, 0.05, x[:1])
    assert isinstance(batch, acqfs.qLogPI)


@pytest.mark.parametrize("goal, inner", [({"target": -1.0}, "LogPI"),
                                         ({"target": -1.0, "timeout": 36_000.0}, "LogEI"),
                                         ({"timeout": 36_000.0}, "LogEI")])
def test_a_run_weighs_the_chance_of_its_target_or_with_a_time_budget_expected_improvement(
        monkeypatch: pytest.MonkeyPatch, goal: dict[str, float], inner: str) -> None:
    priced: list[str] = []
    price = cost.CostGP.priced

    def seen(self: cost.CostGP, acqf: Any, *args: Any) -> Any:
        priced.append(type(acqf).__name__)
        return price(self, acqf, *args)

    monkeypatch.setattr(cost.CostGP, "priced", seen)
    _tuner(f"acqf-{len(goal)}-{inner}").run(n_trials=auto.startup(SPACE) + 2, **goal)
    assert priced and set(priced) == {inner}


def torch_of(x: Any) -> Any:
    import torch

    return torch.from_numpy(x)


def test_a_cheap_config_is_preferred_where_two_are_expected_equally_good() -> None:
    """With a target, the GP's draws go to the cheap optimum; told a trial budget alone, the
    same search does not care which side it draws on. Three seeds, 20 trials each."""
    space = SearchSpace.of(x=Float(-4.0, 4.0), y=Float(-1.0, 1.0))

    def train(config: Mapping[str, Any], report: Any) -> TrainResult:
        result = _symmetric(config, report)
        return dataclasses.replace(result, best_val_loss=result.best_val_loss
                                   + float(config["y"]) ** 2)

    def sides(target: float | None) -> tuple[int, int, list[float]]:
        """With a target: also a night's time budget, so the cost's weight stays near 1 (it
        cools as the budget is spent: `test_the_costs_weight_cools_as_the_budget_is_spent`)."""
        cheap = drawn = 0
        expected: list[float] = []
        for seed in (3, 4, 5):
            tuner = Tuner(trainers.callable(train), space, storage="sqlite:///:memory:",
                          study="sides", seed=seed, display=None)
            tuner.run(n_trials=20, target=target, timeout=None if target is None else 36_000)
            gp = [t for t in History.from_study(tuner.study)
                  if (t.sampler or {}).get("kind") == "GP"]
            cheap += sum(1 for t in gp if t.params["x"] > 0)
            drawn += len(gp)
            expected += [t.sampler["expected_s"] for t in gp if "expected_s" in t.sampler]
        return cheap, drawn, expected

    cheap, drawn, expected = sides(-1.0)  # a target no config reaches: all 20 trials run
    assert drawn >= 30
    assert cheap >= 0.8 * drawn, f"{cheap} of {drawn} GP draws on the cheap side"
    assert len(expected) == drawn and sorted(expected)[len(expected) // 2] < 5.0
    blind_cheap, blind_drawn, blind_expected = sides(None)
    assert blind_expected == []  # no cost model: nothing expected, nothing recorded
    assert blind_cheap <= cheap - 6, f"blind to cost: {blind_cheap} of {blind_drawn} cheap"


def _frozen(number: int, x: float, state: optuna.trial.TrialState, value: float | None,
            seconds: float, train: bool) -> optuna.trial.FrozenTrial:
    start = datetime.datetime(2026, 12, 6, 8, 0, 0) + datetime.timedelta(minutes=10 * number)
    return optuna.trial.FrozenTrial(
        number=number, state=state, value=value, values=None, datetime_start=start,
        datetime_complete=start + datetime.timedelta(seconds=seconds),
        params={"x": x}, distributions={"x": SPACE.distributions()["x"]},
        user_attrs={"train": {"wall_time_s": seconds}} if train else {}, system_attrs={},
        intermediate_values={0: value if value is not None else 1.0, 1: 0.9}
        if state == optuna.trial.TrialState.PRUNED else {},
        trial_id=number)


def test_a_pruned_trials_seconds_count_as_that_configs_cost() -> None:
    """Pruned trials (the expensive side, stopped after 50 s of training: no trainer figure,
    their duration counts) beside finished cheap ones at the same loss: the cost model learns
    the stopped side is dear, and the draw goes to the cheap side."""
    study = optuna.create_study()
    pruned, complete = optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.COMPLETE
    for i, x in enumerate((-3.5, -2.5, -1.5, -0.5)):
        study.add_trial(_frozen(i, x, pruned, None, 50.0, train=False))
    for i, x in enumerate((0.5, 1.5, 2.5, 3.5), start=4):
        study.add_trial(_frozen(i, x, complete, 0.9, 1.0, train=True))
    records = History.from_study(study)
    assert [round(t.own_s) for t in records] == [50] * 4 + [1] * 4
    sampler = cost.CostGP(rule="trials", goal={"target": 0.0}, seed=0, n_startup_trials=4,
                          warn_independent_sampling=False)
    study.sampler = sampler
    trial = study.ask(SPACE.distributions())
    assert trial.params["x"] > 0
    assert sampler.expected_s is not None and sampler.expected_s < 10.0


def test_a_choice_of_cost_is_learned_too() -> None:
    """A choice (batch size) that sets the cost and not the loss: the cost model reads it as it
    reads numbers. The first four GP draws of three seeds, with a target and without."""
    space = SearchSpace.of(x=Float(-1.0, 1.0), batch=Categorical([64, 1024]))

    def train(config: Mapping[str, Any], report: Any) -> TrainResult:
        return TrainResult(float(config["x"]) ** 2, (), 40.0 if config["batch"] == 64 else 2.0)

    def cheap(target: float | None) -> int:
        n = 0  # with a target, a time budget too: the cost's weight stays near 1
        for seed in (5, 6, 7):
            tuner = Tuner(trainers.callable(train), space, storage="sqlite:///:memory:",
                          study="bs", seed=seed, display=None)
            tuner.run(n_trials=10, target=target, timeout=None if target is None else 36_000)
            gp = [t for t in History.from_study(tuner.study)
                  if (t.sampler or {}).get("kind") == "GP"][:4]
            assert len(gp) == 4
            n += sum(t.params["batch"] == 1024 for t in gp)
        return n

    clock = cheap(-1.0)
    assert clock >= 10, f"{clock} of 12 GP draws at the cheap batch size"
    assert cheap(None) <= clock - 4


def _epochs(config: Mapping[str, Any], report: Any) -> TrainResult:
    """Three epochs; the loss at each is |x| + 1 / epoch, so a config's rank is set at epoch 1."""
    losses = [abs(float(config["x"])) + 1.0 / e for e in (1, 2, 3)]
    for epoch, loss in enumerate(losses, start=1):
        report(epoch, loss)
    return TrainResult(losses[-1], tuple(losses), 1.0)


@pytest.mark.parametrize("goal, halving", [({"target": -1.0}, True), ({"timeout": 3600.0}, True),
                                           ({}, False)])
def test_the_default_pruner_halves_where_the_goal_is_the_clock(
        goal: dict[str, Any], halving: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """`auto`: successive halving with a target or a time budget (trials judged at epoch 1
    from the second trial on; at epoch 3, the last, a trial ends complete, its value paid
    for), the median pruner with a trial budget alone (from epoch 2, after 5 complete trials:
    none of 6 trials is pruned)."""
    space = SearchSpace.of(x=Float(-4.0, 4.0), epochs=3)
    tuner = Tuner(trainers.callable(_epochs), space, storage="sqlite:///:memory:", study="p",
                  sampler="random", seed=0)
    assert tuner.pruner.__class__.__name__ == "AutoPruner"
    tuner.run(n_trials=6, **goal)
    pruned = [t for t in History.from_study(tuner.study) if t.state == "pruned"]
    assert ("pruner: the goal is the clock, so trials are pruned by successive halving"
            in capsys.readouterr().out) == halving
    assert bool(pruned) == halving
    assert halving == any(len(t.curve) == 1 for t in pruned)  # at epoch 1: halving's first rung
    assert all(len(t.curve) < 3 for t in pruned)  # never at the last epoch
