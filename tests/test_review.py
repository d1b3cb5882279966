"""The `review` strategy, the LLM's time share, and what the whole history says.

The model is a scripted OpenAI-compatible server on loopback, so every turn goes through the
real client, structured-output request and parsing.
"""

from __future__ import annotations

import json
import re

import pytest
from langchain_openai import ChatOpenAI

from tests.conftest import quadratic
from tests.llm_server import ScriptedLLMServer
from tunepilot import Categorical, Float, Int, SearchSpace, Tuner, trainers
from tunepilot.memory import History, TrialRecord, readable
from tunepilot.memory.history import LLMCall, Review
from tunepilot.memory.insights import insights
from tunepilot.proposers.review import Reviewer

SPACE = SearchSpace.of(x=Float(-10.0, 10.0), opt=Categorical(["adam", "sgd"]))


def chat(server: ScriptedLLMServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test",
                      max_retries=0, timeout=10)


def accept(request: dict) -> str:
    """Accepts every candidate, as `{"decision": "accept"}` alone; opens a study with no
    configs of its own."""
    if "configs" in json.dumps(request.get("response_format") or {}):
        return json.dumps({"configs": [], "rationale": "Nothing known about this task."})
    return json.dumps({"decision": "accept",
                       "rationale": "The candidate sits inside the region TPE found good."})


def search(llm=None, strategy="auto", sampler="tpe", n=14, **kw):
    tuner = Tuner(trainers.callable(quadratic), SPACE, storage="sqlite:///:memory:", study="r",
                  llm=llm, strategy=strategy, sampler=sampler, pruner="none", display=None,
                  **kw)
    return tuner.run(n_trials=n).history


@pytest.mark.parametrize("sampler", ["tpe", "cmaes"])
def test_a_model_that_accepts_everything_leaves_the_samplers_search_unchanged(sampler):
    alone = search(sampler=sampler)
    with ScriptedLLMServer(accept) as server:
        reviewed = search(chat(server), "review", sampler=sampler, llm_time_share=1.0)
    assert [t.params for t in reviewed] == [t.params for t in alone]
    # Asked for an opening (14 trials: 1 config), then on every trial; it changed nothing.
    assert len(server.requests) == 15
    assert all(t.proposer == "optuna" and t.review.verdict == "accepted" for t in reviewed)
    assert reviewed[5].review.candidate == reviewed[5].params
    assert reviewed[5].rationale.startswith("The candidate sits")
    # The prompt showed the candidate and the sampler's state.
    prompt = server.requests[-1]["messages"][-1]["content"]
    name = "TPE" if sampler == "tpe" else "CMA-ES"
    assert f"{name} proposes: x=" in prompt
    assert ("good' group" if sampler == "tpe" else "CMA-ES generation") in prompt


def test_overrides_are_capped_at_the_configured_share():
    n = {"calls": 0}

    def override(request: dict) -> str:
        n["calls"] += 1
        return json.dumps({"decision": "override",
                           "config": {"x": -9.0 + 0.7 * n["calls"], "opt": "sgd"},
                           "rationale": "A point far from the candidate tests a new region."})

    with ScriptedLLMServer(override) as server:
        history = search(chat(server), "review", n=20, llm_time_share=1.0,
                         max_override_share=0.25, opening=0)
    overrides = [t for t in history if t.review and t.review.verdict == "override"]
    assert len(overrides) == 5  # 25% of 20
    assert all(t.proposer == "llm" and t.review.candidate != t.params for t in overrides)
    # Once its share was spent, the model was not asked at all: the sampler proposed alone.
    # (An override that repeats one of the sampler's trials is refused and asked again.)
    retries = sum(len(t.llm.errors) for t in history if t.llm)
    assert len(server.requests) == 5 + retries
    assert sum(t.proposer == "optuna" and t.review is None for t in history) == 15


