"""Opening a study for a run: warm start from a finished study like it, the check that a study
stays one experiment, and Optuna's log lines while a display shows the same trials."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import optuna

from tunepilot.errors import ConfigError
from tunepilot.memory import History, lookup, records
from tunepilot.memory.identity import differences, identity
from tunepilot.space import SearchSpace


def warm_start(study: optuna.Study, storage: Any, settings: Mapping[str, Any],
               space: SearchSpace) -> None:
    """A new study starts from the best configs and notes of a finished one like it."""
    found = lookup.warm_start(storage, study.study_name, dict(settings))
    if found is None:
        return
    records.warm_start(study, {k: v for k, v in found.items() if k != "best_params"})
    config = {k: v for k, v in found["best_params"].items() if k in space.params}
    if set(config) == set(space.params):
        try:
            records.enqueue(study, space.snap(config), "enqueued",
                            warm_start_from=found["study"])
        except ValueError:
            pass  # the old best lies outside the new bounds: the prompt still shows it


def first_trials(study: optuna.Study, space: SearchSpace,
                 start: Sequence[Mapping[str, Any]]) -> None:
    """A new study's first trials, queued after a warm start's: the space's declared defaults
    (what a person would try first), then the `start` configs, each once."""
    trials = study.get_trials(deepcopy=False)  # a warm start's queued trial among them
    queued: list[Mapping[str, Any]] = [t.system_attrs.get("fixed_params") or t.params
                                       for t in trials]
    defaults = space.defaults()
    for i, config in enumerate(([defaults] if defaults else []) + list(start)):
        if any(dict(config) == dict(q) for q in queued):
            continue
        records.enqueue(study, config, "enqueued",
                        enqueued_as="default" if defaults and i == 0
                        else f"start {i + (0 if defaults else 1)}")
        queued.append(config)


def check_identity(study: optuna.Study, settings: Mapping[str, Any], accept: bool) -> None:
    """One study, one experiment: a run with another trainer, data, space or fixed setting
    is refused, or, when the person says it is deliberate, recorded in the study."""
    before = identity(History.from_study(study).settings)
    changes = differences(before, identity(settings)) if before else []
    if not changes:
        return
    if not accept:
        listing = "\n  ".join(changes)
        raise ConfigError(
            f"Study {study.study_name} holds trials run with other settings, and their "
            f"losses would not be comparable with this run's:\n  {listing}\nStart a new "
            "study with --study NAME (it warm-starts from this one's best configs), or, if "
            "the change is deliberate and safe (a wider bound, say), pass --accept-changes "
            "(the change is recorded in the study).")
    records.change(study, changes)


@contextlib.contextmanager
def quiet_optuna(quiet: bool = True) -> Iterator[None]:
    """Optuna's INFO lines ("Trial 3 finished with value...") while our display shows the same
    trials: keep its warnings and errors only."""
    before = optuna.logging.get_verbosity()
    if quiet and before < optuna.logging.WARNING:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)
