"""The LLM's zero-shot opening: on a new study one turn asks the model for its first configs,
which run in place of the sampler's first draws and are judged like its other trials
(tunepilot/agent/opening.py, tunepilot/memory/trust.py). Through a real loopback
OpenAI-compatible server."""

from __future__ import annotations

import json

import pytest

from tests.conftest import quadratic
from tests.llm_server import ScriptedLLMServer
from tests.test_review import SPACE, chat
from tunepilot import Tuner, trainers
from tunepilot.agent.observer import Observer
from tunepilot.memory import trust


class Lines(Observer):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, text: str) -> None:
        self.lines.append(text)


def _model(opening: list[dict] | str):
    """Answers the opening turn with `opening` (configs, or raw text), and every review with
    an acceptance, as `{"decision": "accept"}` alone."""
    def answer(request: dict) -> str:
        schema = request["response_format"]["json_schema"]["schema"]
        if "configs" in schema["properties"]:
            return opening if isinstance(opening, str) else json.dumps(
                {"configs": opening, "rationale": "Settings known to work on such problems."})
        return json.dumps({"decision": "accept", "rationale": "The candidate looks sound."})

    return answer


def _tuner(server, storage="sqlite:///:memory:", display=None, **kw):
    return Tuner(trainers.callable(quadratic), SPACE, storage=storage, study="t",
                 llm=chat(server), strategy="review", sampler="tpe", pruner="none",
                 display=display, seed=3, **kw)


NEAR = [{"x": 2.0, "opt": "adam"}, {"x": 2.3, "opt": "adam"}, {"x": 1.6, "opt": "sgd"}]
FAR = [{"x": -10.0, "opt": "adam"}, {"x": -9.7, "opt": "sgd"}, {"x": -9.4, "opt": "sgd"}]


def test_the_opening_runs_config_by_config_while_each_beats_the_samplers_and_wins_its_record():
    lines = Lines()
    with ScriptedLLMServer(_model(NEAR)) as server:
        result = _tuner(server, display=lines).run(n_trials=30)  # a tenth: 3 configs
        (first,) = [r for r in server.requests if "configs" in json.dumps(r)][:1]
    h = result.history
    # No declared default: its first config is trial 0, judged once three of the sampler's
    # draws finished (trials 1-3; beating one draw is luck, as `memory.trust` judges); it beat
    # their median, so the next config runs, and beat it again, so the last.
    assert [(t.proposer, t.opening) for t in h.trials[:7]] == [
        ("llm", 1), ("optuna", None), ("optuna", None), ("optuna", None), ("llm", 2),
        ("llm", 3), ("optuna", None)]
    assert [dict(h[n].params) for n in (0, 4, 5)] == NEAR
    # One turn asked for all three: its cost sits on the first trial, once.
    assert h.trials[0].llm.latency_s is not None and h.trials[4].llm.latency_s is None
    assert h.trials[4].llm.model == "gpt-4o-mini"
    assert h.opening == {"asked": 3, "model": "gpt-4o-mini", "taken": 3, "error": None,
                         "held": [], "rationale": "Settings known to work on such problems."}
    system = first["messages"][0]["content"]
    assert "first 3 configurations" in system and "Propose the first 3" in \
        first["messages"][1]["content"]
    # Judged against the sampler's trials near them: all three won, so the model's share of
    # overrides grew past the 30% of no record.
    record = trust.record(h)
    assert [j.number for j in record.judged if j.won][:3] == [0, 4, 5]
    assert record.share > 0.5, record
    said = "LLM opening: 3 of 3 configs asked for, the first as trial 0; its other 2 run one at"
    assert any(line.startswith(said) for line in lines.lines), lines.lines


