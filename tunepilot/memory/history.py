"""A typed, read-only view of a study's trials: what the agent and the faces read.

Built from Optuna's frozen trials in one pass; nothing here writes to the storage (that is
`records`). Nothing outside `memory/` reads tunepilot's user attrs by key: they read the typed
fields here (`TrialRecord.llm.rationale`, `History.llm_spend()`...).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tunepilot.memory import attrs
from tunepilot.memory.calibrations import Calibration
from tunepilot.memory.parts import LLMCall, Review, TrainInfo, readable
from tunepilot.memory.repeats import REPEAT_TOLERANCE, ConfigIndex
from tunepilot.memory.settings import migrate
from tunepilot.memory.stops import Stop

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from tunepilot.space import SearchSpace


_FINISHED: dict[tuple[Any, ...], TrialRecord] = {}


@dataclass(frozen=True)
class TrialRecord:
    number: int
    state: str  # "complete", "pruned", "fail", "running", "waiting"
    params: Mapping[str, Any]
    value: float | None  # the best validation loss of a complete trial
    curve: tuple[float, ...] = ()  # validation loss per reported epoch
    duration_s: float | None = None
    start: float | None = None  # POSIX time the trial started (None while waiting)
    end: float | None = None  # POSIX time it finished (None while running)
    retry_of: tuple[int, ...] = ()  # the killed trials this one re-runs (Optuna's retry history)
    proposer: str | None = None
    llm: LLMCall | None = None  # what the LLM said and cost, if it was asked
    fallback_reason: str | None = None  # why the suggester did not propose this trial
    review: Review | None = None  # the `review` strategy's verdict on the sampler's candidate
    llm_skipped: str | None = None  # why the LLM was not asked on its turn
    error: Mapping[str, str] | None = None  # {"kind", "message"} of a failed trial
    train: TrainInfo | None = None
    ask_tell: bool = False  # run by a person's own loop (Tuner.suggest / report)
    warm_start_from: str | None = None  # the study whose best config this trial re-runs
    fixed: Mapping[str, Any] | None = None  # the fixed settings it ran with (None: not recorded)
    sampler: Mapping[str, Any] | None = None  # {"kind", "s"}: what drew it, in how long
    opening: int | None = None  # its place in the LLM's zero-shot opening (from 1), if there
    user_attrs: Mapping[str, Any] = field(default_factory=dict)  # as stored, for inspection

    @property
    def rationale(self) -> str | None:
        return self.llm.rationale if self.llm else None

    @property
    def why(self) -> str:
        """What a person reads next to the trial: its error, else the reason it was proposed
        (the LLM's rationale, or why the suggester fell back). A rationale that is not a
        sentence is replaced by what kind of proposal it was; the log keeps it as written."""
        if self.error:
            return f"{self.error.get('kind')}: {self.error.get('message', '')}{self.where}"
        if self.review is not None and self.review.verdict == "refused" and self.review.why:
            return (f"an override refused ({self.review.why}), {self.review.sampler}'s "
                    "candidate ran")
        if self.rationale and readable(self.rationale):
            return self.rationale
        return self.rationale_kind or self.fallback_reason or self.llm_skipped or ""

    @property
    def own_s(self) -> float:
        """The trial's own time: the trainer's figure where it gave one, else the trial's, less
        the sampler's draw (a pruned trial's partial time; 0 before it ran). What the default
        weighs its draws against and, with a target, what a config cost."""
        if self.train is not None and self.train.wall_time_s:
            return float(self.train.wall_time_s)
        return max(0.0, float(self.duration_s or 0.0) - float((self.sampler or {}).get("s") or 0.0))

    @property
    def where(self) -> str:
        """" at FILE:LINE in FUNCTION": where the trainer's code raised its error ("" where
        none was recorded), so a person opens the line to fix."""
        at = (self.error or {}).get("where") or ""
        return f" at {at}" if at else ""

    @property
    def rationale_kind(self) -> str | None:
        """What kind of proposal the LLM made, in words, for when its rationale is junk."""
        if self.llm is None or not (self.rationale or self.review):
            return None
        if self.review is not None:
            what = {"accepted": f"accepted {self.review.sampler}'s candidate",
                    "refused": f"an override refused, {self.review.sampler}'s candidate ran",
                    }.get(self.review.verdict, f"overrode {self.review.sampler}'s candidate")
        elif self.opening is not None:
            what = f"the LLM's opening, config {self.opening}"
        else:
            what = "proposed by the LLM"
        return f"{what} (no reason given in words)" if self.rationale else what

    @functools.cached_property
    def key(self) -> tuple[Any, ...]:
        """The config as a comparable key; floats equal to 6 significant digits are equal (an
        LLM copies printed values)."""
        return tuple(sorted((k, f"{v:.6g}" if isinstance(v, float) else repr(v))
                            for k, v in self.params.items()))

    @classmethod
    def from_frozen(cls, t: FrozenTrial) -> TrialRecord:
        """The record of `t`; finished trials never change, so theirs are built once."""
        key = (t._trial_id, t.number, t.datetime_start)
        cached = _FINISHED.get(key)
        if cached is not None:
            return cached
        record = cls._build(t)
        if t.state.is_finished():
            if len(_FINISHED) > 200_000:  # many studies in one process: start over
                _FINISHED.clear()
            _FINISHED[key] = record
        return record

    @classmethod
    def _build(cls, t: FrozenTrial) -> TrialRecord:
        curve = tuple(v for _, v in sorted(t.intermediate_values.items()))
        duration = t.duration.total_seconds() if t.duration is not None else None
        error = t.user_attrs.get(attrs.ERROR)
        if error is None and t.state.name == "FAIL":
            # A FAIL that tunepilot did not record: a killed process or a stale heartbeat.
            reason = t.system_attrs.get("fail_reason", "the worker stopped mid-trial")
            error = {"kind": "interrupted", "message": str(reason)}
        return cls(
            number=t.number,
            state=t.state.name.lower(),
            # A running trial whose params are not stored yet shows what was proposed for it.
            params=dict(t.params) or (dict(t.user_attrs.get(attrs.PROPOSED) or {})
                                      if t.state.name == "RUNNING" else {}),
            # Multi-objective studies have no single value (t.value raises there).
            value=t.values[0] if t.state.name == "COMPLETE" and t.values
            and len(t.values) == 1 else None,
            curve=curve,
            duration_s=duration,
            start=t.datetime_start.timestamp() if t.datetime_start else None,
            end=t.datetime_complete.timestamp() if t.datetime_complete else None,
            retry_of=tuple(t.system_attrs.get("retry_history") or ()),
            proposer=t.user_attrs.get(attrs.PROPOSER),
            llm=LLMCall.from_attr(t.user_attrs.get(attrs.LLM)),
            fallback_reason=t.user_attrs.get(attrs.FALLBACK_REASON),
            review=Review.from_attr(t.user_attrs.get(attrs.REVIEW)),
            llm_skipped=t.user_attrs.get(attrs.LLM_SKIPPED),
            error=error,
            train=TrainInfo.from_attr(t.user_attrs.get(attrs.TRAIN)),
            ask_tell=bool(t.user_attrs.get(attrs.ASK_TELL)),
            warm_start_from=t.user_attrs.get(attrs.WARM_START_FROM),
            fixed=t.user_attrs.get(attrs.FIXED),
            opening=t.user_attrs.get(attrs.OPENING_TRIAL),
            sampler=t.user_attrs.get(attrs.SAMPLER),
            user_attrs=dict(t.user_attrs),
        )


@dataclass(frozen=True)
class History(Sequence[TrialRecord]):
    """All trials of a study in number order, with the views a tuner needs.

    Example:
        >>> h = History.from_study(study)  # doctest: +SKIP
        >>> [t.number for t in h.best(3)]  # doctest: +SKIP
    """

    trials: tuple[TrialRecord, ...] = ()
    notes: str = ""  # the agent's notes so far
    hints: tuple[str, ...] = ()  # what the person told the agent, oldest first
    warm_start: Mapping[str, Any] = field(default_factory=dict)  # from a finished study
    stop: Stop | None = None  # why a worker stopped the whole study (target reached), if one did
    last_stop: Stop | None = None  # why the last run ended
    settings: Mapping[str, Any] = field(default_factory=dict)  # migrated to today's version
    changes: tuple[Mapping[str, Any], ...] = ()  # identity changes accepted, oldest first
    opening: Mapping[str, Any] = field(default_factory=dict)  # the LLM's opening turn, if any
    calibration: Calibration | None = None  # what `tune calibrate` measured of its model
    goal: Mapping[str, Any] = field(default_factory=dict)  # the last run's (`attrs.GOAL`)
    # The Optuna study it was read from (None when built by hand): for analyses that need it,
    # such as Optuna's importance evaluators.
    study: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_study(cls, study: optuna.Study, *, exclude: int | None = None,
                   this_trial: bool = False) -> History:
        """The study's trials (all but trial number `exclude`) and its notes and hints; of the
        whole study where Hyperband hands a sampler one bracket's view (`attrs.whole`).
        `this_trial`: a sampler's read, the trials as Optuna read them once for the trial it
        samples (its samplers share that read), not a read of its own."""
        study = attrs.whole(study)
        read = (study._get_trials(deepcopy=False, use_cache=True) if this_trial
                else study.get_trials(deepcopy=False))
        trials = [t for t in read if t.number != exclude]
        user_attrs = study.user_attrs
        notes = user_attrs.get(attrs.NOTES) or {}
        hints = tuple(h["text"] for h in user_attrs.get(attrs.HINTS) or [])
        records = [TrialRecord.from_frozen(t) for t in sorted(trials, key=_number)]
        interrupted = user_attrs.get(attrs.INTERRUPTED) or {}
        if interrupted:
            records = [dataclasses.replace(r, error={"kind": "interrupted",
                                                     "message": interrupted[str(r.number)]})
                       if str(r.number) in interrupted and r.state == "fail" else r
                       for r in records]
        return cls(tuple(records),
                   notes=notes.get("text", ""), hints=hints,
                   warm_start=user_attrs.get(attrs.WARM_START) or {},
                   stop=Stop.from_record(user_attrs.get(attrs.STOP)),
                   last_stop=Stop.from_record(user_attrs.get(attrs.LAST_STOP)),
                   settings=migrate(user_attrs.get(attrs.SETTINGS)),
                   changes=tuple(user_attrs.get(attrs.CHANGES) or ()),
                   opening=user_attrs.get(attrs.OPENING) or {},
                   calibration=Calibration.from_record(user_attrs.get(attrs.CALIBRATION)),
                   goal=user_attrs.get(attrs.GOAL) or {},
                   study=study)

    def changed_since(self, study: optuna.Study, *, exclude: int | None = None) -> History:
        """The study's trials now that were not finished in this history (new ones, and those
        running or queued then), read without the study's attrs: what another worker may
        have started since this history was read."""
        done = {t.number for t in self.trials if t.state in ("complete", "pruned", "fail")}
        fresh = [TrialRecord.from_frozen(t) for t in study.get_trials(deepcopy=False)
                 if t.number not in done and t.number != exclude]
        return History(tuple(sorted(fresh, key=lambda r: r.number)), study=study)

    @staticmethod
    def proposer_of(storage: Any, trial_id: int) -> str | None:
        """Who proposed a trial, read now (one round trip, not a whole history)."""
        return storage.get_trial_user_attrs(trial_id).get(attrs.PROPOSER)

    @staticmethod
    def proposer_of_frozen(trial: FrozenTrial) -> str | None:
        return trial.user_attrs.get(attrs.PROPOSER)

    @staticmethod
    def rationale_of(storage: Any, trial_id: int) -> str | None:
        return (storage.get_trial_user_attrs(trial_id).get(attrs.LLM) or {}).get(attrs.RATIONALE)

    @staticmethod
    def error_of(trial: FrozenTrial) -> Mapping[str, str] | None:
        """The error tunepilot recorded on `trial`, if any."""
        return trial.user_attrs.get(attrs.ERROR)

    def __len__(self) -> int:
        return len(self.trials)

    def __getitem__(self, i):
        return self.trials[i]

    def __iter__(self) -> Iterator[TrialRecord]:
        return iter(self.trials)

    # A history never changes once read, so its views are computed once: a prompt asks for
    # them a dozen times, and at 10,000 trials each pass is milliseconds.
    def completed(self) -> list[TrialRecord]:
        return list(self._completed)

    def finished(self) -> list[TrialRecord]:
        """Trials that used up budget: complete, pruned or failed."""
        return list(self._finished)

    def best(self, k: int = 1) -> list[TrialRecord]:
        return list(self._ranked[:k])

    @functools.cached_property
    def _completed(self) -> tuple[TrialRecord, ...]:
        return tuple(t for t in self.trials if t.state == "complete" and _finite(t.value))

    @functools.cached_property
    def _finished(self) -> tuple[TrialRecord, ...]:
        return tuple(t for t in self.trials if t.state in ("complete", "pruned", "fail"))

    @functools.cached_property
    def _ranked(self) -> tuple[TrialRecord, ...]:
        return tuple(sorted(self._completed, key=lambda t: (t.value, t.number)))

    @property
    def best_trial(self) -> TrialRecord | None:
        best = self.best(1)
        return best[0] if best else None

    def failures(self) -> list[TrialRecord]:
        return [t for t in self.trials if t.state == "fail"]

    def running(self) -> list[TrialRecord]:
        return [t for t in self.trials if t.state == "running"]

    def with_config(self, params: Mapping[str, Any], space: SearchSpace | None = None,
                    tolerance: float = REPEAT_TOLERANCE) -> TrialRecord | None:
        """The first trial (running or done; not a queued one) with this config: the same
        choices and integers, and floats within `tolerance` of their range in `space` (of the
        log range for log parameters). Without a space, floats equal to 6 digits."""
        if space is None:
            key = TrialRecord(-1, "", params, None).key
            return next((t for t in self.trials
                         if t.params and t.state != "waiting" and t.key == key), None)
        return self._index(space).first(params, tolerance)

    def _index(self, space: SearchSpace) -> ConfigIndex:
        """The trials that hold a config (running or done), as columns: built once per space."""
        found = self._indexes.get(id(space))
        if found is None or found[0] is not space:
            found = (space, ConfigIndex([t for t in self.trials
                                         if t.params and t.state != "waiting"], space))
            self._indexes[id(space)] = found
        return found[1]

    @functools.cached_property
    def _indexes(self) -> dict[int, tuple[SearchSpace, ConfigIndex]]:
        return {}

    def llm_spend(self) -> float:
        """USD spent on the LLM over the whole study (trials with a known price)."""
        return sum(t.llm.cost_usd or 0.0 for t in self.trials if t.llm)

    def llm_tokens(self) -> int:
        """Tokens sent to and received from the LLM over the whole study."""
        return sum(t.llm.tokens_in + t.llm.tokens_out for t in self.trials if t.llm)

    def llm_calls(self) -> list[LLMCall]:
        return [t.llm for t in self.trials if t.llm]

    def llm_seconds(self) -> float:
        """Seconds spent waiting for the LLM over the whole study."""
        return sum(t.llm.latency_s or 0.0 for t in self.trials if t.llm)

    @property
    def fixed(self) -> Mapping[str, Any]:
        """The fixed settings of the study's space (epochs, seed...), as stored."""
        return (self.settings.get("space") or {}).get("fixed") or {}

    def config_of(self, t: TrialRecord) -> dict[str, Any]:
        """The whole config trial `t` ran: its fixed settings (the study's, for trials of
        releases that did not record them) and its parameters."""
        return {**(self.fixed if t.fixed is None else t.fixed), **t.params}

    def last_finished(self, k: int) -> list[TrialRecord]:
        """The `k` trials that finished last, in the order they finished."""
        done = [t for t in self.finished() if t.end is not None]
        return sorted(done, key=lambda t: (t.end, t.number))[-k:]

    def to_frame(self) -> Any:
        """The trials as a pandas DataFrame: one row per trial, one column per parameter."""
        import pandas as pd

        names = sorted({k for t in self.trials for k in t.params})
        rows = [{"number": t.number, "state": t.state, "value": t.value,
                 "proposer": t.proposer, "duration_s": t.duration_s,
                 **{f"params_{k}": t.params.get(k) for k in names},
                 "epochs": len(t.curve), "rationale": t.rationale,
                 "error": (t.error or {}).get("message")} for t in self.trials]
        columns = ["number", "state", "value", "proposer", "duration_s",
                   *(f"params_{k}" for k in names), "epochs", "rationale", "error"]
        return pd.DataFrame(rows, columns=columns).set_index("number")

    def budget_used(self) -> int:
        """Trials that count against the trial budget: every started trial, except a killed one
        whose retry (same config) is queued or running: the retry takes its place."""
        retried = {n for t in self.trials for n in t.retry_of}
        return sum(1 for t in self.trials if t.state != "waiting" and t.number not in retried)

    def wall_time_s(self, now: float | None = None) -> float:
        """Seconds during which at least one trial of the study was running (all runs and
        workers together): parallel trials count once, gaps between runs not at all."""
        import time

        now = time.time() if now is None else now
        spans = sorted((t.start, t.end or now) for t in self.trials
                       if t.start is not None and t.state in ("complete", "pruned", "fail",
                                                               "running"))
        total = 0.0
        cur: tuple[float, float] | None = None  # the union of spans so far that touch
        for s, e in spans:
            if cur is None or s > cur[1]:
                if cur is not None:
                    total += cur[1] - cur[0]
                cur = (s, e)
            else:
                cur = (cur[0], max(cur[1], e))
        if cur is not None:
            total += cur[1] - cur[0]
        return total


def _number(t: FrozenTrial) -> int:
    return t.number


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)
