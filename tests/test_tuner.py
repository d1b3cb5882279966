"""The loop logic on a toy trainer: stopping rules, resume, failures, pruning, suggesters."""

from __future__ import annotations

import math

import optuna
import pytest

from tests.conftest import quadratic
from tunepilot import ConfigError, Float, SearchSpace, Suggestion, SuggestionFailed, Tuner, trainers
from tunepilot.memory import History, Stop, attrs
from tunepilot.proposers.samplers import optuna_sampler
from tunepilot.proposers.suggest import AgentSampler

SPACE = SearchSpace.of(x=Float(-10.0, 10.0))


def make_tuner(storage, fn=quadratic, **kw):
    kw.setdefault("pruner", "none")
    return Tuner(trainers.callable(fn), SPACE, storage=storage, study="toy", **kw)


def test_stops_at_the_target_before_the_budget(storage):
    result = make_tuner(storage).run(n_trials=200, target=0.05)
    assert result.target_reached
    assert result.best_value <= 0.05
    assert result.n_finished < 200
    assert result.stop_reason.startswith("target 0.05 reached by trial")
    # The flag the other workers watch is set.
    assert Stop.from_record(make_tuner(storage).study.user_attrs[attrs.STOP]).is_target


def test_budget_is_the_study_total_and_a_rerun_resumes(storage):
    first = make_tuner(storage).run(n_trials=5)
    assert (first.n_finished, first.n_new) == (5, 5)
    again = make_tuner(storage).run(n_trials=5)
    assert again.n_new == 0
    assert again.stop_reason == "budget of 5 trials already used"
    more = make_tuner(storage).run(n_trials=8)
    assert (more.n_finished, more.n_new) == (8, 3)
    numbers = [t.number for t in more.history]
    assert numbers == list(range(8))
    assert more.best_value <= first.best_value  # the best is kept


def test_resumed_search_does_not_replay_the_same_random_proposals(storage):
    make_tuner(storage, sampler="random").run(n_trials=3)
    make_tuner(storage, sampler="random").run(n_trials=6)
    xs = [t.params["x"] for t in History.from_study(make_tuner(storage).study)]
    assert len(set(xs)) == 6


def test_crashing_and_diverging_trials_are_recorded_and_the_search_goes_on(storage):
    def flaky(config, report):
        if config["x"] > 5:
            return float("nan")
        if config["x"] < -5:
            raise RuntimeError(f"boom at {config['x']:.3f}")
        return quadratic(config, report)

    result = make_tuner(storage, fn=flaky, sampler="random").run(n_trials=30)
    assert result.n_finished == 30
    fails = result.history.failures()
    kinds = {t.error["kind"] for t in fails}
    assert kinds == {"diverged", "exception"}
    assert all(t.state == "fail" for t in fails)
    boom = next(t for t in fails if t.error["kind"] == "exception")
    assert boom.error["message"].startswith("RuntimeError: boom at")
    assert result.best_value is not None and math.isfinite(result.best_value)


def test_the_same_error_again_and_again_stops_the_search(storage):
    def broken(config, report):
        raise KeyError("features")

    result = make_tuner(storage, fn=broken).run(n_trials=50)
    assert result.n_finished == 3
    assert result.stop_reason.startswith("repeated failure: the last 3 trials failed with the "
                                         "same error")
    assert result.failed_alike
    assert "KeyError" in result.stop_reason


def test_a_config_error_inside_a_trial_stops_the_search_and_is_raised(storage):
    def needs_data(config, report):
        raise ConfigError("data file missing")

    with pytest.raises(ConfigError, match="data file missing"):
        make_tuner(storage, fn=needs_data).run(n_trials=10)
    assert len(make_tuner(storage).study.trials) == 1


def test_pruning_stops_bad_trials_from_their_reports(storage):
    def slow_bad(config, report):
        loss = (config["x"] - 2.0) ** 2
        for epoch in range(1, 6):
            report(epoch, loss + 1.0 / epoch)
        return loss

    pruner = optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1)
    result = make_tuner(storage, fn=slow_bad, pruner=pruner, sampler="random").run(n_trials=25)
    pruned = [t for t in result.history if t.state == "pruned"]
    assert pruned, "no trial was pruned"
    assert all(len(t.curve) < 5 for t in pruned)


def test_proposer_is_recorded_for_optuna_and_enqueued_trials(storage):
    tuner = make_tuner(storage)
    tuner.study.enqueue_trial({"x": 2.0})
    result = tuner.run(n_trials=3)
    proposers = [t.proposer for t in result.history]
    assert proposers == ["enqueued", "optuna", "optuna"]
    assert result.history[0].params == {"x": 2.0}


class ScriptedSuggester:
    """Proposes from a script; None declines, an exception fails over to the fallback."""

    def __init__(self, script):
        self.script = list(script)
        self.seen: list[int] = []

    def __call__(self, space, history):
        self.seen.append(len(history))
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        if item is None:
            return None
        return Suggestion(space.snap({"x": item}), rationale=f"try {item}", meta={"tokens_in": 10})