def test_a_bad_opening_spends_one_trial_and_says_the_rest_are_not_run():
    lines = Lines()
    with ScriptedLLMServer(_model(FAR)) as server:
        result = _tuner(server, display=lines).run(n_trials=30)
    h = result.history
    assert [t.number for t in h if t.opening is not None] == [0]
    assert h.opening["held"] == [] and h.opening["not_run"] == 2
    assert [(j.number, j.won) for j in trust.record(h).judged][:1] == [(0, False)]
    said = [line for line in lines.lines if "did not beat" in line]
    assert len(said) == 1 and said[0].startswith(
        "LLM opening: its config 1 (trial 0: 144, against their median "), said
    assert "its other 2 configs are not run" in said[0]


def test_with_a_declared_default_the_opening_is_judged_against_it_and_the_first_draws():
    from tunepilot import Categorical, Float, SearchSpace

    space = SearchSpace.of(x=Float(-10.0, 10.0, default=5.0),
                           opt=Categorical(["adam", "sgd"], default="adam"))
    with ScriptedLLMServer(_model(NEAR)) as server:
        good = Tuner(trainers.callable(quadratic), space, storage="sqlite:///:memory:",
                     study="t", llm=chat(server), strategy="review", sampler="tpe",
                     pruner="none", display=None, seed=3).run(n_trials=30).history
    with ScriptedLLMServer(_model(FAR)) as server:
        bad = Tuner(trainers.callable(quadratic), space, storage="sqlite:///:memory:",
                    study="t", llm=chat(server), strategy="review", sampler="tpe",
                    pruner="none", display=None, seed=3).run(n_trials=30).history
    # The default (x = 5: 9) is trial 0 and the first config trial 1, judged against the
    # default and the sampler's next two draws (their median: 93.7); each config near the
    # optimum beats it in turn.
    assert [t.opening for t in good.trials[:7]] == [None, 1, None, None, 2, 3, None]
    # A config far from it (x = -10: 144) loses, and the sampler takes the other turns.
    assert [t.opening for t in bad.trials[:7]] == [None, 1, None, None, None, None, None]
    assert bad.opening["not_run"] == 2


def test_an_opening_with_no_valid_answer_counts_once_and_the_sampler_starts_alone():
    lines = Lines()
    with ScriptedLLMServer(_model("I would start with a learning rate of 3e-4.")) as server:
        result = _tuner(server, display=lines).run(n_trials=12)  # 1 config asked for
        asked = sum(1 for r in server.requests if "configs" in json.dumps(r))
    h = result.history
    assert asked == 3  # the turn's attempts, then no more
    assert all(t.opening is None for t in h) and h.trials[0].proposer == "optuna"
    assert h.opening["taken"] == 0 and h.opening["error"].startswith("no valid answer")
    assert [j.why for j in trust.record(h).judged][:1] == ["no valid answer"]
    assert any(line.startswith("LLM opening: none (no valid answer in 3 attempts")
               for line in lines.lines), lines.lines


def test_a_model_that_opens_with_nothing_leaves_the_samplers_configs_as_they_were():
    runs = []
    for opening in (None, 0):  # asked (and answers no configs), and not asked
        with ScriptedLLMServer(_model([])) as server:
            runs.append(_tuner(server, opening=opening).run(n_trials=12))
    asked, alone = ([dict(t.params) for t in r.history] for r in runs)
    assert asked == alone


def test_the_opening_is_asked_once_per_study_and_never_under_ten_trials(tmp_path):
    storage = f"sqlite:///{tmp_path / 's.db'}"
    with ScriptedLLMServer(_model(NEAR)) as server:
        _tuner(server, storage=storage).run(n_trials=5)  # under 10 trials: no opening
        _tuner(server, storage=storage).run(n_trials=30)  # a resumed study: not new
        assert not any("configs" in json.dumps(r) for r in server.requests)
        fresh = Tuner(trainers.callable(quadratic), SPACE, storage=storage, study="u",
                      llm=chat(server), strategy="review", sampler="tpe", pruner="none",
                      display=None, opening=2)
        fresh.run(n_trials=3)  # asked for 2 by name, budget or not
        fresh.run(n_trials=6)
        assert sum(1 for r in server.requests if "configs" in json.dumps(r)) == 1