def test_the_llms_time_share_is_capped_and_the_summary_says_so():
    from tunepilot.agent.results import TuneResult  # noqa: F401  (the summary's input)
    from tunepilot.ui.display import summary_lines

    with ScriptedLLMServer(accept) as server:
        # The first turn is slow; trials take ~0 s (a fraction of a second on a loaded machine:
        # a 0.4 s turn fell under the 20% cap after 5 such trials)
        server.enqueue(accept({}), delay=2.0)
        tuner = Tuner(trainers.callable(quadratic), SPACE, storage="sqlite:///:memory:",
                      study="t", llm=chat(server), strategy="review", pruner="none",
                      display=None, llm_time_share=0.2)
        result = tuner.run(n_trials=6)
    skipped = [t for t in result.history if t.llm_skipped]
    assert len(server.requests) == 1 and len(skipped) == 5
    assert "cap of 20%" in skipped[0].llm_skipped
    text = "\n".join(summary_lines(result))
    assert re.search(r"LLM: asked on 1 trial .*5 turns went to the sampler past its share",
                     text, re.S), text


def test_a_first_turn_expected_to_cost_more_than_the_share_is_not_taken():
    """The embedded model's first turn is priced before it is measured (`first_turn_s`): on
    trials too short to pay for it, the sampler takes every turn; once the search's wall time
    can carry it, the model is asked."""
    import time

    from tunepilot.proposers.llm_suggester import LLMSuggester
    from tunepilot.ui.display import summary_lines

    def slow(config, report):
        time.sleep(0.1)
        return quadratic(config, report)

    for first_turn_s, asked in ((5.0, False), (0.1, True)):
        with ScriptedLLMServer(accept) as server:
            llm = LLMSuggester(chat(server), model_name="m", task="t", n_trials=8,
                               first_turn_s=first_turn_s)
            tuner = Tuner(trainers.callable(slow), SPACE, storage="sqlite:///:memory:",
                          study="f", suggester=Reviewer(llm, llm_time_share=0.2),
                          pruner="none", display=None)
            result = tuner.run(n_trials=8)
        first = result.history[0]
        assert first.llm_skipped and "expected to take ~" in first.llm_skipped, first
        assert bool(server.requests) is asked, (first_turn_s, len(server.requests))
        if not asked:
            assert all(t.llm_skipped and t.proposer == "optuna" for t in result.history)
            text = "\n".join(summary_lines(result))
            assert "8 turns went to the sampler past its share" in text, text


def test_reviewer_asks_only_while_it_may_still_override():
    assert [Reviewer.allowed(n, 0.3) for n in (1, 3, 4, 10, 20)] == [1, 1, 1, 3, 6]
    assert Reviewer.allowed(50, 0.0) == 0
    # A fixed share is the share, whatever the record; overrides count over the last WINDOW.
    r = Reviewer(llm=None, max_override_share=0.25)  # type: ignore[arg-type]
    assert r.share(History(())) == 0.25
    over = [TrialRecord(number=i, state="complete", params={"x": float(i)}, value=1.0,
                        proposer="llm", review=Review("override", "TPE", {}))
            for i in range(5)]
    rest = [TrialRecord(number=i, state="complete", params={"x": float(i)}, value=1.0,
                        proposer="optuna") for i in range(5, 40)]
    assert r.overrides_left(History(tuple(over + rest[:14]))) == 0  # 5 of the last 20
    assert r.overrides_left(History(tuple(over + rest[:15]))) == 1  # #0 left the window


# --- rationales a person can read ------------------------------------------------------------

@pytest.mark.parametrize("text,ok", [("1.1.1,", False), ("laser-over-bias-1.0", False),
                                     ("1.0.0.1", False), ("...", False),
                                     ("Lower the rate: the last two curves rose.", True)])
def test_readable_rationales(text, ok):
    assert readable(text) is ok


