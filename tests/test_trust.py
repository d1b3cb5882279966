"""Trust earned, not fixed: the LLM's track record (tunepilot/memory/trust.py) and the share of
overrides it earns in `review`, read from the study (so a resume and every worker see it)."""

from __future__ import annotations

import itertools
import json

import pytest

from tests.conftest import quadratic
from tests.llm_server import ScriptedLLMServer
from tests.test_review import SPACE, chat
from tunepilot import Tuner, trainers
from tunepilot.memory import History, TrialRecord, trust
from tunepilot.memory.history import Review
from tunepilot.proposers.review import WINDOW, Reviewer


def _t(number, proposer, value=None, state="complete", reason=None, override=False):
    review = Review("override", "TPE", {"x": 0.0}) if override else None
    return TrialRecord(number=number, state=state, params={"x": float(number)}, value=value,
                       proposer=proposer, fallback_reason=reason, review=review)


def _history(*trials):
    return History(tuple(trials))


# --- the rule ----------------------------------------------------------------------------------

def test_an_llm_trial_wins_when_it_beats_the_median_of_the_nearest_sampler_trials():
    sampler = [_t(i, "optuna", float(v)) for i, v in enumerate([9, 7, 5, 3, 1, 0])]
    # The median of #0-#5 is 4.0; #6 at 3.9 beats it, #7 at 4.1 does not.
    h = _history(*sampler, _t(6, "llm", 3.9), _t(7, "llm", 4.1))
    judged = trust.record(h).judged
    assert [(j.number, j.won) for j in judged] == [(6, True), (7, False)]
    assert judged[0].why == "beat the median (4) of #0 #1 #2 #3 #4 #5"


def test_a_tie_with_the_median_is_not_a_win():
    # A plateau: most of the sampler's trials and a config from the worst of the space all
    # read the majority-class loss; the model's trial at that loss did not beat anything.
    sampler = [_t(i, "optuna", v) for i, v in enumerate([0.37, 0.37, 0.03, 0.37, 0.37])]
    h = _history(*sampler, _t(5, "llm", 0.37), _t(6, "llm", 0.02))
    judged = trust.record(h).judged
    assert [(j.number, j.won) for j in judged] == [(5, False), (6, True)]
    assert judged[0].why.startswith("lost to the median (0.37)")


def test_only_the_ten_nearest_sampler_trials_count_before_or_after():
    # 30 sampler trials with losses falling as the search goes on; an LLM trial at #12 is
    # judged against #7-#11 and #13-#17 (the stage it ran at), not the whole study.
    trials = [_t(i, "optuna", 100.0 - i) for i in range(30) if i != 12]
    h = _history(*trials[:12], _t(12, "llm", 87.5), *trials[12:])
    (verdict,) = trust.record(h).judged
    assert verdict.why.endswith("#7 #8 #9 #10 #11 #13 #14 #15 #16 #17")
    assert verdict.won  # the median there is 88; the study's median (85) would have said no


def test_pruned_failed_and_invalid_count_against_an_outage_does_not_and_too_few_peers_wait():
    # #0 is the space's default (enqueued), not the sampler's; #3 and #4 are the sampler's.
    h = _history(_t(0, "enqueued", 1.0), _t(1, "llm", None, "pruned"), _t(2, "llm", None, "fail"),
                 _t(3, "fallback", 2.0, reason="no valid answer in 3 attempts; last: not JSON"),
                 _t(4, "fallback", 2.0, reason="LLM unreachable: connection refused"),
                 _t(5, "llm", 0.5), _t(6, "llm", None, "running"))
    record = trust.record(h)
    assert [(j.number, j.won, j.why) for j in record.judged] == [
        (1, False, "pruned"), (2, False, "failed"), (3, False, "no valid answer")]
    assert record.pending == 2  # #5: 2 sampler trials finished, 3 needed; #6 still running
    assert record.line(share=True) == (
        "LLM record: 2 of its trials judged, 0 beat the sampler's typical trial; 1 turn with "
        "no valid answer; 2 not judged yet; its record earns it 5% of the overrides")


def test_the_share_moves_with_the_record_between_a_floor_and_a_ceiling():
    def share(wins, losses):
        judged = [trust.Judged(i, i < wins, "") for i in range(wins + losses)]
        return trust.TrackRecord(tuple(judged)).share

    assert share(0, 0) == pytest.approx(0.3)  # no record: the published 30%
    assert share(0, 2) == trust.FLOOR  # two losses: a probe now and then
    assert share(6, 1) == pytest.approx(0.3 + 1.25 * (7 / 9 - 0.5))  # 65%
    assert share(10, 0) == trust.CEILING
    assert trust.TrackRecord().line() is None  # nothing proposed: nothing to say
    assert Reviewer.allowed(WINDOW, trust.FLOOR) == 1 and Reviewer.allowed(WINDOW, 0.8) == 16


# --- through the real path ---------------------------------------------------------------------