def test_suggester_proposals_and_fallback_are_recorded(storage):
    suggester = ScriptedSuggester([1.5, SuggestionFailed("answer did not parse"), None, 10.0])
    result = make_tuner(storage, suggester=suggester).run(n_trials=4)
    h = result.history
    assert [t.proposer for t in h] == ["llm", "fallback", "optuna", "llm"]
    assert h[0].params == {"x": 1.5} and h[0].rationale == "try 1.5"
    assert h[0].user_attrs["tokens_in"] == 10
    assert h[1].user_attrs[attrs.FALLBACK_REASON] == "answer did not parse"
    assert h[3].params == {"x": 10.0}
    assert suggester.seen == [0, 1, 2, 3]  # the history grows trial by trial


def test_agent_sampler_drops_into_a_plain_optuna_study():
    suggester = ScriptedSuggester([0.5, 2.5])
    sampler = AgentSampler(SPACE, suggester, fallback=optuna_sampler("random", seed=1))
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: (t.suggest_float("x", -10, 10) - 2) ** 2, n_trials=2)
    assert [t.params["x"] for t in study.trials] == [0.5, 2.5]


def test_an_empty_space_is_refused(storage):
    with pytest.raises(ConfigError, match="no parameters to tune"):
        Tuner(trainers.callable(quadratic), SearchSpace(), storage=storage)


@pytest.mark.parametrize("name", ["tpe", "random", "cmaes", "gp"])
def test_every_named_sampler_runs(storage, name):
    result = make_tuner(storage, sampler=name).run(n_trials=4)
    assert result.n_finished == 4


def test_unknown_sampler_is_refused(storage):
    with pytest.raises(ConfigError, match="Did you mean 'tpe'"):
        _ = make_tuner(storage, sampler="tpf").study


def test_a_bug_in_the_suggester_stops_the_search_instead_of_failing_every_trial(storage):
    def broken(space, history):
        raise AttributeError("'Suggester' object has no attribute 'k'")

    with pytest.raises(AttributeError, match="no attribute 'k'"):
        make_tuner(storage, suggester=broken).run(n_trials=10)
    [trial] = History.from_study(make_tuner(storage).study)
    assert trial.state == "fail" and "AttributeError" in trial.error["message"]


def test_plateau_rule_stops_when_trials_stop_improving(storage):
    def flat(config, report):
        return 1.0 if config["x"] != 2.0 else 0.5

    tuner = make_tuner(storage, fn=flat)
    tuner.study.enqueue_trial({"x": 2.0})  # the best comes first; nothing beats it
    result = tuner.run(n_trials=50, patience=4)
    assert result.n_finished == 5
    assert result.stop_reason == "plateau: 4 finished trials without an improvement of 0 or more"


def test_min_delta_ignores_tiny_improvements(storage):
    values = iter([1.0, 0.9999, 0.9998, 0.9997, 0.5])

    def slowly(config, report):
        return next(values)

    result = make_tuner(storage, fn=slowly).run(n_trials=5, patience=3, min_delta=0.01)
    assert result.n_finished == 4 and result.stop_reason.startswith("plateau: 3 finished")


def test_time_budget_counts_what_earlier_runs_spent(storage):
    import time as _time

    def slow(config, report):
        _time.sleep(0.3)
        return (config["x"] - 2.0) ** 2

    first = make_tuner(storage, fn=slow).run(n_trials=100, timeout=1.0)
    assert first.stop_reason == "time budget of 1 s used" and 2 <= first.n_finished <= 5
    again = make_tuner(storage, fn=slow).run(n_trials=100, timeout=1.0)
    assert again.n_new <= 1  # only what the first run left of the second
    third = make_tuner(storage, fn=slow).run(n_trials=100, timeout=1.0)
    assert third.n_new == 0 and third.stop_reason.startswith("time budget of 1 s already used")


@pytest.mark.parametrize("name", ["median", "successive-halving", "hyperband"])
def test_every_named_pruner_stops_bad_trials(storage, name):
    def slow_bad(config, report):
        loss = (config["x"] - 2.0) ** 2
        for epoch in range(1, 10):
            report(epoch, loss + 1.0 / epoch)
        return loss

    space = SearchSpace.of(x=Float(-10.0, 10.0), epochs=9)
    tuner = Tuner(trainers.callable(slow_bad), space, storage=storage, study=name, pruner=name,
                  sampler="random", display=None)
    result = tuner.run(n_trials=30)
    pruned = [t for t in result.history if t.state == "pruned"]
    assert pruned and any(len(t.curve) < 9 for t in pruned), name  # stopped before the end
    if name == "hyperband":
        assert tuner.pruner._max_resource == 9  # the trials' epoch budget


def test_a_commands_start_runs_without_the_cyclic_collector_until_its_first_trial(storage):
    """`tune run` / `tune worker` pause Python's cyclic collector from their start; the first
    trial's training resumes it, with what the start built frozen (runtime.startup). A command
    that ends before any trial resumes it too, and a program that never paused it is untouched."""
    import gc

    from tunepilot.runtime import startup

    seen: list[bool] = []

    def train(config, report):
        seen.append(gc.isenabled())
        return quadratic(config, report)

    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    try:
        with startup.until_first_trial():
            assert not gc.isenabled()
            make_tuner(storage, train).run(n_trials=2)
            assert gc.isenabled() and gc.get_freeze_count() > frozen
        assert seen == [True, True] and gc.isenabled()
        with startup.until_first_trial():  # a command that stops before any trial
            assert not gc.isenabled()
        assert gc.isenabled()
        startup.end()  # with no `begin`: nothing
        assert gc.isenabled()
    finally:
        gc.unfreeze()
        gc.enable()