def test_a_junk_rationale_reads_as_the_kind_of_proposal_and_stays_in_the_record():
    t = TrialRecord(3, "complete", {"x": 1.0}, 1.0, proposer="llm",
                    llm=LLMCall(model="m", rationale="1.1.1,"),
                    review=Review("override", "TPE", {"x": 2.0}))
    assert t.why == "overrode TPE's candidate (no reason given in words)"
    assert t.rationale == "1.1.1,"  # kept as written for the log
    plain = TrialRecord(4, "complete", {"x": 1.0}, 1.0, proposer="llm",
                        llm=LLMCall(model="m", rationale="laser-over-bias-1.0"))
    assert plain.why == "proposed by the LLM (no reason given in words)"


def test_a_trials_line_reads_small_losses_its_own_time_and_whole_words():
    """Losses near 1e-5 are not all 0.0000; a trial's time is the trainer's, the LLM's turn
    beside it; `tune show`'s note ends at a word."""
    from rich.console import Console

    from tunepilot.memory.history import TrainInfo
    from tunepilot.ui.display import trial_line, trials_table

    why = ("Lower the learning rate by a factor of three because the last two curves rose "
           "sharply at the end")
    t = TrialRecord(3, "complete", {"x": 1.0}, 1.234e-5, proposer="llm", duration_s=25.4,
                    train=TrainInfo(wall_time_s=0.4), llm=LLMCall(model="m", latency_s=25.0,
                                                                 rationale=why))
    other = TrialRecord(4, "complete", {"x": 2.0}, 2.5e-5, proposer="optuna", duration_s=0.3)
    stopped = TrialRecord(5, "complete", {"x": 3.0}, 3e-5, curve=(3e-5, 4e-5), proposer="optuna",
                          train=TrainInfo(wall_time_s=0.2,
                                          stopped_early={"epoch": 2, "best_epoch": 1}))
    pruned = TrialRecord(6, "pruned", {"x": 4.0}, None, curve=(0.5, 0.4), proposer="optuna")
    history = History(trials=(t, other, stopped, pruned))
    line = trial_line(t, history)
    assert "1.234e-05" in line and "best 1.234e-05 (#3)" in line and "0.0000" not in line
    assert "  0.4s +25.0s LLM" in line and "25.4" not in line
    assert "0.3s" in trial_line(other, history)  # no trainer figure: the trial's own time
    console = Console(width=200, record=True)
    console.print(trials_table(history, "s"))
    shown = console.export_text()
    assert "Lower the learning rate by a factor of three because the ..." in shown
    # tune show says what the trial's line said: where it stopped, and where it was pruned.
    assert "stopped at epoch 2, best epoch 1" in trial_line(stopped, history)
    assert "stopped at epoch 2, best epoch 1" in shown and "pruned@2" in shown, shown


# --- what the whole history says -------------------------------------------------------------

def test_insights_name_importance_ranges_and_an_lr_pressed_against_the_bound():
    space = SearchSpace.of(lr=Float(1e-5, 1e-1, log=True), width=Int(8, 512, log=True),
                           act=Categorical(["relu", "tanh"]))

    def loss(c, report):  # lower with higher lr, all the way to the bound; width matters little
        return -c["lr"] * 10 + 0.001 * (c["width"] / 512) + (0.0 if c["act"] == "relu" else 0.3)

    # TPE's search (the insights' subject, not the sampler's): it presses lr to the bound
    tuner = Tuner(trainers.callable(loss), space, storage="sqlite:///:memory:", study="i",
                  pruner="none", display=None, sampler="tpe")
    tuner.run(n_trials=40)
    found = insights(History.from_study(tuner.study), space, tuner.study)
    assert set(found.importance) == {"lr", "width", "act"}
    assert max(found.importance, key=found.importance.get) in ("lr", "act")
    assert "lr" in found.ranges and "(space 1e-05 to 0.1)" in found.ranges["lr"]
    assert any("lr at the upper bound of the space (0.1)" in a for a in found.alerts), found
    lines = found.lines()
    assert lines[0].startswith("Importance (Optuna PED-ANOVA, from ")


def test_insights_stay_quiet_on_a_young_study():
    found = insights(History(), SPACE)
    assert found.lines() == []
    assert repr(found) == ("Nothing to say yet from 0 complete trials (importance from 10, the "
                           "best 20% from 5).")


