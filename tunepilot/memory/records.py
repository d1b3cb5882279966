"""Every write of tunepilot's per-trial and per-study records: the one writer of study state.

The agent, the loop and the faces call these functions; `History` reads what they wrote as typed
fields. The keys live in `attrs`; everything is JSON, so any Optuna storage keeps it.
Per-trial writes go through the storage by trial id (a sampler holds frozen trials, and an
isolated or interrupted trial has no live `optuna.Trial`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tunepilot.memory import attrs
from tunepilot.memory.settings import stamped

if TYPE_CHECKING:
    import optuna

    from tunepilot.memory.lock import StudyLock
    from tunepilot.memory.stops import Stop


def set_trial_user_attrs(storage: Any, trial_id: int, values: Mapping[str, Any]) -> None:
    """Writes `values` as the trial's user attrs. On a database storage: in one transaction
    (Optuna's `set_trial_user_attr` is a transaction each, with a read of the trial:
    bench/README.md#the-agents-own-cost); on others, one by one."""
    backend = getattr(storage, "_backend", storage)  # Optuna's cache wraps every RDBStorage
    try:
        from optuna.storages import RDBStorage
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        write = backend._set_trial_attr_without_commit
    except (ImportError, AttributeError):  # another Optuna, or not a database: one by one
        write = None
    if len(values) < 2 or write is None or not isinstance(backend, RDBStorage):
        for key, value in values.items():
            storage.set_trial_user_attr(trial_id, key, value)
        return
    def batch() -> None:
        with _create_scoped_session(backend.scoped_session, True) as session:
            for key, value in values.items():
                write(session, models.TrialUserAttributeModel, trial_id, key, value)

    outage = getattr(storage, "outage", None)  # a server's storage rides out its outages
    batch() if outage is None else outage.call(batch)


# Per trial ------------------------------------------------------------------------------------

def proposal(storage: Any, trial_id: int, proposer: attrs.Proposer, *,
             params: Mapping[str, Any] | None = None, rationale: str | None = None,
             notes: str | None = None, meta: Mapping[str, Any] | None = None,
             review: Mapping[str, Any] | None = None) -> None:
    """Who proposed the trial's config, and what the agent said and spent doing it. `params`
    (the proposed config) is visible to other workers before Optuna stores the params.
    `review`: the `review` strategy's {"verdict", "sampler", "candidate"}."""
    meta = dict(meta or {})
    agent = dict(meta.pop(attrs.LLM, None) or {})
    if rationale:
        agent[attrs.RATIONALE] = rationale
    if notes:
        agent[attrs.NOTES_UPDATE] = notes
    values: dict[str, Any] = {**meta, attrs.PROPOSER: proposer}
    if agent:
        values[attrs.LLM] = agent
    # Flat strings too: optuna-dashboard shows them as they are, next to the trial's params.
    if rationale:
        values[attrs.FLAT_RATIONALE] = rationale
    if notes:
        values[attrs.FLAT_NOTES] = notes
    if params is not None:
        values[attrs.PROPOSED] = dict(params)
    if review is not None:
        values[attrs.REVIEW] = dict(review)
    set_trial_user_attrs(storage, trial_id, values)


def fallback(storage: Any, trial_id: int, reason: str,
             meta: Mapping[str, Any] | None = None) -> None:
    """The suggester could not propose this trial; the sampler did, for `reason`."""
    set_trial_user_attrs(storage, trial_id, {**(meta or {}), attrs.PROPOSER: "fallback",
                                             attrs.FALLBACK_REASON: reason})


def skipped(storage: Any, trial_id: int, reason: str) -> None:
    """The LLM was not asked on its turn (its share of the search's time is spent): the
    sampler proposed the trial."""
    set_trial_user_attrs(storage, trial_id, {attrs.PROPOSER: "optuna", attrs.LLM_SKIPPED: reason})


def sampler(storage: Any, trial_id: int, kind: str, seconds: float,
            expected_s: float | None = None) -> None:
    """Which sampler drew the trial's config, its own seconds (what the default rule weighs
    against the trials' time) and, where a cost model chose it, the trial's seconds that model
    expected."""
    value: dict[str, Any] = {"kind": kind, "s": round(seconds, 4)}
    if expected_s is not None:
        value["expected_s"] = round(expected_s, 3)
    storage.set_trial_user_attr(trial_id, attrs.SAMPLER, value)


def error(storage: Any, trial_id: int, described: Mapping[str, str]) -> None:
    """Why the trial failed: {"kind", "message", "where"} (see `tunepilot.errors.describe`)."""
    storage.set_trial_user_attr(trial_id, attrs.ERROR, dict(described))


def train(storage: Any, trial_id: int, figures: Mapping[str, Any]) -> None:
    """What the trainer measured: wall time, samples/s, peak memory, device, versions."""
    storage.set_trial_user_attr(trial_id, attrs.TRAIN, dict(figures))


def fixed(storage: Any, trial_id: int, settings: Mapping[str, Any]) -> None:
    """The fixed settings the trial runs with, so `best` and `rerun` use its own."""
    storage.set_trial_user_attr(trial_id, attrs.FIXED, dict(settings))


def ask_tell(storage: Any, trial_id: int) -> None:
    """A trial run by a person's own loop: no heartbeat, so no worker takes it for dead."""
    storage.set_trial_user_attr(trial_id, attrs.ASK_TELL, True)


def fail(storage: Any, trial_id: int, kind: str, message: str) -> None:
    """Fails a running trial (one Optuna has not closed) with its cause."""
    from optuna.trial import TrialState

    error(storage, trial_id, {"kind": kind, "message": message})
    storage.set_trial_state_values(trial_id, TrialState.FAIL)


def enqueue(study: optuna.Study, params: Mapping[str, Any], proposer: attrs.Proposer,
            **extra: Any) -> None:
    """Queues `params` as the next trial, proposed by `proposer` ("human", "enqueued")."""
    study.enqueue_trial(dict(params), user_attrs={attrs.PROPOSER: proposer, **extra})


def enqueue_opening(study: optuna.Study, configs: list[dict[str, Any]],
                    rationale: str | None, meta: Mapping[str, Any], first: int = 1) -> None:
    """Queues the LLM's opening configs as its proposals, the first of them config `first` of
    the opening; the turn's cost (`meta`'s "llm") goes on the first, so the study's LLM time and
    spend count it once."""
    turn = dict(meta.get(attrs.LLM) or {})
    for i, config in enumerate(configs):
        agent = dict(turn) if i == 0 else {"model": turn.get("model")}
        if rationale:
            agent[attrs.RATIONALE] = rationale
        values: dict[str, Any] = {attrs.PROPOSER: "llm", attrs.OPENING_TRIAL: first + i,
                                  attrs.LLM: agent, attrs.PROPOSED: dict(config)}
        if rationale:
            values[attrs.FLAT_RATIONALE] = rationale
        study.enqueue_trial(dict(config), user_attrs=values)


# Per study ------------------------------------------------------------------------------------

def claim_opening(study: optuna.Study, k: int, model: str) -> bool:
    """Marks the LLM's opening as asked, if the study is new (no trial started) and none was
    asked before; True when this caller asks it. Call it holding the study's lock."""
    if study.user_attrs.get(attrs.OPENING) is not None or any(
            t.state.is_finished() or t.state.name == "RUNNING"
            for t in study.get_trials(deepcopy=False)):
        return False
    opening(study, {"asked": k, "model": model, "taken": None, "error": None})
    return True


def opening(study: optuna.Study, value: Mapping[str, Any]) -> None:
    """What became of the LLM's opening turn (`attrs.OPENING`)."""
    study.set_user_attr(attrs.OPENING, dict(value))


def goal(study: optuna.Study, value: Mapping[str, Any]) -> None:
    """What the run sets out to reach (`attrs.GOAL`), written when it differs from the last."""
    value = dict(value)
    if study.user_attrs.get(attrs.GOAL) != value:
        study.set_user_attr(attrs.GOAL, value)


def settings(study: optuna.Study, value: Mapping[str, Any]) -> None:
    """The run's settings (no secrets), stored with the current schema version; written when
    they differ from those stored (a worker joining a study finds its own there)."""
    value = json.loads(json.dumps(stamped(value)))  # as the storage gives it back
    if study.user_attrs.get(attrs.SETTINGS) != value:
        study.set_user_attr(attrs.SETTINGS, value)


def change(study: optuna.Study, changes: list[str]) -> None:
    """A deliberate change of the study's identity (``--accept-changes``), kept in its history."""
    log = list(study.user_attrs.get(attrs.CHANGES) or [])
    log.append({"after_trial": len(study.trials), "changes": list(changes)})
    study.set_user_attr(attrs.CHANGES, log)


def notes(study: optuna.Study, text: str, trial: int) -> None:
    study.set_user_attr(attrs.NOTES, {"text": text, "trial": trial})


def hint(study: optuna.Study, text: str) -> None:
    hints = list(study.user_attrs.get(attrs.HINTS) or [])
    hints.append({"text": str(text), "after_trial": len(study.trials)})
    study.set_user_attr(attrs.HINTS, hints)


def calibration(study: optuna.Study, record: Mapping[str, Any]) -> None:
    """The calibration the study's model starts from (`memory.calibrations`)."""
    study.set_user_attr(attrs.CALIBRATION, dict(record))


def design_seed(study: optuna.Study) -> int:
    """The seed of an unseeded study's start-up design (`attrs.DESIGN_SEED`): drawn by the first
    trial that asks, then read by every later trial, a resume and every worker. Two workers
    that ask in the same instant may each draw; both read back the one stored last."""
    study = attrs.whole(study)
    if study.user_attrs.get(attrs.DESIGN_SEED) is None:
        study.set_user_attr(attrs.DESIGN_SEED, secrets.randbelow(2**32))
    return int(study.user_attrs[attrs.DESIGN_SEED])


def warm_start(study: optuna.Study, found: Mapping[str, Any]) -> None:
    study.set_user_attr(attrs.WARM_START, dict(found))


def stop(study: optuna.Study, reason: Stop | None) -> None:
    """Tells every worker to start no more trials (None: a new run starts clean)."""
    study.set_user_attr(attrs.STOP, None if reason is None else reason.to_record())


def first_target(study: optuna.Study, reason: Stop) -> bool:
    """Records the target reached for every worker, unless another worker's trial reached it
    first: the study names one trial, the first. Called under the study lock; True if this
    call recorded it."""
    if study.user_attrs.get(attrs.STOP) is not None:
        return False
    stop(study, reason)
    return True


def last_stop(study: optuna.Study, reason: Stop) -> None:
    """Why the last run ended, for the report."""
    study.set_user_attr(attrs.LAST_STOP, reason.to_record())


def interrupted(study: optuna.Study, number: int, cause: str, lock: StudyLock) -> None:
    """The cause of a trial Optuna already FAILed (a finished trial takes no more attributes):
    kept on the study, where `History` finds it."""
    with lock:  # a read-modify-write of an attr other workers write too
        causes = dict(study.user_attrs.get(attrs.INTERRUPTED) or {})
        causes[str(number)] = cause
        study.set_user_attr(attrs.INTERRUPTED, causes)
