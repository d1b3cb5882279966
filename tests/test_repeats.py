"""The repeat rule on a whole study at once (`ConfigIndex`) agrees with the rule itself
(`same_config`), and a proposal's records are written in one transaction on a database."""

from __future__ import annotations

import random

import optuna
import pytest

from tunepilot import Categorical, Float, Int, SearchSpace
from tunepilot.memory import History, TrialRecord
from tunepilot.memory.records import set_trial_user_attrs
from tunepilot.memory.repeats import ConfigIndex, same_config
from tunepilot.memory.store import open_storage

SPACE = SearchSpace.of(lr=Float(1e-5, 1e-1, log=True), dropout=Float(0.0, 0.5),
                       width=Int(8, 512, log=True), act=Categorical(["relu", "tanh"]))


def _config(rng: random.Random, near: dict | None = None) -> dict:
    if near is not None and rng.random() < 0.5:  # close to a tried one: within or past 1%
        out = dict(near)
        out["lr"] = near["lr"] * rng.choice([1.0, 1.05, 1.2])
        out["dropout"] = near["dropout"] + rng.choice([0.0, 0.004, 0.02])
        if rng.random() < 0.2:
            out["width"] = near["width"] + 1
        return out
    return {"lr": 10 ** rng.uniform(-5, -1), "dropout": rng.uniform(0, 0.5),
            "width": rng.randint(8, 512), "act": rng.choice(["relu", "tanh"])}


def test_the_index_finds_what_the_rule_finds():
    rng = random.Random(0)
    trials: list[TrialRecord] = []
    for i in range(300):
        params = _config(rng, trials[-1].params if trials else None)
        if i % 37 == 5:
            params = {k: v for k, v in params.items() if k != "act"}  # another set of keys
        if i % 41 == 3:
            params["dropout"] = float("nan")  # not a finite number: compared as it is
        trials.append(TrialRecord(i, "complete", params, 1.0))
    index = ConfigIndex(trials, SPACE)
    found = 0
    for _ in range(400):
        query = _config(rng, rng.choice(trials).params)
        expected = next((t for t in trials if same_config(t.params, query, SPACE)), None)
        assert index.first(query) is expected, query
        found += expected is not None
    assert 50 < found < 350  # both outcomes were tested, many times


def test_history_with_config_uses_the_rule(storage):
    study = optuna.create_study(storage=storage)
    study.enqueue_trial({"x": 1.0})
    for x in (1.0, 3.0):
        study.add_trial(optuna.trial.create_trial(
            params={"x": x}, distributions={"x": optuna.distributions.FloatDistribution(0, 10)},
            value=x))
    space = SearchSpace.of(x=Float(0.0, 10.0))
    history = History.from_study(study)
    assert history.with_config({"x": 1.05}, space).number == 1  # the queued #0 is no repeat
    assert history.with_config({"x": 3.2}, space) is None
    assert history.with_config({"x": 3.05}, space).number == 2


def test_records_are_one_transaction_on_a_database(any_storage):
    import sqlalchemy

    storage = open_storage(any_storage, heartbeat_s=None)
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    values = {"proposer": "llm", "llm": {"model": "m", "tokens_in": 3}, "rationale": "why",
              "proposed": {"x": 1.5}}
    engine = getattr(getattr(storage, "_backend", None), "engine", None)
    commits: list[int] = []
    if engine is not None:
        sqlalchemy.event.listen(engine, "commit", lambda conn: commits.append(1))
    set_trial_user_attrs(storage, trial._trial_id, values)
    if engine is not None:  # counted before the read below, which commits its own session
        assert len(commits) == 1
    assert storage.get_trial_user_attrs(trial._trial_id) == values
    set_trial_user_attrs(storage, trial._trial_id, {"proposer": "optuna", "extra": [1, 2]})
    assert storage.get_trial_user_attrs(trial._trial_id) == {**values, "proposer": "optuna",
                                                             "extra": [1, 2]}
    study.tell(trial, 1.0)
    with pytest.raises(RuntimeError):  # a finished trial takes no more, as Optuna's own rule
        set_trial_user_attrs(storage, trial._trial_id, {"a": 1, "b": 2})