def _bound_study(storage: str):
    space = SearchSpace.of(lr=Float(1e-5, 1e-1, log=True), width=Int(8, 512, log=True))

    def loss(c, report):
        return -c["lr"] * 10 + 0.001 * (c["width"] / 512)

    tuner = Tuner(trainers.callable(loss), space, storage=storage, study="bound", pruner="none",
                  display=None, settings={"space": space.model_dump(mode="json")}, sampler="tpe")
    tuner.run(n_trials=30)
    return tuner


def test_the_faces_show_the_alerts_too(tmp_path):
    from tests.conftest import run_tune
    from tunepilot.ui.notebook import NotebookDisplay
    from tunepilot.ui.report import render_html

    tuner = _bound_study(f"sqlite:///{tmp_path / 's.db'}")
    alert = "lr at the upper bound of the space (0.1)"
    assert any(alert in a for a in tuner.insights().alerts)
    # A notebook shows the lines `tune show` prints, not a dataclass.
    assert repr(tuner.insights()) == "\n".join(tuner.insights().lines())
    assert alert in repr(tuner.insights())
    show = run_tune("show", "--storage", "sqlite:///s.db", "--study", "bound", cwd=tmp_path)
    assert show.returncode == 0, show.stderr
    assert "what the history says:" in show.stdout and alert in show.stdout
    assert "Importance (Optuna PED-ANOVA, from " in show.stdout and "trials): lr" in show.stdout
    page = render_html(tuner.study, History.from_study(tuner.study))
    assert "What the history says" in page and alert in page
    widget = NotebookDisplay()
    widget._history = History.from_study(tuner.study)
    assert alert in widget._html()


def test_an_override_without_a_reason_in_words_is_refused_and_the_candidate_runs():
    def junk(request: dict) -> str:
        return json.dumps({"decision": "override", "config": {"x": 7.5, "opt": "sgd"},
                           "rationale": "1.1.1,"})

    alone = search(n=4)
    with ScriptedLLMServer(junk) as server:
        history = search(chat(server), "review", n=4, llm_time_share=1.0)
    assert [t.params for t in history] == [t.params for t in alone]
    # Each refusal took its turn: it was asked on its share (30%: one of the first few).
    reviewed = [t for t in history if t.review is not None]
    assert reviewed and all(t.review.verdict == "refused" and t.proposer == "optuna"
                            for t in reviewed)
    assert all(t.proposer == "optuna" for t in history)
    assert len(reviewed) < len(history)
    assert history[0].user_attrs["review"]["override"] == {"x": 7.5, "opt": "sgd"}
    assert history[0].why == "an override refused, TPE's candidate ran (no reason given in words)"
    assert history[0].rationale == "1.1.1,"  # kept as written


def test_the_report_says_why_importance_is_missing_and_prints_the_best_config_readably():
    from tunepilot.ui.report import render_html

    tuner = Tuner(trainers.callable(quadratic), SPACE, storage="sqlite:///:memory:", study="p",
                  sampler="tpe", pruner="none", display=None)
    tuner.hint("x above 5 never helped")
    tuner.run(n_trials=5)
    history = History.from_study(tuner.study)
    page = render_html(tuner.study, history)
    assert ("Parameter importance needs at least 10 complete trials and 2 tuned parameters; "
            "this study has 5 complete trials of 2 tuned parameters.") in page
    x = history.best_trial.params["x"]
    assert f"<td>{x:.4g}</td>" in page and f"<td>{x!r}</td>" not in page
    assert "x above 5 never helped" in page  # the person's hints are in it
    tuner.run(n_trials=12)
    page = render_html(tuner.study, History.from_study(tuner.study))
    assert "Parameter importance is drawn from" not in page
    assert "Parameter importance (PED-ANOVA)" in page


