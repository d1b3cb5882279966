"""What a config costs, beside what it is expected to buy: the default search's rule when the
goal is the clock.

A user who gives a target (`--target`) or a wall-time budget (`--timeout`) pays for the search in
seconds, not trials: a config that trains in 20 s and one that trains 20 minutes are not worth
the same to them. There the default's Gaussian-process draws (`auto`) fit a second GP, to the
log of each trial's own seconds (`seconds`: the trainer's `wall_time_s` where it gave one, else
the trial's duration less the sampler's; a pruned trial's partial time and an out-of-memory
trial's time count as what that config cost), and choose the config with the most expected
improvement per expected second raised to a power (`RULES`):

- `ei-per-s` (with a target): log EI - log cost, Snoek et al.'s EI per second;
- `carbo` (with a time budget and no target): log EI - a log cost, cooled from 1 to 0 as the
  budget is spent (Lee et al.'s CArBO): cheap configs first, then the model's best whatever it
  costs while there is time left to run it.

Which rule measured best, and beside which peers: bench/README.md#hours-not-trials. With a
trial budget alone the per-trial rule stays (`auto.choose`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tunepilot.proposers.gp import GP

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

# The rules by name, and what the first lines say of each.
RULES = {
    "ei-per-s": "expected improvement per expected second",
    "carbo": "expected improvement per expected second, the cost's weight cooled to 0 as the "
             "time budget is spent (CArBO)",
}
FLOOR_S = 0.01  # a trial's seconds are modelled as at least this (log of 0 is not a cost)


def seconds(t: Any) -> float:
    """A trial's own time (a `TrialRecord`): the trainer's figure where it gave one, else the
    trial's, less the sampler's draw."""
    if t.train is not None and t.train.wall_time_s:
        return float(t.train.wall_time_s)
    return max(0.0, float(t.duration_s or 0.0) - float((t.sampler or {}).get("s") or 0.0))


def rule_for(goal: Mapping[str, Any]) -> str | None:
    """The rule for a study's goal ({"target", "timeout", "n_trials"}: `Tuner.run`'s), None
    where the goal is a trial budget alone."""
    if goal.get("target") is not None:
        return "ei-per-s"
    if goal.get("timeout"):
        return "carbo"
    return None


def clock_line(target: float | None, timeout: float | None) -> str | None:
    """The first lines' word on the rule for a run's goal (None: a trial budget alone)."""
    rule = rule_for({"target": target, "timeout": timeout})
    if rule is None:
        return None
    goal = f"the target {target:g}" if target is not None else f"a time budget of {timeout:g} s"
    return (f"cost: the goal is {goal}, so the GP draws weigh what a config is expected to buy "
            f"against the seconds it is expected to take ({RULES[rule]}; a second GP models "
            "the trials' seconds): bench/README.md#hours-not-trials")


def cost_weight(rule: str, goal: Mapping[str, Any], spent_s: float) -> float:
    """The power of the expected cost the rule divides by: 1 for `ei-per-s`; for `carbo`, the
    share of the time budget left (1 at the start, 0 when it is spent)."""
    if rule == "carbo" and goal.get("timeout"):
        return max(0.0, 1.0 - spent_s / float(goal["timeout"]))
    return 1.0


class CostGP(GP):
    """tunepilot's GP (`gp.GP`) whose acquisition divides expected improvement by the expected
    seconds to the power `cost_weight`: log EI(x) - w * log cost(x), the cost a GP fitted to
    the log of the trials' seconds. `expected_s`: what the model expected the drawn config to
    cost (recorded with the trial)."""

    def __init__(self, *, rule: str, goal: Mapping[str, Any], **kw: Any):
        super().__init__(**kw)
        self.rule, self.goal = rule, dict(goal)
        self.expected_s: float | None = None
        self.weight: float | None = None

    def _get_acqf_and_best_params(self, completed_trials: list[FrozenTrial], gprs_list: Any,
                                  internal_search_space: Any, normalized_params: np.ndarray,
                                  *args: Any) -> Any:
        acqf, best = super()._get_acqf_and_best_params(
            completed_trials, gprs_list, internal_search_space, normalized_params, *args)
        from tunepilot.memory.history import TrialRecord

        costs = np.array([max(FLOOR_S, seconds(TrialRecord.from_frozen(t)))
                          for t in completed_trials])
        self.weight = cost_weight(self.rule, self.goal, float(costs.sum()))
        model = fit_cost(normalized_params, costs, internal_search_space)
        if model is None:
            return acqf, best
        return _per_second()(acqf, model, self.weight), best

    def _optimize_acqf(self, acqf: Any, best_params: np.ndarray | None) -> np.ndarray:
        x = super()._optimize_acqf(acqf, best_params)
        self.expected_s = None
        if isinstance(acqf, _per_second()):
            self.expected_s = acqf.cost.seconds(np.asarray(x)[None, :])[0]
        return x


class LogCost:
    """A GP of log seconds over the normalized configs: `log_s(x)` its mean (a torch tensor),
    `seconds(x)` the cost it expects (numpy)."""

    def __init__(self, gpr: Any, mean: float, std: float):
        self.gpr, self.mean, self.std = gpr, mean, std

    def log_s(self, x: Any) -> Any:
        mu, _ = self.gpr.posterior(x)
        return mu * self.std + self.mean

    def seconds(self, x: np.ndarray) -> list[float]:
        import torch

        with torch.no_grad():
            return [float(math.exp(v)) for v in self.log_s(torch.from_numpy(x)).numpy()]


def fit_cost(x: np.ndarray, costs: np.ndarray, internal_search_space: Any) -> LogCost | None:
    """A GP fitted to the log of `costs` at the normalized configs `x` (None when they all cost
    the same: nothing to weigh)."""
    import torch
    from optuna._gp import gp, prior

    y = np.log(costs)
    mean, std = float(y.mean()), float(y.std())
    if std < 1e-9:
        return None
    with torch.device("cpu"):
        gpr = gp.fit_kernel_params(X=x, Y=(y - mean) / std,
                                   is_categorical=internal_search_space.is_categorical,
                                   log_prior=prior.default_log_prior,
                                   minimum_noise=prior.DEFAULT_MINIMUM_NOISE_VAR,
                                   deterministic_objective=False)
    return LogCost(gpr, mean, std)


@functools.cache
def _per_second() -> Any:
    """`PerSecond`'s class, made on first use: Optuna's acquisition module is not imported by
    a worker whose goal is a trial budget."""
    from optuna._gp.acqf import BaseAcquisitionFunc

    class PerSecond(BaseAcquisitionFunc):
        """An acquisition (Optuna's log EI, or its batch form beside running trials) less
        `weight` times the expected log seconds: log(EI / cost^weight)."""

        def __init__(self, inner: Any, cost: LogCost, weight: float):
            self.inner, self.cost, self.weight = inner, cost, weight
            super().__init__(inner.length_scales, inner.search_space)

        def eval_acqf(self, x: Any) -> Any:
            return self.inner.eval_acqf(x) - self.weight * self.cost.log_s(x)

    return PerSecond
