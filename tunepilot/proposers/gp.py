"""Optuna's GPSampler as the default search (`auto`) uses it: fitted to the stopped trials as
well as the finished ones, its kernel kept across a study's trials, and the trial its model
rates best (where `auto.NearBest` draws near, with `anchor="model"`)."""

from __future__ import annotations

import contextlib
import copy
import math
import sys
import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from optuna.samplers import GPSampler

from tunepilot.errors import CONFIG_DEPENDENT
from tunepilot.memory import History, attrs

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

# The kernel each study's last GP draw in this process fitted: {storage: {study id: kernel}},
# the storage held weakly (keyed by its `id`, a storage made after another was collected could
# take that id and be handed a kernel it never fitted).
_KERNELS: weakref.WeakKeyDictionary[Any, dict[int, Any]] = weakref.WeakKeyDictionary()


def last_kernel(study: optuna.Study) -> Any:
    """The kernel the study's last GP draw in this process fitted (None before one)."""
    return _KERNELS.get(study._storage, {}).get(study._study_id)


class GP(GPSampler):
    """Optuna's GPSampler with two changes:

    - It models the trials that were stopped as well as those that finished. Optuna's fits
      COMPLETE trials only, so a pruned trial taught it nothing and it went back to the region
      just pruned (bench/README.md#time-to-a-target); with every start-up trial pruned it had
      no model at all and drew at random. Here a pruned trial counts at its last reported loss
      (an early epoch's: no better than it would have ended), and a trial the config broke
      (diverged, out of memory, timed out, crashed: `errors.CONFIG_DEPENDENT`) at the worst
      loss of the study.
    - Built anew for each trial (seeded by it), it starts fitting its kernel where the study's
      last GP draw in this process left it, as one GPSampler kept for a whole study does
      (Optuna keeps the fitted kernel in the sampler to start the next fit from it)."""

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        # Under Hyperband, Optuna hands samplers one bracket's view of the study, which cannot
        # be copied; GPSampler reads it through `_get_trials`, which is the whole study's there
        # too, so the whole study is the same reading.
        study = attrs.whole(study)
        view = _with_stopped(study)
        if not hasattr(self, "_gprs_cache_list"):  # an Optuna that keeps no kernel
            with one_thread():
                return super().sample_relative(view, trial, search_space)
        if self._gprs_cache_list is None:
            self._gprs_cache_list = last_kernel(study)
        try:
            with one_thread():
                return super().sample_relative(view, trial, search_space)
        finally:
            if self._gprs_cache_list is not None:
                _KERNELS.setdefault(study._storage, {})[study._study_id] = self._gprs_cache_list


_WARMING: list[threading.Thread] = []  # the one warm-up thread of this process, once started


def warm_up() -> None:
    """Imports what a GP draw needs (torch, Optuna's GP and scipy's optimizer) in a background
    thread, once a process: the default sampler starts it with its start-up's first trial, so
    the first GP draw after them does not wait for them (many workers on few cores each paid
    it at their first GP draw, in turns: bench/README.md#several-workers)."""
    if _WARMING or "optuna._gp.gp" in sys.modules:
        return

    def imports() -> None:
        import importlib

        try:  # Optuna's GP (torch with it) and its optimizer of the acquisition (scipy's)
            for module in ("optuna._gp.gp", "optuna._gp.optim_mixed"):
                importlib.import_module(module)
        except Exception:  # a GP draw imports them again, and says what fails
            return

    thread = threading.Thread(target=imports, name="tunepilot-gp-imports", daemon=True)
    _WARMING.append(thread)
    thread.start()


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread for a GP draw, as many as before afterwards (a trainer in this
    process keeps its own). A study's GP is a few hundred points at most: more threads add
    their start and their spinning and no speed, and cost most beside other workers on the
    same cores (bench/README.md#several-workers)."""
    import torch

    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _with_stopped(study: optuna.Study) -> optuna.Study:
    """The study as GPSampler reads it: where it asks for COMPLETE trials it also gets the
    pruned ones and those the config broke, each as COMPLETE at the loss `stopped_losses`
    gives it. A shallow copy; the study itself and its storage are untouched."""
    from optuna.trial import TrialState

    view = copy.copy(study)

    def get_trials(deepcopy: bool = True, states: Any = None, use_cache: bool = False) -> Any:
        trials = study._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)
        if states is None or TrialState.COMPLETE not in states:
            return trials
        stopped = study._get_trials(deepcopy=False, states=(TrialState.PRUNED, TrialState.FAIL),
                                    use_cache=use_cache)
        done = study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,),
                                 use_cache=use_cache)
        losses = stopped_losses(done, stopped, study.direction) if stopped else {}
        losses.update(model_capped(done, study.direction))
        if not losses:
            return trials
        out = []
        for t in list(trials) + [t for t in stopped if t.number in losses]:
            if t.number in losses:
                t = copy.copy(t)
                t.state, t.value = TrialState.COMPLETE, losses[t.number]
            out.append(t)
        return sorted(out, key=lambda t: t.number)

    view._get_trials = get_trials  # type: ignore[method-assign]
    return view


