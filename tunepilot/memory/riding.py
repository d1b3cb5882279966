"""A storage on a database server whose every call rides out an outage (`outage.Outage`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from optuna.storages import BaseStorage
from optuna.storages._heartbeat import BaseHeartbeat

from tunepilot.errors import StorageUnavailable
from tunepilot.memory.held import holding
from tunepilot.memory.outage import Outage


class Riding(BaseStorage, BaseHeartbeat):
    """`inner` (an Optuna storage on a database server) with each call ridden through outages
    by `outage`: the calls below, and every other call of Optuna's storage and heartbeat
    protocols (added after the class). Anything else (`_backend`, `engine`...) is `inner`'s."""

    def __init__(self, inner: BaseStorage, outage: Outage):
        self._inner: Any = inner  # a heartbeat too, where Optuna's storage is one
        self.outage = outage
        self._unbeaten: dict[int, float] = {}  # trial id: when first seen never to have beat

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_inner", "outage", "_unbeaten"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def remove_session(self) -> None:
        self._inner.remove_session()

    def set_trial_state_values(self, trial_id: int, state: Any, values: Any = None) -> bool:
        """A trial's end, written once: a write whose answer the outage lost may have been
        committed, and writing it again then finds the trial finished as this call left it."""
        from optuna.exceptions import UpdateFinishedTrialError

        try:
            return bool(self.outage.call(self._inner.set_trial_state_values, trial_id, state,
                                         values))
        except UpdateFinishedTrialError:
            from optuna.trial import TrialState

            now = self.outage.call(self._inner.get_trial, trial_id)
            if now.state == state and (values is None or
                                       list(now.values or []) == list(values)):
                return True
            if now.state == TrialState.FAIL:
                # Another worker found it silent past the grace period (an outage longer than
                # the heartbeat's grace, as it came back) and failed it, queueing its retry:
                # this run's result is the retry's to find again. Said, not a crash in Optuna.
                self.outage.say(f"trial {now.number} was marked failed by another worker's "
                                "stale-trial check while it ran here; its result is not "
                                "recorded, and its retry runs the config again")
                return False
            raise

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        """The study's trials whose heartbeat is past the grace period; none for a grace period
        after an outage: every worker's beats stopped with the server, and the live ones beat
        again within it (a worker back first failed the others' trials as dead, and their
        results were lost and their configs run twice)."""
        backend = getattr(self._inner, "_backend", self._inner)
        interval = getattr(backend, "heartbeat_interval", None) or 0
        grace = getattr(backend, "grace_period", None) or 2 * interval
        # Asked after the call too: a call that waited out the outage itself returns the
        # heartbeats as the outage left them.
        if self.outage.back_within(grace):
            self._unbeaten.clear()
            return []
        stale = list(self.outage.call(self._inner._get_stale_trial_ids, study_id))
        stale += self._never_beat(study_id, grace)
        return [] if self.outage.back_within(grace) else stale

    def _never_beat(self, study_id: int, grace: float) -> list[int]:
        """The trials RUNNING with no config and no heartbeat at all, seen so here for longer
        than `grace`: a worker killed between Optuna creating its trial and the trial's first
        beat. Optuna's own check passes over a trial that never beat, and every other worker,
        its budget taken, waited for it for ever. A person's own trials (suggest()) never
        beat: not those."""
        from optuna.trial import TrialState

        from tunepilot.memory import attrs

        running = self.outage.call(self._inner.get_all_trials, study_id, deepcopy=False,
                                   states=(TrialState.RUNNING,))
        bare = {t._trial_id for t in running
                if not t.params and not t.user_attrs.get(attrs.ASK_TELL)}
        if bare:
            backend = getattr(self._inner, "_backend", self._inner)
            bare -= self.outage.call(_beaten, backend, bare)
        now = time.monotonic()
        self._unbeaten = {i: self._unbeaten.get(i, now) for i in bare}
        return [i for i, seen in self._unbeaten.items() if now - seen > grace]

    def record_heartbeat(self, trial_id: int) -> None:
        """A beat, ridden through an outage; past its limit not raised in the heartbeat's
        thread (the worker's own next call raises `StorageUnavailable`)."""
        try:
            self.outage.call(self._inner.record_heartbeat, trial_id)
        except StorageUnavailable:
            pass


def _beaten(rdb: Any, trial_ids: set[int]) -> set[int]:
    """Those of `trial_ids` with a heartbeat row in Optuna's RDB storage `rdb` (its tables, read
    as its own `_get_stale_trial_ids` reads them)."""
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    beat = models.TrialHeartbeatModel
    with holding(), _create_scoped_session(rdb.scoped_session) as session:
        return {row[0] for row in session.query(beat.trial_id).filter(
            beat.trial_id.in_(sorted(trial_ids)))}


def _ridden(name: str) -> Callable[..., Any]:
    def method(self: Riding, *args: Any, **kwargs: Any) -> Any:
        return self.outage.call(getattr(self._inner, name), *args, **kwargs)

    method.__name__ = name
    return method


for _name in {*dir(BaseStorage), *dir(BaseHeartbeat)}:
    if not _name.startswith("__") and _name not in vars(Riding) and callable(
            getattr(BaseStorage, _name, None) or getattr(BaseHeartbeat, _name, None)):
        setattr(Riding, _name, _ridden(_name))
Riding.__abstractmethods__ = frozenset()
