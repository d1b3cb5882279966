"""Ctrl-C and SIGTERM that never cut a storage call in half, nor Optuna's start of a trial.

The signals are real (`signal.raise_signal`, delivered to this process's handler); the storage
is Optuna's in-memory one with a call that the signal reaches midway, as a person's Ctrl-C
reached a SQLite write (which then kept the file's write lock for 30 s).
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import optuna
import pytest
import typer
from optuna.storages import InMemoryStorage

from tunepilot.errors import Terminated
from tunepilot.memory import held
from tunepilot.runtime import interrupts


class SignalledMidCall(InMemoryStorage):
    """A storage whose attribute writes receive `signum` halfway through (and record the
    writes that got past it)."""

    signum = signal.SIGINT

    def __init__(self) -> None:
        super().__init__()
        self.written: list[str] = []

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        signal.raise_signal(self.signum)
        self.written.append(key)
        super().set_trial_user_attr(trial_id, key, value)


def a_trial(storage: InMemoryStorage) -> int:
    study = optuna.create_study(storage=storage)
    return storage.create_new_trial(study._study_id)


@pytest.mark.parametrize(("signum", "raised"), [(signal.SIGINT, KeyboardInterrupt),
                                               (signal.SIGTERM, Terminated)])
def test_a_signal_mid_call_is_raised_once_the_call_has_written(signum, raised):
    cls: Any = held._held_class(type("Signalled", (SignalledMidCall,), {"signum": signum}))
    storage = cls()
    trial_id = a_trial(storage)
    with interrupts.raising(), pytest.raises(raised):
        storage.set_trial_user_attr(trial_id, "note", "kept")
    assert storage.written == ["note"]
    assert storage.get_trial(trial_id).user_attrs == {"note": "kept"}


def test_without_the_hold_the_same_signal_cuts_the_write_short():
    """What the hold is for: the same call, unheld, loses its write."""
    storage = SignalledMidCall()
    trial_id = a_trial(storage)
    with interrupts.raising(), pytest.raises(KeyboardInterrupt):
        storage.set_trial_user_attr(trial_id, "note", "lost")
    assert storage.written == [] and storage.get_trial(trial_id).user_attrs == {}


def test_an_interrupt_held_from_the_trials_creation_is_raised_as_its_objective_starts():
    ran: list[int] = []
    with interrupts.raising():
        interrupts.hold()  # as the sampler's before_trial does, once Optuna created the trial
        signal.raise_signal(signal.SIGTERM)  # Optuna starting the trial's heartbeat thread
        with pytest.raises(Terminated):
            interrupts.objective(ran.append)(7)
        assert ran == []
        # The interrupt reached the code that ends the search: no redelivery 5 s later.
        assert interrupts._redeliver is not None and interrupts._redeliver.finished.is_set()


def test_a_signal_outside_any_hold_is_raised_where_it_lands():
    with interrupts.raising(), pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
        raise AssertionError("not reached")


def test_holds_count_only_inside_raising():
    """A notebook's own Ctrl-C (no handler of tunepilot's) is Python's as ever."""
    interrupts.hold()
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    interrupts.release()


@pytest.mark.parametrize(("raised", "code", "said"), [
    (Terminated, 143, "interrupted (SIGTERM)"), (KeyboardInterrupt, 130, "interrupted")])
def test_an_interrupt_before_the_search_exits_with_its_signals_code(monkeypatch, capsys,
                                                                    raised, code, said):
    """Typer ends a command an interrupt left with 130, SIGTERM's too; `tune` says which."""
    from tunepilot.ui import cli

    app = typer.Typer()

    @app.callback()
    def group() -> None:
        """A group of commands, as `tune` is."""

    @app.command()
    def opening() -> None:
        raise raised()

    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setattr(sys, "argv", ["tune", "opening"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == code
    assert capsys.readouterr().err.strip() == said


def test_a_notebooks_tuner_run_holds_its_storage_calls_too():
    """`Tuner.run` called from a notebook (no `tune` command around it) sets the handler
    itself: a Ctrl-C (the kernel's SIGINT) during a storage call waits for the call, and the run
    ends as interrupted, its trial failed and queued again."""
    from tunepilot import Float, SearchSpace, TrainResult, Tuner, trainers
    from tunepilot.memory import History

    ended: list[str] = []

    def train(config: Any, report: Any) -> TrainResult:
        with held.holding():  # as a storage call is held
            signal.raise_signal(signal.SIGINT)
            ended.append("the held block ran to its end")
        raise AssertionError("not reached: the interrupt is raised as the block ends")

    tuner = Tuner(trainers.callable(train), SearchSpace.of(x=Float(0.0, 1.0)),
                  storage="sqlite:///:memory:", study="notebook", display=None)
    result = tuner.run(n_trials=3)
    assert ended == ["the held block ran to its end"]
    assert result.interrupted and not result.terminated
    [trial, again] = History.from_study(tuner.study)
    assert trial.state == "fail" and trial.error == {"kind": "interrupted", "message": "Ctrl-C"}
    assert again.state == "waiting" and again.params == trial.params
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back
