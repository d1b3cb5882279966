"""The optimizers a user could pick instead of tunepilot, each driven as its own documentation
shows, with its own defaults, through its ask-and-tell loop (`bench/engine.py` runs them).

Each runner takes a problem, a seed and a budget, runs the problem's declared default first
where it has one (as the library's users would: Optuna's `enqueue_trial`, hyperopt's
`points_to_evaluate`, SMAC's initial design, Ax's `attach_trial`, HEBO's first observation), and
returns the trials in order with the optimizer's own seconds (its asks and tells, the loss's
evaluation left out).

Install: `pip install -e ".[bench]"`, then HEBO without its pins (its metadata asks for numpy
< 1.25 and pymoo 0.6.0; it runs on numpy 2 and pymoo 0.6.2): `pip install --no-deps HEBO`
(`make bench-env` does both).
"""

from __future__ import annotations

import logging
import math
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from families import Problem

from tunepilot import Categorical, Int, SearchSpace


@dataclass
class Trial:
    config: dict[str, Any]
    seen: float  # the loss the optimizer was told
    true: float  # the noise-free loss, for the score
    sampler_s: float  # the optimizer's own seconds for this trial


Runner = Callable[[Problem, int, int], list[Trial]]


def _evaluate(problem: Problem, config: Mapping[str, Any]) -> tuple[dict[str, Any], float,
                                                                     float]:
    config = problem.space.snap(dict(config))
    seen, true = problem.loss(config)
    return config, seen, true


# Optuna -------------------------------------------------------------------------------------

def _optuna(make: Callable[[int], Any]) -> Runner:
    def run(problem: Problem, seed: int, budget: int) -> list[Trial]:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        study = optuna.create_study(sampler=make(seed))
        if problem.default is not None:
            study.enqueue_trial(dict(problem.default))
        dists = problem.space.distributions()
        out = []
        for _ in range(budget):
            start = time.perf_counter()
            trial = study.ask(dists)
            asked = time.perf_counter() - start
            config, seen, true = _evaluate(problem, trial.params)
            start = time.perf_counter()
            study.tell(trial, seen)
            out.append(Trial(config, seen, true, asked + time.perf_counter() - start))
        return out

    return run


def _tpe(seed: int) -> Any:
    import optuna

    return optuna.samplers.TPESampler(seed=seed)


def _gp(seed: int) -> Any:
    import optuna

    return optuna.samplers.GPSampler(seed=seed)


def _random(seed: int) -> Any:
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


# hyperopt -----------------------------------------------------------------------------------