def stopped_losses(done: list[FrozenTrial], stopped: list[FrozenTrial],
                   direction: Any) -> dict[int, float]:
    """{trial number: the value it is modelled at} for trials that did not finish: a pruned
    trial at its last reported value; a trial the config broke (`errors.CONFIG_DEPENDENT`), or
    a pruned one whose last value is not finite, at the worst finite value of the study.
    Trials failed by something else (a bug in the trainer, an interrupt) are left out."""
    from optuna.study import StudyDirection
    from optuna.trial import TrialState

    def last(t: FrozenTrial) -> float | None:
        if t.state != TrialState.PRUNED or not t.intermediate_values:
            return None
        value = t.intermediate_values[max(t.intermediate_values)]
        return value if math.isfinite(value) else None

    finite = [float(t.value) for t in done if t.value is not None and math.isfinite(t.value)]
    finite += [v for v in map(last, stopped) if v is not None]
    worst = (max if direction == StudyDirection.MINIMIZE else min)(finite) if finite else None
    out: dict[int, float] = {}
    for t in stopped:
        broke = (t.state == TrialState.FAIL and
                 (History.error_of(t) or {}).get("kind") in CONFIG_DEPENDENT)
        if t.state == TrialState.PRUNED or broke:
            value = last(t)
            value = worst if value is None else value
            if value is not None:
                out[t.number] = value
    return out


def model_capped(done: list[FrozenTrial], direction: Any) -> dict[int, float]:
    """{trial number: value} for the LLM's complete trials worse than every trial it did not
    propose, modelled at the worst of those: a model's config on a cliff of the space (chance
    level, a diverged run) does not stretch the GP's scale past what the engine met itself
    (bench/README.md#what-a-models-knowledge-buys-and-its-trust)."""
    from optuna.study import StudyDirection

    def by_model(t: FrozenTrial) -> bool:
        return t.user_attrs.get(attrs.PROPOSER) == "llm"

    own = [float(t.value) for t in done if not by_model(t) and t.value is not None
           and math.isfinite(t.value)]
    if not own:
        return {}
    worse, worst = ((float.__gt__, max(own)) if direction == StudyDirection.MINIMIZE
                    else (float.__lt__, min(own)))
    return {t.number: worst for t in done if by_model(t) and t.value is not None
            and worse(float(t.value), worst)}


