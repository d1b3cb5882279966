"""When two configs are one: the rule a proposal is refused by, and a look-up that applies it
to a whole study at once.

Floats within `REPEAT_TOLERANCE` of their range (of the log range for log parameters) are one
value; choices and integers must be equal. The look-up (`ConfigIndex`) answers "which trial, if
any, already has this config?" with array arithmetic: a Python loop over 1,000 trials took
~4 ms a check, and a trial makes two (bench/agent.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

from tunepilot.space import Float

if TYPE_CHECKING:
    from tunepilot.space import SearchSpace


class HasParams(Protocol):
    """What the index reads of a trial (a `history.TrialRecord`): its config. A protocol, not
    the record's type, so this module and `history`, which uses it, do not import each other."""

    @property
    def params(self) -> Mapping[str, Any]: ...


T = TypeVar("T", bound=HasParams)

# Two proposals whose floats lie within this share of their range (of the log range for log
# parameters) are one config: training both would spend a trial to learn nothing. 1% of lr's
# log range 1e-5..1e-1 is a factor 1.1.
REPEAT_TOLERANCE = 0.01


def same_config(a: Mapping[str, Any], b: Mapping[str, Any], space: SearchSpace,
                tolerance: float = REPEAT_TOLERANCE) -> bool:
    """Whether two configs are one: the same choices and integers, floats within `tolerance`
    of their (log) range."""
    if set(a) != set(b):
        return False
    for name, value in b.items():
        p, other = space.params.get(name), a[name]
        if isinstance(p, Float) and number_like(value) and number_like(other):
            if p.log and min(value, other, p.low) > 0:
                gap = abs(math.log(value) - math.log(other)) / math.log(p.high / p.low)
            else:
                gap = abs(value - other) / ((p.high - p.low) or 1.0)
            if gap > tolerance:
                return False
        elif value != other:
            return False
    return True


def number_like(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class ConfigIndex(Generic[T]):
    """The trials of a history as columns, to find the first one with a given config by the
    rule of `same_config` (which stays the reference: a test compares the two)."""

    def __init__(self, trials: Sequence[T], space: SearchSpace):
        self.trials = list(trials)
        self.space = space
        keysets: dict[frozenset[str], int] = {}
        self._keyset = np.array([keysets.setdefault(frozenset(t.params), len(keysets))
                                 for t in self.trials], dtype=np.int64)
        self._keysets = keysets
        self._columns: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def _column(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Trial values of `name` as objects, and as floats (NaN where not a finite number)."""
        if name not in self._columns:
            values = [t.params.get(name) for t in self.trials]
            objects = np.empty(len(values), dtype=object)
            objects[:] = values
            floats = np.array([v if isinstance(v, (int, float)) and not isinstance(v, bool)
                               else np.nan for v in values], dtype=np.float64)
            floats[~np.isfinite(floats)] = np.nan
            self._columns[name] = (objects, floats)
        return self._columns[name]

    def first(self, params: Mapping[str, Any],
              tolerance: float = REPEAT_TOLERANCE) -> T | None:
        keyset = self._keysets.get(frozenset(params))
        if keyset is None:
            return None
        match = self._keyset == keyset
        for name, value in params.items():
            if not match.any():
                return None
            objects, floats = self._column(name)
            p = self.space.params.get(name)
            if isinstance(p, Float) and number_like(value):
                numeric = ~np.isnan(floats)
                with np.errstate(divide="ignore", invalid="ignore"):
                    if p.log and min(value, p.low) > 0:
                        logs = np.abs(np.log(floats) - math.log(value)) / math.log(p.high / p.low)
                        gap = np.where(floats > 0, logs,
                                       np.abs(floats - value) / ((p.high - p.low) or 1.0))
                    else:
                        gap = np.abs(floats - value) / ((p.high - p.low) or 1.0)
                close = numeric & (gap <= tolerance)
                # A value that is not a finite number is compared as it is.
                other = ~numeric & match
                if other.any():
                    close[other] = [o == value for o in objects[other]]
                match &= close
            else:
                match &= _equal(objects, value)
        hits = np.flatnonzero(match)
        return self.trials[int(hits[0])] if len(hits) else None


def _equal(objects: np.ndarray, value: Any) -> np.ndarray:
    """Element-wise `==` of an object column with one value (numpy's loop for a scalar)."""
    if value is None or isinstance(value, (str, int, float)):
        equal = objects == value
        if isinstance(equal, np.ndarray) and equal.dtype == bool:
            return equal
    return np.fromiter((o == value for o in objects), dtype=bool, count=len(objects))