def _expert(good: bool):
    """A scripted model that overrides every candidate: near the optimum (x = 2) or far."""
    offsets = [0.0] + [s * 0.21 * k for k in range(1, 11) for s in (1, -1)]
    configs = itertools.product(offsets, ["adam", "sgd"])  # 42, none within 1% of another

    def answer(request: dict) -> str:
        dx, opt = next(configs)
        if "configs" in json.dumps(request["response_format"]):  # its opening: one config
            return json.dumps({"configs": [{"x": 2.0 + dx if good else -9.5 + abs(dx),
                                            "opt": opt}], "rationale": "Known to work."})
        return json.dumps({"decision": "override",
                           "config": {"x": 2.0 + dx if good else -9.5 + abs(dx), "opt": opt},
                           "rationale": "Published results put this setting among the best."})

    return answer


def _overrides(history, numbers=range(10_000)):
    return sum(1 for t in history if t.number in numbers and t.review
               and t.review.verdict == "override")


def _near_and_far(model, strategy):
    """40 trials of `strategy` with the scripted `model(good)`, near the optimum and far."""
    runs = {}
    for good in (True, False):
        with ScriptedLLMServer(model(good)) as server:
            tuner = Tuner(trainers.callable(quadratic), SPACE, storage="sqlite:///:memory:",
                          study="t", llm=chat(server), strategy=strategy, sampler="tpe",
                          pruner="none", display=None, seed=3)
            runs[good] = tuner.run(n_trials=40)
    return runs


def test_a_model_whose_overrides_win_earns_more_than_30_percent_and_one_that_loses_sits_out():
    runs = _near_and_far(_expert, "review")
    good, bad = (runs[True].history, runs[False].history)
    good_record, bad_record = trust.record(good), trust.record(bad)
    # Fixed at 30%, each would have overridden 12 of 40 trials.
    print(f"overrides of 40: near {_overrides(good)}, far {_overrides(bad)}; records "
          f"{good_record.line()} / {bad_record.line()}")
    assert _overrides(good) >= 16 and good_record.share >= 0.6, (_overrides(good), good_record)
    # The far one lost its first trial; below even, its later overrides were checked by the
    # sampler's model, which expected them to lose, so they were refused, not run.
    assert _overrides(bad) <= 4 and bad_record.share < trust.EVEN_SHARE / 3, (
        _overrides(bad), bad_record)
    refused = [t for t in bad if t.review and t.review.verdict == "refused"]
    assert refused and all(t.review.why.startswith("its record is below even") for t in refused)
    # Each trial it ran is judged: the near ones win, the far ones lose.
    assert good_record.wins >= 0.8 * len(good_record.judged)
    assert bad_record.wins == 0 and len(bad_record.judged) >= 1
    # The person sees the record at the end of the run.
    from tunepilot.ui.display import summary_lines

    text = "\n".join(summary_lines(runs[False]))
    assert f"LLM record: {len(bad_record.judged)} of its trials judged, 0 beat the sampler's " \
        f"typical trial" in text and f"its record earns it {bad_record.share:.0%} of the " \
        "overrides" in text, text
    assert f"{len(refused)} override{'s' if len(refused) != 1 else ''} refused" in text, text


def test_the_record_is_read_from_the_study_so_a_resume_keeps_it(tmp_path):
    storage = f"sqlite:///{tmp_path / 's.db'}"

    def run(n):
        with ScriptedLLMServer(_expert(False)) as server:
            return Tuner(trainers.callable(quadratic), SPACE, storage=storage, study="t",
                         llm=chat(server), strategy="review", sampler="tpe", pruner="none",
                         display=None).run(n_trials=n)

    first = run(20)
    record = trust.record(first.history)
    assert record.wins == 0 and record.share < 0.1, record  # one override in 20, lost
    second = run(30)  # ten more, by a new process's Tuner
    # The first run's losses hold: at most the floor's one probe in the last 20 trials.
    assert _overrides(second.history, range(20, 30)) <= 1
    assert _overrides(second.history, range(10, 30)) <= 2


def _proposer(good: bool):
    """A scripted model for `hybrid`: each of its turns proposes a config near the optimum
    (x = 2) or far from it."""
    offsets = [0.0] + [s * 0.21 * k for k in range(1, 11) for s in (1, -1)]
    configs = itertools.product(offsets, ["adam", "sgd"])

    def answer(request: dict) -> str:
        dx, opt = next(configs)
        config = {"x": 2.0 + dx if good else -9.5 + abs(dx), "opt": opt}
        if "configs" in json.dumps(request["response_format"]):  # its opening
            return json.dumps({"configs": [config], "rationale": "Known to work."})
        return json.dumps({"config": config, "rationale": "Published results put it first."})

    return answer


def test_hybrid_gives_a_model_that_wins_more_trials_and_one_that_loses_a_probe_a_window():
    runs = _near_and_far(_proposer, "hybrid")
    llm_trials = {good: [t.number for t in runs[good].history if t.proposer == "llm"]
                  for good in runs}
    print(f"LLM trials of 40: near {llm_trials[True]}, far {llm_trials[False]}")
    # The fixed rule it replaced (trials 0, 1, then every 4th) gave either 11 of 40.
    assert len(llm_trials[True]) >= 16, llm_trials[True]
    assert trust.record(runs[True].history).share >= 0.6
    # The far one: its first trials lose, then one probe per window of 20.
    assert len(llm_trials[False]) <= 5, llm_trials[False]
    assert not [n for n in llm_trials[False] if 5 <= n < 20], llm_trials[False]
    assert trust.record(runs[False].history).share == trust.FLOOR