def model_best(study: optuna.Study, done: list[FrozenTrial],
                search_space: Mapping[str, BaseDistribution]) -> int:
    """The index in `done` of the trial whose loss a GP fitted to `done` predicts best: on a
    noisy objective, not the luckiest trial but the one whose neighbours agree. The kernel is
    the study's last GP draw's in this process where there is one, else fitted here."""
    import torch
    from optuna._gp import gp, prior
    from optuna._gp import search_space as gp_space
    from optuna.study import StudyDirection

    internal = gp_space.SearchSpace(dict(search_space))
    x = internal.get_normalized_params(done)
    y = np.array([float(t.value or 0.0) for t in done])
    if study.direction == StudyDirection.MINIMIZE:
        y = -y
    y = (y - y.mean()) / max(float(y.std()), 1e-12)
    cats = internal.is_categorical
    cached = last_kernel(study)
    with torch.device("cpu"), one_thread():
        if cached and len(cached[0].inverse_squared_lengthscales) == internal.dim:
            gpr = gp.GPRegressor(torch.from_numpy(cats), torch.from_numpy(x), torch.from_numpy(y),
                                 cached[0].inverse_squared_lengthscales, cached[0].kernel_scale,
                                 cached[0].noise_var)
            gpr._cache_matrix()
        else:
            gpr = gp.fit_kernel_params(x, y, cats, prior.default_log_prior,
                                       prior.DEFAULT_MINIMUM_NOISE_VAR, False)
        with torch.no_grad():
            mean, _ = gpr.posterior(torch.from_numpy(x))
    return int(torch.argmax(mean))


VET_MIN_TRIALS = 5  # complete trials before the sampler's model can rate a config
# How far the model's hope for a config may reach: its mean less this many sds (at 2, too many
# of a misleading model's probes got through:
# bench/README.md#what-a-models-knowledge-buys-and-its-trust).
VET_SDS = 1.0


def can_rate(history: History) -> bool:
    """Whether the study has the complete trials `rates_worse` needs."""
    return sum(1 for t in history if t.state == "complete" and t.value is not None) \
        >= VET_MIN_TRIALS


def rates_worse(history: History, space: Any, config: Mapping[str, Any],
                candidate: Mapping[str, Any]) -> str | None:
    """Why a GP fitted to the study's complete trials expects `config` to lose to `candidate`
    even at its most hopeful (its predicted loss less `VET_SDS` standard deviations above the
    candidate's predicted loss: a chance under 16% of beating it), or None where it cannot say
    so (too few trials, or `config` might win). For `review`: a model whose record is below
    even has its overrides checked by the engine's own model before a trial is spent on them."""
    import torch
    from optuna._gp import gp, prior
    from optuna._gp import search_space as gp_space
    from optuna.trial import create_trial

    dists = space.distributions()
    done = [t for t in history if t.state == "complete" and t.value is not None
            and all(k in t.params for k in dists)]
    if len(done) < VET_MIN_TRIALS or not dists:
        return None

    def frozen(params: Mapping[str, Any], value: float) -> Any:
        return create_trial(params={k: params[k] for k in dists}, distributions=dists,
                            value=value)

    internal = gp_space.SearchSpace(dict(dists))
    x = internal.get_normalized_params([frozen(t.params, float(t.value or 0.0)) for t in done])
    y = -np.array([float(t.value or 0.0) for t in done])  # Optuna's GP maximizes
    mean, sd = float(y.mean()), max(float(y.std()), 1e-12)
    points = internal.get_normalized_params([frozen(config, 0.0), frozen(candidate, 0.0)])
    with torch.device("cpu"), one_thread():
        gpr = gp.fit_kernel_params(x, (y - mean) / sd, internal.is_categorical,
                                   prior.default_log_prior, prior.DEFAULT_MINIMUM_NOISE_VAR,
                                   False)
        with torch.no_grad():
            mu, var = gpr.posterior(torch.from_numpy(points))
    loss = -(mu.numpy() * sd + mean)
    spread = np.sqrt(var.numpy()) * sd
    hope = float(loss[0] - VET_SDS * spread[0])
    if hope <= float(loss[1]):
        return None
    return (f"the sampler's model expects {loss[0]:.4g} of it (at best {hope:.4g}) against "
            f"{loss[1]:.4g} of the candidate")
