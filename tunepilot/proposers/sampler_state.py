"""What an Optuna sampler has learned, in a few lines: shown with its candidate to a reviewing
model (the `review` strategy). TPE: the region its "good" group covers; CMA-ES: its mean and step
size; random search: nothing. The registry (`samplers`) names each kind's view."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tunepilot.memory.text import fmt, format_params
from tunepilot.space import SearchSpace

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution


GOOD_GROUP = "TPE draws near its 'good' group"  # starts the line that gives its span


def _finished(study: optuna.Study) -> tuple[list[Any], int]:
    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    pruned = len(study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)))
    return complete, pruned


def describe_tpe(sampler: Any, study: optuna.Study, space: SearchSpace,
                 search_space: Mapping[str, BaseDistribution],
                 candidate: Mapping[str, Any] | None = None) -> list[str]:
    """TPE's good group, in a few lines for the prompt, and which of the `candidate`'s values
    lie outside it (TPE exploring, not a mistake)."""
    complete, pruned = _finished(study)
    n = len(complete)
    # Counted as Optuna's TPE counts: its start-up and its good group's size are over the
    # complete and the pruned trials; the good group is the best complete ones first.
    finished = n + pruned
    split = f"{n} complete, {pruned} pruned" if pruned else ""
    startup = getattr(sampler, "_n_startup_trials", 10)
    if finished < startup:
        return [f"TPE samples at random until {startup} trials are finished ({finished} "
                f"are{': ' + split if split else ''}): this candidate is a random draw"]
    if not complete:
        return [f"TPE models its {finished} finished trials, all pruned: no complete "
                "trial to show"]
    from optuna.samplers._tpe.sampler import default_gamma

    gamma = getattr(sampler, "_gamma", None) or default_gamma
    good = sorted(complete, key=lambda t: float(t.value or 0.0))[:gamma(finished)]
    lines = [f"{GOOD_GROUP}, the best {len(good)} of its {finished} "
             f"finished trials{f' ({split})' if split else ''}, which spans: "
             + _spans(good, space)]
    outside = _outside(candidate or {}, good, space)
    if outside:
        lines.append(f"the candidate's {outside} lie outside that span: TPE exploring, "
                     "as it does on purpose now and then")
    return lines


def describe_cmaes(sampler: Any, study: optuna.Study, space: SearchSpace,
                   search_space: Mapping[str, BaseDistribution],
                   candidate: Mapping[str, Any] | None = None) -> list[str]:
    """CMA-ES's mean and step size."""
    complete, _ = _finished(study)
    state = _cma_state(sampler, complete, search_space)
    return [state] if state else [
        f"CMA-ES has not started its search distribution yet ({len(complete)} trials complete)"]


def describe_gp(sampler: Any, study: optuna.Study, space: SearchSpace,
                search_space: Mapping[str, BaseDistribution],
                candidate: Mapping[str, Any] | None = None) -> list[str]:
    """A GP's candidate: where its expected improvement over the best trial is highest."""
    complete, pruned = _finished(study)
    if len(complete) < getattr(sampler, "_n_startup_trials", 10):
        return [f"the GP waits for {getattr(sampler, '_n_startup_trials', 10)} complete trials "
                f"({len(complete)} are): this candidate is a random draw"]
    best = min(complete, key=lambda t: float(t.value or 0.0))
    return [f"a Gaussian process models the {len(complete)} complete trials; the candidate is "
            "where it expects the largest improvement on the best one (#"
            f"{best.number}: {format_params(best.params, list(space.params), digits=3)})"]


def describe_qmc(sampler: Any, study: optuna.Study, space: SearchSpace,
                 search_space: Mapping[str, BaseDistribution],
                 candidate: Mapping[str, Any] | None = None) -> list[str]:
    return ["the first trials are a scrambled Sobol sequence: an even cover of the space, no "
            "model yet; this candidate is its next point"]


def describe_lhs(sampler: Any, study: optuna.Study, space: SearchSpace,
                 search_space: Mapping[str, BaseDistribution],
                 candidate: Mapping[str, Any] | None = None) -> list[str]:
    return ["the first trials are a Latin hypercube: each parameter's range cut into as many "
            "strata as trials, one trial in each; no model yet; this candidate is its next point"]


def describe_local(sampler: Any, study: optuna.Study, space: SearchSpace,
                   search_space: Mapping[str, BaseDistribution],
                   candidate: Mapping[str, Any] | None = None) -> list[str]:
    best = sampler.best(study, search_space)  # `auto.NearBest`'s: the trial it drew near
    if best is None:
        return ["a local draw with no finished trial to draw near: this candidate is a random "
                "draw"]
    which = ("the trial a GP fitted to the losses so far rates best"
             if getattr(sampler, "anchor", "seen") == "model" else "the best trial so far")
    return [f"a local draw: {which} (#{best.number}, {fmt(best.value, 4)}: "
            f"{format_params(best.params, digits=3)}) with each number moved by about a tenth "
            "of its (log) range and each choice kept 4 times in 5; the default draws one trial "
            "in 3 this way, beside the GP's"]


def describe_random(sampler: Any, study: optuna.Study, space: SearchSpace,
                    search_space: Mapping[str, BaseDistribution],
                    candidate: Mapping[str, Any] | None = None) -> list[str]:
    return ["random search has no model: every candidate is a random draw"]


def _spans(trials: list[Any], space: SearchSpace) -> str:
    parts = []
    for name in space.params:
        values = [t.params[name] for t in trials if name in t.params]
        if not values:
            continue
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            low, high = min(values), max(values)
            parts.append(f"{name} {fmt(low, 3)}" + ("" if low == high else f" to {fmt(high, 3)}"))
        else:
            parts.append(f"{name} in {{{', '.join(sorted({fmt(v, 3) for v in values}))}}}")
    return "; ".join(parts)


def _outside(candidate: Mapping[str, Any], good: list[Any], space: SearchSpace) -> str:
    """The candidate's values outside the span (numbers) or the set (choices) of `good`."""
    parts = []
    for name in space.params:
        values = [t.params[name] for t in good if name in t.params]
        if name not in candidate or not values:
            continue
        value = candidate[name]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool)
                      for v in [*values, value])
        if (numeric and not min(values) <= value <= max(values)) or (
                not numeric and value not in values):
            parts.append(f"{name}={fmt(value, 3)}")
    return ", ".join(parts)


def _cma_state(sampler: Any, complete: list[Any],
               search_space: Mapping[str, BaseDistribution]) -> str | None:
    """CMA-ES's mean (in the parameters' own units) and step size (a share of each range),
    read from the optimizer Optuna stores with the trials. Optuna keeps these internals
    private, so this reads them defensively."""
    try:
        from optuna._transform import _SearchSpaceTransform

        optimizer = sampler._restore_optimizer(complete)
        if optimizer is None or not search_space:
            return None
        trans = _SearchSpaceTransform(dict(search_space), transform_step=True,
                                      transform_0_1=True)
        mean = trans.untransform(optimizer.mean)
        return (f"CMA-ES generation {optimizer.generation}: mean "
                f"{format_params(mean, digits=3)}; step size {float(optimizer._sigma):.3f} of "
                "each parameter's (log) range")
    except Exception:
        return None
