"""What a config costs, beside what it is expected to buy: the default search's rule when the
goal is the clock.

A user who gives a target (`--target`) or a wall-time budget (`--timeout`) pays for the search in
seconds, not trials: a config that trains in 20 s and one that trains 20 minutes are not worth
the same to them. There the default's Gaussian-process draws (`auto`) fit a second GP, to the
log of each trial's own seconds (`TrialRecord.own_s`: the trainer's `wall_time_s` where it
gave one, else the trial's duration less the sampler's; a pruned trial's partial time and an
out-of-memory trial's time count as what that config cost), and choose the config that buys the
most per expected second raised to a power (`RULES`):

- `target` (a target, no time budget): the chance of reaching the target, log P(loss <= target)
  - w log cost, the weight w cooled from 1 to 0 over the trial budget (1 - trials done /
  `--n-trials`): cheap configs first, then the model's best chance whatever it costs. Expected
  improvement in its place (log EI - w log cost) missed the target more often and reached it
  later; plain EI per second (Snoek et al.; w = 1 throughout) stayed where trials are cheap.
- `carbo` (a time budget): log EI - w log cost, w cooled over the time budget (1 - seconds
  spent / `--timeout`; Lee et al.'s CArBO).

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
    "target": "the chance of reaching the target per expected second, the cost's weight cooled "
              "from 1 to 0 over the trial budget",
    "carbo": "expected improvement per expected second, the cost's weight cooled from 1 to 0 "
             "as the time budget is spent (CArBO)",
}
FLOOR_S = 0.01  # a trial's seconds are modelled as at least this (log of 0 is not a cost)


def rule_for(goal: Mapping[str, Any]) -> str | None:
    """The rule for a study's goal ({"target", "timeout", "n_trials"}: `Tuner.run`'s), None
    where the goal is a trial budget alone."""
    if goal.get("timeout"):
        return "carbo"
    if goal.get("target") is not None:
        return "target"
    return None


def clock_line(target: float | None, timeout: float | None) -> str | None:
    """The first lines' word on the rule for a run's goal (None: a trial budget alone)."""
    rule = rule_for({"target": target, "timeout": timeout})
    if rule is None:
        return None
    goal = (f"a time budget of {timeout:g} s" if timeout else "") + \
        (" and " if timeout and target is not None else "") + \
        (f"the target {target:g}" if target is not None else "")
    return (f"cost: the goal is {goal}, so the GP draws weigh what a config is expected to buy "
            f"against the seconds it is expected to take ({RULES[rule]}; a second GP models "
            "the trials' seconds): bench/README.md#hours-not-trials")


def cost_weight(rule: str, goal: Mapping[str, Any], spent_s: float, done: int) -> float:
    """The power of the expected cost the rule divides by: the share of the budget left (1 at
    the start, 0 when it is spent), of the time budget for `carbo` (`spent_s` of the trials'
    own seconds), of the trial budget for `target` (`done` trials)."""
    if rule == "carbo" and goal.get("timeout"):
        return max(0.0, 1.0 - spent_s / float(goal["timeout"]))
    if rule == "target" and goal.get("n_trials"):
        return max(0.0, 1.0 - done / float(goal["n_trials"]))
    return 1.0


class CostGP(GP):
    """tunepilot's GP (`gp.GP`) whose acquisition (log EI; under `target`, the log chance of
    the target) is less the expected log seconds times `cost_weight`: log a(x) - w * log
    cost(x), the cost a GP fitted to the log of the trials' seconds. `expected_s`: what the
    model expected the drawn config to cost (recorded with the trial)."""

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
        if self.rule == "target" and self.goal.get("target") is not None:
            acqf = self.chance(acqf, completed_trials, gprs_list[0], internal_search_space,
                               float(self.goal["target"]), args[0] if args else None)
        return self.priced(acqf, completed_trials, normalized_params, internal_search_space), best

    def chance(self, acqf: Any, completed_trials: list[FrozenTrial], gpr: Any,
               internal_search_space: Any, target: float, running: np.ndarray | None) -> Any:
        """In place of Optuna's log EI (`acqf`), the log chance that a config's loss is at
        `target` or under it, as the loss GP `gpr` predicts (Optuna's LogPI; its batch form
        beside running trials, as Optuna's qLogEI). The GP models the trials' standardized
        negated losses, so the target is put on that scale."""
        from optuna._gp import acqf as acqfs
        from optuna.samplers._gp.sampler import _MAX_QMC_SEED_VALUE, EPS, _standardize_values

        if not isinstance(acqf, acqfs.LogEI | acqfs.qLogEI):
            return acqf  # (constrained or multi-objective: not a tunepilot study's)
        _, mean, std = _standardize_values(-np.array([[t.value] for t in completed_trials]))
        threshold = float((-target - mean[0]) / max(EPS, float(std[0])))
        if running is None:
            return acqfs.LogPI(gpr=gpr, search_space=internal_search_space,
                               threshold=threshold)
        return acqfs.qLogPI(gpr=gpr, search_space=internal_search_space, threshold=threshold,
                            n_qmc_samples=self._n_qmc_samples_qei,
                            qmc_seed=self._rng.rng.randint(_MAX_QMC_SEED_VALUE),
                            normalized_params_of_running_trials=running)

    def priced(self, acqf: Any, completed_trials: list[FrozenTrial], x: np.ndarray,
               internal_search_space: Any) -> Any:
        """`acqf` less `weight` times the expected log seconds of a cost GP fitted to the
        trials' own seconds (`acqf` itself where they all cost the same)."""
        from tunepilot.memory.history import TrialRecord

        costs = np.array([max(FLOOR_S, TrialRecord.from_frozen(t).own_s)
                          for t in completed_trials])
        self.weight = cost_weight(self.rule, self.goal, float(costs.sum()), len(costs))
        model = fit_cost(x, costs, internal_search_space)
        return acqf if model is None else _per_second()(acqf, model, self.weight)

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
