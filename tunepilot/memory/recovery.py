"""A dead process's trials: found by the heartbeat (another worker's) or by the next run (one
process on a SQLite or journal file), marked failed with why, and their configs run again as
often as the storage's `retry_stale` allows."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

# How often a killed process's trial runs again, per storage `open_storage` made (else once).
_RETRIES: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


class StaleTrial:
    """Runs when a worker finds another worker's trial silent past the grace period (the
    process was killed, or its machine lost): says so on the study, where `History` finds it
    (a FAILed trial takes no more attributes), queues the retry if there is one, and tells
    whoever listens in this process (`listeners`: the running search's terminal and log)."""

    def __init__(self, grace_s: int):
        self.grace_s = grace_s
        self.listeners: list[Callable[[str], None]] = []

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        from tunepilot.memory import records
        from tunepilot.memory.lock import StudyLock

        lock = StudyLock(study._storage, study.study_name)
        try:
            records.interrupted(study, trial.number, (
                f"its worker stopped sending heartbeats for {self.grace_s} s (killed, or its "
                "machine was lost)"), lock)
        finally:
            lock.close()
        again = requeue(study, trial._trial_id)
        for listen in self.listeners:
            listen(f"trial {trial.number} of another worker went silent for {self.grace_s} s "
                   f"(killed, or its machine lost): marked failed; {again}")


def stale_trial_listener(storage: Any) -> StaleTrial | None:
    """The storage's `StaleTrial` callback (None: no heartbeat, or not made by `open_storage`)."""
    getter = getattr(storage, "get_heartbeat_stale_trial_callback", None)
    callback = getter() if getter is not None else None
    return callback if isinstance(callback, StaleTrial) else None


def recover(study: optuna.Study, keep: Collection[int] = ()) -> list[str]:
    """Fails the trials a dead process left RUNNING and queues each config again (as many
    times as `open_storage`'s `retry_stale` allows), saying so in a line each. Only for a
    caller that holds the study's `OneProcessRun`: then no other process runs a trial of it,
    and every RUNNING trial but this process's own (`keep`, and a person's suggest() trials,
    which no process owns) is dead, however recently it beat."""
    from optuna.trial import TrialState

    from tunepilot.memory import attrs, records

    storage = study._storage
    dead = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.number not in keep and not t.user_attrs.get(attrs.ASK_TELL)]
    if not dead:
        return []
    said = []
    for trial in dead:
        cause = ("its process stopped mid-trial (killed, or the machine restarted); found "
                 "by the next run")
        records.fail(storage, trial._trial_id, "interrupted", cause)
        again = requeue(study, trial._trial_id)
        said.append(f"trial {trial.number} was left running by a process that stopped "
                    f"(killed?): marked failed; {again}")
    return said


# What a retry does not inherit from the trial it repeats: its error, its training record, and
# what its LLM call cost (counted once, on the trial that paid it).
_NOT_RETRIED = ("error", "train", "fixed")


def requeue(study: optuna.Study, trial_id: int, queued: str = "its config runs again") -> str:
    """Queues an interrupted trial's config to run again, as often as `open_storage`'s
    `retry_stale` allows (Optuna's retry record: the copy's `retry_history` names the trial it
    repeats); what was done, in words, with the copy's number (`queued`: how it runs)."""
    import optuna

    from tunepilot.memory import attrs

    storage = study._storage
    failed = storage.get_trial(trial_id)
    if not failed.params and not failed.system_attrs.get("fixed_params"):
        return "it had no config yet"  # (a queued config, not drawn yet, is queued again)
    max_retry = _RETRIES.get(getattr(storage, "_backend", storage), 1)  # Optuna's cache
    if not max_retry:
        return "not run again (retry_interrupted = 0)"
    history = [*failed.system_attrs.get("retry_history", []), failed.number]
    if len(history) > max_retry:
        return "not run again (its retries are used up)"
    user_attrs = {k: v for k, v in failed.user_attrs.items() if k not in _NOT_RETRIED}
    if isinstance(user_attrs.get(attrs.LLM), dict):
        user_attrs[attrs.LLM] = {k: v for k, v in user_attrs[attrs.LLM].items()
                                 if k in ("model", attrs.RATIONALE)}
    study.add_trial(optuna.create_trial(
        state=optuna.trial.TrialState.WAITING, params=failed.params,
        distributions=failed.distributions, user_attrs=user_attrs,
        system_attrs={**failed.system_attrs, "failed_trial": failed.number,
                      "retry_history": history}))
    copy = max(t.number for t in study.get_trials(deepcopy=False)
               if t.system_attrs.get("failed_trial") == failed.number)
    return f"{queued}, as trial {copy}"
