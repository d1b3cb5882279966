"""Every registered sampler with every registered pruner, on SQLite, a journal file and
PostgreSQL: a short search runs to its budget. A sampler that reads the study (the default reads
tunepilot's records) meets each pruner's view of it here (Hyperband hands samplers one bracket's
trials), so the next sampler or pruner cannot break another unseen."""

from __future__ import annotations

import pytest

from tests.conftest import server_url
from tunepilot import Float, SearchSpace, Tuner, trainers
from tunepilot.memory import History
from tunepilot.proposers import pruners, samplers

# Past the default's start-up (4 trials of a Latin hypercube for two parameters): its fifth
# trial is a GP draw, so the draws that read the whole history run under each pruner too.
TRIALS = 5
SPACE = SearchSpace.of(x=Float(-10.0, 10.0), y=Float(1e-3, 1.0, log=True), epochs=3)


def bowl(config, report):
    loss = (config["x"] - 2.0) ** 2 + abs(config["y"] - 0.1)
    for epoch in range(1, config["epochs"] + 1):
        report(epoch, loss + 1.0 / epoch)
    return loss


@pytest.fixture(params=["sqlite", "journal", "postgresql"])
def where(request, tmp_path, study_name):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'm.db'}"
    if request.param == "journal":
        return f"journal:{tmp_path / 'm.log'}"
    return server_url("postgresql")


@pytest.mark.parametrize("pruner", pruners.names())
@pytest.mark.parametrize("sampler", samplers.names())
def test_each_sampler_runs_with_each_pruner_on_each_storage(where, sampler, pruner, study_name):
    tuner = Tuner(trainers.callable(bowl), SPACE, storage=where, study=study_name,
                  sampler=sampler, pruner=pruner, seed=0, display=None, warm_start=False)
    result = tuner.run(n_trials=TRIALS)
    history = History.from_study(tuner.study)
    assert result.n_new == TRIALS, result.stop_reason
    assert [t.state for t in history if t.state not in ("complete", "pruned")] == [], [
        (t.number, t.state, t.error) for t in history]
    assert result.best_value is not None and result.best_value < 200