def _hyperopt(problem: Problem, seed: int, budget: int) -> list[Trial]:
    import numpy as np
    from hyperopt import STATUS_OK, Trials, fmin, hp, tpe

    logging.getLogger("hyperopt").setLevel(logging.ERROR)
    space: dict[str, Any] = {}
    for name, p in problem.space.params.items():
        if isinstance(p, Categorical):
            space[name] = hp.choice(name, list(p.choices))
        elif p.log:
            space[name] = hp.loguniform(name, math.log(p.low), math.log(p.high))
        else:
            space[name] = hp.uniform(name, p.low, p.high)
    out: list[Trial] = []
    spent = [0.0]

    def objective(config: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        config, seen, true = _evaluate(problem, _ints(problem.space, config))
        out.append(Trial(config, seen, true, 0.0))
        spent[0] += time.perf_counter() - start
        return {"loss": seen, "status": STATUS_OK}

    points = None
    if problem.default is not None:  # hyperopt takes a choice's index here, not its value
        points = [{k: list(p.choices).index(v) if isinstance(p := problem.space.params[k],
                                                              Categorical) else v
                   for k, v in problem.default.items()}]
    start = time.perf_counter()
    fmin(objective, space, algo=tpe.suggest, max_evals=budget, trials=Trials(),
         rstate=np.random.default_rng(seed), points_to_evaluate=points,
         show_progressbar=False)
    own = (time.perf_counter() - start - spent[0]) / max(len(out), 1)
    for t in out:
        t.sampler_s = own
    return out


def _ints(space: SearchSpace, config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: int(round(v)) if isinstance(space.params.get(k), Int) else v
            for k, v in config.items()}


# SMAC3 --------------------------------------------------------------------------------------

def _configspace(space: SearchSpace, seed: int) -> Any:
    from ConfigSpace import (
        CategoricalHyperparameter,
        ConfigurationSpace,
        UniformFloatHyperparameter,
        UniformIntegerHyperparameter,
    )

    cs = ConfigurationSpace(seed=seed)
    for name, p in space.params.items():
        if isinstance(p, Categorical):
            cs.add(CategoricalHyperparameter(name, [str(c) for c in p.choices]))
        elif isinstance(p, Int):
            cs.add(UniformIntegerHyperparameter(name, int(p.low), int(p.high), log=p.log))
        else:
            cs.add(UniformFloatHyperparameter(name, float(p.low), float(p.high), log=p.log))
    return cs


def _from_strings(space: SearchSpace, config: Mapping[str, Any]) -> dict[str, Any]:
    """A choice as the space has it (ConfigSpace and Ax hold choices as strings)."""
    out = dict(config)
    for name, p in space.params.items():
        if isinstance(p, Categorical):
            out[name] = next(c for c in p.choices if str(c) == str(config[name]))
    return out


def _smac(problem: Problem, seed: int, budget: int) -> list[Trial]:
    from ConfigSpace import Configuration
    from smac import HyperparameterOptimizationFacade as HPO
    from smac import Scenario
    from smac.runhistory.dataclasses import TrialValue

    logging.getLogger("smac").setLevel(logging.ERROR)
    cs = _configspace(problem.space, seed)
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Scenario(cs, deterministic=True, n_trials=budget, seed=seed,
                            output_directory=tmp)
        extra = None
        if problem.default is not None:
            extra = [Configuration(cs, {k: str(v) if isinstance(problem.space.params[k],
                                                                 Categorical) else v
                                        for k, v in problem.default.items()})]
        design = HPO.get_initial_design(scenario, additional_configs=extra)
        smac = HPO(scenario, lambda config, seed=0: 0.0, initial_design=design, overwrite=True,
                   logging_level=logging.ERROR)
        out = []
        for _ in range(budget):
            start = time.perf_counter()
            info = smac.ask()
            asked = time.perf_counter() - start
            config, seen, true = _evaluate(problem, _from_strings(problem.space,
                                                                  dict(info.config)))
            start = time.perf_counter()
            smac.tell(info, TrialValue(cost=seen))
            out.append(Trial(config, seen, true, asked + time.perf_counter() - start))
    return out


# HEBO ---------------------------------------------------------------------------------------

def _hebo(problem: Problem, seed: int, budget: int) -> list[Trial]:
    import numpy as np
    import pandas as pd
    import torch
    from hebo.design_space.design_space import DesignSpace
    from hebo.optimizers.hebo import HEBO

    params = []
    for name, p in problem.space.params.items():
        if isinstance(p, Categorical):
            params.append({"name": name, "type": "cat", "categories": [str(c) for c in p.choices]})
        elif isinstance(p, Int):
            params.append({"name": name, "type": "pow_int" if p.log else "int",
                           "lb": int(p.low), "ub": int(p.high)})
        else:
            params.append({"name": name, "type": "pow" if p.log else "num",
                           "lb": float(p.low), "ub": float(p.high)})
    np.random.seed(seed)
    torch.manual_seed(seed)
    opt = HEBO(DesignSpace().parse(params), scramble_seed=seed)
    out = []
    pending = [dict(problem.default)] if problem.default is not None else []
    for _ in range(budget):
        start = time.perf_counter()
        if pending:
            rec = pd.DataFrame([{k: str(v) if isinstance(problem.space.params[k], Categorical)
                                 else v for k, v in pending.pop().items()}])
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rec = opt.suggest(n_suggestions=1)
        asked = time.perf_counter() - start
        row = rec.iloc[0].to_dict()
        config, seen, true = _evaluate(problem, _from_strings(problem.space, _ints(
            problem.space, row)))
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt.observe(rec, np.array([[seen]]))
        out.append(Trial(config, seen, true, asked + time.perf_counter() - start))
    return out


# Ax (BoTorch) -------------------------------------------------------------------------------

def _ax(problem: Problem, seed: int, budget: int) -> list[Trial]:
    from ax.api.client import Client
    from ax.api.configs import ChoiceParameterConfig, RangeParameterConfig

    logging.getLogger("ax").setLevel(logging.ERROR)
    client = Client(random_seed=seed)
    parameters: list[Any] = []
    for name, p in problem.space.params.items():
        if isinstance(p, Categorical):
            parameters.append(ChoiceParameterConfig(name, [str(c) for c in p.choices], "str",
                                                    is_ordered=False))
        else:
            parameters.append(RangeParameterConfig(
                name, (p.low, p.high), "int" if isinstance(p, Int) else "float",
                scaling="log" if p.log else "linear"))
    client.configure_experiment(parameters=parameters)
    client.configure_optimization(objective="-loss")
    out = []
    pending = [dict(problem.default)] if problem.default is not None else []
    for _ in range(budget):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if pending:
                given = {k: str(v) if isinstance(problem.space.params[k], Categorical) else v
                         for k, v in pending.pop().items()}
                index, params = client.attach_trial(given), given
            else:
                [(index, params)] = client.get_next_trials(max_trials=1).items()
        asked = time.perf_counter() - start
        config, seen, true = _evaluate(problem, _from_strings(problem.space, dict(params)))
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            client.complete_trial(index, raw_data={"loss": seen})
        out.append(Trial(config, seen, true, asked + time.perf_counter() - start))
    return out


PEERS: dict[str, Runner] = {
    "optuna-tpe": _optuna(_tpe),
    "optuna-gp": _optuna(_gp),
    "random": _optuna(_random),
    "hyperopt": _hyperopt,
    "smac": _smac,
    "hebo": _hebo,
    "ax": _ax,
}