def test_an_opening_config_out_of_the_space_or_repeated_is_sent_back_with_the_reason():
    answers = iter([
        json.dumps({"configs": [{"x": 50.0, "opt": "adam"}], "rationale": "big"}),
        json.dumps({"configs": [{"x": 1.0, "opt": "adam"}, {"x": 1.0, "opt": "adam"}],
                    "rationale": "twice"}),
        json.dumps({"configs": [{"x": 1.0, "opt": "adam"}, {"x": 3.0, "opt": "adam"}],
                    "rationale": "Two points either side of the usual optimum."}),
    ])
    with ScriptedLLMServer(lambda request: next(answers)) as server:
        result = _tuner(server, opening=2).run(n_trials=6)
        prompts = [r["messages"][1]["content"] for r in server.requests[:3]]
    assert "Your previous answer was rejected" in prompts[1]
    assert "'x': 50 is outside [-10, 10]" in prompts[1]
    assert "repeats another one" in prompts[2]
    assert [dict(result.history[n].params) for n in (0, 4)] == [  # the sampler's between
        {"x": 1.0, "opt": "adam"}, {"x": 3.0, "opt": "adam"}]


@pytest.mark.parametrize("n_trials, k", [(5, 0), (10, 1), (29, 2), (30, 3), (200, 5)])
def test_the_openings_size_is_a_tenth_of_the_budget_at_most_five(n_trials, k):
    from tunepilot.agent.opening import opening_size

    assert opening_size(n_trials) == k


def _calibrated(verdict: str, wins: int):
    from tunepilot.memory.calibrations import Calibration

    return Calibration(model="gpt-4o-mini", endpoint="", prompt_version="p", date="2026-12-06",
                       verdict=verdict, summary=f"{wins} of 12 judged trials won",
                       wins=wins, judged=12, tasks=2, seeds=3)


def test_a_model_its_calibration_found_not_worth_its_turns_opens_nothing():
    from tunepilot.memory.calibrations import WORSE, WORTH

    lines = Lines()
    with ScriptedLLMServer(_model(NEAR)) as server:
        result = _tuner(server, display=lines, calibration=_calibrated(WORSE, 2)).run(
            n_trials=30)
        asked = sum(1 for r in server.requests if "configs" in json.dumps(r))
    h = result.history
    assert asked == 0 and all(t.opening is None for t in h)
    assert h.opening["taken"] == 0 and h.opening["skipped"] == WORSE
    said = [line for line in lines.lines if line.startswith("LLM opening: none; calibration")]
    assert len(said) == 1 and "the sampler's draws open" in said[0], lines.lines
    # One the calibration found worth them opens as a model with no record does.
    with ScriptedLLMServer(_model(NEAR)) as server:
        worth = _tuner(server, calibration=_calibrated(WORTH, 9)).run(n_trials=30).history
    assert [t.number for t in worth if t.opening is not None][:1] == [0]


def test_the_samplers_start_up_design_is_drawn_whole_around_the_models_opening():
    """The opening's trial 0 is the model's; the default sampler's Latin hypercube still runs
    its every row (trials 1-4: each quarter of x's range once, each choice twice), not rows 1-3
    and the next design's first."""
    import math

    from tunepilot.proposers import auto

    with ScriptedLLMServer(_model(FAR)) as server:  # its first config loses: one trial only
        h = Tuner(trainers.callable(quadratic), SPACE, storage="sqlite:///:memory:", study="t",
                  llm=chat(server), strategy="review", pruner="none", display=None,
                  seed=3).run(n_trials=12).history
    n = auto.startup(SPACE)
    assert [t.opening for t in h.trials[:n + 1]] == [1] + [None] * n
    design = h.trials[1:n + 1]
    assert sorted(math.floor((t.params["x"] + 10) / 20 * n) for t in design) == list(range(n))
    assert sorted(t.params["opt"] for t in design) == ["adam", "adam", "sgd", "sgd"]
