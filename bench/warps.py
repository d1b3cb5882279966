"""bench/engine.py's warped arms (`auto-rank`, `auto-cap`, `auto-log`): the default with its GP
fitted on warped losses (measured 2026-12-04 against the default's raw losses and not taken:
bench/README.md#the-default-sampler)."""

from __future__ import annotations

from functools import cache
from typing import Any


def warp(values: Any, how: str, minimize: bool = True) -> Any:
    """Losses as a warped arm's GP is fitted on them, in the same order (a better value stays
    better): "rank", normal scores of their ranks (ties share one); "cap", the worse half at
    the median; "log", the log of their distance from the best plus 1% of the median distance.
    (Measured 2026-12-04 against the default's raw losses and not taken:
    bench/README.md#the-default-sampler.)"""
    import numpy as np
    from scipy.stats import norm, rankdata

    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return values
    if how == "rank":
        return norm.ppf((rankdata(values) - 0.5) / len(values))
    if how == "cap":
        middle = float(np.median(values))
        return np.minimum(values, middle) if minimize else np.maximum(values, middle)
    if how == "log":
        gap = values - values.min() if minimize else values.max() - values
        scale = np.median(gap[gap > 0]) if np.any(gap > 0) else 1.0
        out = np.log(gap + 0.01 * scale)
        return out if minimize else -out
    raise ValueError(f"Unknown warp {how!r}: expected 'rank', 'cap' or 'log'")


@cache  # the classes once per process, not once per trial
def _warped_auto() -> type:
    import copy

    import numpy as np
    from optuna.study import StudyDirection

    from tunepilot.proposers.auto import Auto
    from tunepilot.proposers.gp import GP

    class WarpedGP(GP):
        """The default's GP fitted on warped losses (`warp`); the study is untouched."""

        def __init__(self, *args: Any, warp: str, **kw: Any):
            super().__init__(*args, **kw)
            self.warp = warp

        def _sample_relative_impl(self, study: Any, completed_trials: list[Any],
                                  running_trials: list[Any], search_space: Any) -> Any:
            values = warp(np.array([t.value for t in completed_trials]), self.warp,
                          study.direction == StudyDirection.MINIMIZE)
            told = []
            for t, v in zip(completed_trials, values, strict=True):
                t = copy.copy(t)
                t.value = float(v)
                told.append(t)
            return super()._sample_relative_impl(study, told, running_trials, search_space)

    class Warped(Auto):
        """The default, its GP draws by `WarpedGP`."""

        def __init__(self, *args: Any, warp: str, **kw: Any):
            super().__init__(*args, **kw)
            self.warp = warp

        def _pick(self, study: Any) -> Any:
            inner = super()._pick(study)
            if type(inner) is GP:
                self.inner = inner = WarpedGP(seed=self.seed, n_startup_trials=self.first,
                                              warn_independent_sampling=False, warp=self.warp)
            return inner

    return Warped


def warped(seed: int | None, space: Any, number: int, warp: str, **kw: Any) -> Any:
    return _warped_auto()(seed, space, number, warp=warp, **{"every": 0, **kw})