def test_the_candidate_line_names_the_values_tpe_explores_outside_its_good_group():
    import optuna

    from tunepilot.proposers.samplers import describe as describe_sampler

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for i in range(12):  # x from -5.5 to 5.5; the good group (the best 2) sits near x = 2
        study.enqueue_trial({"x": -5.5 + i, "opt": "adam" if i % 2 else "sgd"})
    study.optimize(lambda t: (t.suggest_float("x", -10, 10) - 2) ** 2
                   + (t.suggest_categorical("opt", ["adam", "sgd"]) == "sgd"), n_trials=12)
    tpe = optuna.samplers.TPESampler(seed=0)
    dists = SPACE.distributions()
    far = describe_sampler(tpe, study, SPACE, dists, {"x": 9.0, "opt": "adam"})
    assert far[0].startswith("TPE draws near its 'good' group, the best 2 of its 12 finished "
                             "trials")
    assert far[1] == ("the candidate's x=9 lie outside that span: TPE exploring, as it does on "
                      "purpose now and then")
    near = describe_sampler(tpe, study, SPACE, dists, {"x": 1.7, "opt": "adam"})
    assert len(near) == 1, near


def test_tpe_s_start_up_and_good_group_are_counted_over_pruned_trials_as_optuna_counts():
    """Optuna's TPE leaves its random start-up after 10 finished trials, pruned ones included,
    and sizes its good group by them: a study of 6 complete and 8 pruned trials is modelled,
    and the prompt must not call its candidate a random draw."""
    import optuna
    from optuna.trial import TrialState, create_trial

    from tunepilot.proposers.samplers import describe as describe_sampler

    study = optuna.create_study()
    dists = SPACE.distributions()
    for i in range(14):
        params = {"x": -6.5 + i, "opt": "adam"}
        if i % 7 < 3:  # 6 complete
            study.add_trial(create_trial(params=params, distributions=dists,
                                         value=(params["x"] - 2) ** 2))
        else:
            study.add_trial(create_trial(params=params, distributions=dists,
                                         state=TrialState.PRUNED, intermediate_values={1: 50.0}))
    tpe = optuna.samplers.TPESampler(seed=0)
    lines = describe_sampler(tpe, study, SPACE, dists, {"x": 0.0, "opt": "adam"})
    assert lines[0].startswith("TPE draws near its 'good' group, the best 2 of its 14 "
                               "finished trials (6 complete, 8 pruned), which spans: x "), lines
    young = optuna.create_study()
    for t in study.trials[:7]:  # 3 complete, 4 pruned
        young.add_trial(t)
    assert describe_sampler(tpe, young, SPACE, dists) == [
        "TPE samples at random until 10 trials are finished (7 are: 3 complete, 4 pruned): "
        "this candidate is a random draw"]
    # Optuna agrees: past its start-up the candidate is not the random sampler's draw.
    trial = study.ask()
    assert tpe.sample_relative(study, study._storage.get_trial(trial._trial_id),
                               {"x": dists["x"]}) != {}


def test_the_review_prompt_gives_the_best_trials_span_once():
    """With a TPE candidate the prompt gives TPE's good group (the span its candidate is read
    against), not also the insights' span of the best 20%; a proposal prompt keeps the latter."""
    import optuna
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from tunepilot.proposers.llm_suggester import LLMSuggester
    from tunepilot.proposers.samplers import describe as describe_sampler
    from tunepilot.proposers.suggest import Candidate

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: (t.suggest_float("x", -10, 10) - 2) ** 2
                   + (t.suggest_categorical("opt", ["adam", "sgd"]) == "sgd"), n_trials=14)
    history = History.from_study(study)
    llm = LLMSuggester(FakeListChatModel(responses=["{}"]), model_name="m", task="toy",
                       n_trials=20)
    tpe = optuna.samplers.TPESampler(seed=0)
    config = {"x": 1.0, "opt": "adam"}
    candidate = Candidate(config, "TPE", lambda: describe_sampler(
        tpe, study, SPACE, SPACE.distributions(), config))
    reviewing = llm.prompt(SPACE, history, candidate=candidate, overrides_left=3)
    assert "TPE draws near its 'good' group, the best 2 of its 14" in reviewing
    assert "complete trials (top" not in reviewing
    # The share is the one counted: 3 of 14 (Best 3 trials "(top 20%)" was said of 3 of 5 too).
    assert "Best 3 of 14 complete trials (top 21%) span: x " in llm.prompt(SPACE, history)
    young = Candidate(config, "TPE", lambda: ["TPE samples at random until 10 trials are "
                                               "finished (4 are): this candidate is a random draw"])
    assert "complete trials (top 21%) span" in llm.prompt(SPACE, history, candidate=young,
                                                          overrides_left=3)


def _far_corner():
    """A model that overrides every candidate with a config in the far corner of the space
    (each a little apart, so none repeats an earlier trial), with a reason in words."""
    n = {"calls": 0}

    def far(request: dict) -> str:
        n["calls"] += 1
        return json.dumps({"decision": "override",
                           "config": {"x": -10.0 + 0.4 * (n["calls"] % 12), "opt": "sgd"},
                           "rationale": "The far corner of the space deserves a closer look."})

    return far


def test_a_model_below_even_has_its_overrides_checked_by_the_samplers_model():
    """Its first overrides run (no record yet), lose and put it below even; from then on an
    override the engine's GP expects to lose even at best is refused: the candidate runs, the
    refusal is said and counts as the model's turn, and no trial is spent on it."""
    with ScriptedLLMServer(_far_corner()) as server:
        history = search(chat(server), "review", n=60, llm_time_share=1.0, opening=0, seed=1)
    ran = [t for t in history if t.proposer == "llm"]
    refused = [t for t in history if t.review and t.review.verdict == "refused"]
    assert ran and refused, [(t.number, t.proposer, t.review) for t in history]
    first_refused = refused[0].number
    assert all(t.number < first_refused for t in ran[:1])  # it had its say first
    for t in refused:
        assert t.proposer == "optuna" and dict(t.params) == dict(t.review.candidate)
        assert t.review.why.startswith("its record is below even, and the sampler's model "
                                       "expects "), t.review.why
        assert t.why.startswith("an override refused (its record is below even"), t.why
    # Fewer trials spent on it than it was asked for: the refusals took its turns instead.
    assert len(ran) < len(ran) + len(refused) <= 60 // 20 * 2 + 2
    from tunepilot.ui.display import why_line

    line = why_line(refused[0])
    assert line is not None and "refused (its record is below even" in line, line


def test_a_check_that_cannot_be_made_leaves_the_override_as_it_was(monkeypatch):
    from tunepilot.proposers import gp

    def broken(*args, **kwargs):
        raise RuntimeError("the GP could not be fitted")

    monkeypatch.setattr(gp, "rates_worse", broken)
    with ScriptedLLMServer(_far_corner()) as server:
        history = search(chat(server), "review", n=45, llm_time_share=1.0, opening=0, seed=1)
    assert not [t for t in history if t.review and t.review.verdict == "refused"]
    assert len([t for t in history if t.proposer == "llm"]) >= 2  # its probes ran


def test_a_model_its_calibration_put_below_even_is_not_asked_before_its_overrides_can_be_checked():
    from tests.test_opening import _calibrated
    from tunepilot.memory.calibrations import WORSE
    from tunepilot.proposers.gp import VET_MIN_TRIALS

    with ScriptedLLMServer(_far_corner()) as server:
        history = search(chat(server), "review", n=30, llm_time_share=1.0, seed=1,
                         calibration=_calibrated(WORSE, 1))
    asked = [t.number for t in history if t.review is not None]
    # No opening, no turn until VET_MIN_TRIALS trials are complete, then its probes, checked.
    assert all(t.opening is None for t in history)
    assert asked and min(asked) >= VET_MIN_TRIALS, asked
    assert all(t.review.verdict in ("refused", "overridden") for t in history
               if t.number in asked), [(t.number, t.review) for t in history]
