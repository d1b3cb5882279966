"""The default search: no wasted trial, the first trial a person's, the sampler chosen by rule
and named with its reason."""

from __future__ import annotations

import gc
import math
import statistics
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.samplers import BaseSampler

from tests.conftest import quadratic, run_tune, toy_workdir
from tunepilot import Categorical, Float, Int, SearchSpace, Tuner, trainers
from tunepilot.errors import ConfigError
from tunepilot.memory import History, TrialRecord
from tunepilot.memory.parts import TrainInfo
from tunepilot.proposers import auto, gp, samplers
from tunepilot.proposers.suggest import AgentSampler

SPACE = SearchSpace.of(x=Float(-10.0, 10.0), opt=Categorical(["adam", "sgd"]))


def run(study: str, n: int = 6, space: SearchSpace = SPACE, storage: str = "sqlite:///:memory:",
        fn: Any = quadratic, **kw: Any) -> list[Any]:
    tuner = Tuner(trainers.callable(fn), space, storage=storage, study=study,
                  pruner="none", display=None, **kw)
    return sorted(tuner.run(n_trials=n).history, key=lambda t: t.number)


@pytest.mark.parametrize("sampler", ["tpe", "auto", "random", "cmaes"])
def test_two_studies_with_the_same_seed_draw_different_configs(sampler):
    a, b = run("first", sampler=sampler, seed=0), run("second", sampler=sampler, seed=0)
    assert all(ta.params != tb.params for ta, tb in zip(a, b, strict=True))
    # ... while one study with one seed draws the same again: a benchmark repeats.
    assert [t.params for t in run("first", sampler=sampler, seed=0)] == [t.params for t in a]


class Stubborn(BaseSampler):
    """Proposes x = 1.5 first on every trial, then random values: a sampler that repeats."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.random = optuna.samplers.RandomSampler(seed=3)

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, name, dist):
        self.calls.append(trial.number)
        if self.calls.count(trial.number) == 1:
            return 1.5
        return self.random.sample_independent(study, trial, name, dist)


def test_a_sampler_proposal_equal_to_a_finished_trials_config_is_drawn_again():
    space = SearchSpace.of(x=Float(-10.0, 10.0))
    stubborn = Stubborn()
    study = optuna.create_study(sampler=AgentSampler(space, None, fallback=stubborn))
    study.optimize(lambda t: quadratic(space.sample(t), lambda e, v: None), n_trials=4)
    xs = [t.params["x"] for t in study.trials]
    assert xs[0] == 1.5  # nothing to repeat yet
    assert 1.5 not in xs[1:] and len(set(xs)) == 4
    assert stubborn.calls.count(1) == 2  # trial 1: the repeat, then one draw more


def test_a_small_space_is_not_spent_on_repeats():
    space = SearchSpace.of(width=Categorical([16, 32, 64, 128]), depth=Int(1, 2))  # 8 configs
    trials = run("small", n=6, space=space, sampler="tpe",
                 fn=lambda config, report: config["width"] / config["depth"])
    configs = [tuple(sorted(t.params.items())) for t in trials]
    assert len(set(configs)) == 6


def test_the_spaces_defaults_run_as_trial_0_then_the_start_configs():
    space = SearchSpace.of(x=Float(-10.0, 10.0, default=3.0),
                           opt=Categorical(["adam", "sgd"], default="sgd"))
    trials = run("defaults", n=5, space=space, start=[{"x": -4.0, "opt": "adam"}, {"x": 7.0}])
    assert trials[0].params == {"x": 3.0, "opt": "sgd"}
    assert trials[1].params == {"x": -4.0, "opt": "adam"}
    assert trials[2].params["x"] == 7.0  # a partial config: the sampler drew `opt`
    assert [t.proposer for t in trials[:3]] == ["enqueued"] * 3
    assert {t.proposer for t in trials[3:]} == {"optuna"}


def test_the_defaults_run_once_not_again_on_a_resume(tmp_path):
    space = SearchSpace.of(x=Float(-10.0, 10.0, default=3.0))
    storage = f"sqlite:///{tmp_path / 's.db'}"
    run("resumed", n=2, space=space, storage=storage)
    trials = run("resumed", n=4, space=space, storage=storage)
    assert [t.params["x"] for t in trials].count(3.0) == 1


def test_a_default_outside_the_range_and_a_misspelt_start_config_are_refused():
    with pytest.raises(ValueError, match="default 2.0 is not in the range: 2 is outside"):
        Float(0.0, 1.0, default=2.0)
    with pytest.raises(ConfigError, match=r"start config 1: unknown parameters \['xx'\].*"
                                          r"Did you mean 'x'"):
        Tuner(trainers.callable(quadratic), SPACE, storage="sqlite:///:memory:",
              start=[{"xx": 1.0}], display=None)


def test_the_default_space_of_the_built_in_task_declares_a_first_config():
    defaults = trainers.default_space("lightning").defaults()
    assert defaults["lr"] == 1e-3 and defaults["batch_size"] == 256
    assert defaults["dropout"] == 0.1


def _history(trial_s: float, draws: list[tuple[str, float]]) -> History:
    """A study's records: finished trials of `trial_s` seconds, each drawn by (kind, seconds)."""
    return History(tuple(
        TrialRecord(n, "complete", {"x": 0.0}, 1.0, duration_s=trial_s + s,
                    train=TrainInfo(wall_time_s=trial_s), sampler={"kind": kind, "s": s})
        for n, (kind, s) in enumerate(draws)))


NUMERIC = SearchSpace.of(lr=Float(1e-5, 1.0, log=True), width=Int(8, 1024, log=True),
                         act=Categorical(["relu", "tanh"]))


def test_auto_picks_by_the_space_the_trial_and_the_trials_time():
    assert auto.startup(NUMERIC) == 4  # one more than the parameters, 4 to 10
    assert [auto.choose(History(), NUMERIC, n)[0] for n in range(5)] == ["lhs"] * 4 + ["gp"]
    sobol = [("Latin hypercube", 0.01)] * 4
    # One-minute trials: every GP draw fits in the sampler's share, however it grows.
    assert auto.choose(_history(60.0, [*sobol, *[("GP", 2.0)] * 50]), NUMERIC, 55)[0] == "gp"
    # One-second trials: GP draws of half a second do not fit in a tenth of the time.
    kind, why = auto.choose(_history(1.0, [*sobol, *[("GP", 0.5)] * 3]), NUMERIC, 7)
    assert kind == "tpe" and "past 10% of the search's time beside trials of 1 s" in why
    assert auto.share(1.0) == pytest.approx(0.1) and auto.share(100.0) == pytest.approx(0.3)
    # From twice the start-up on, one trial in 3 the GP would draw is drawn near the best.
    slow = _history(60.0, [*sobol, *[("GP", 2.0)] * 20])
    assert [auto.choose(slow, NUMERIC, n)[0] for n in range(4, 16)] == [
        "local" if n >= 8 and n % 3 == 0 else "gp" for n in range(4, 16)]
    kind, why = auto.choose(slow, NUMERIC, 9 * 3)
    assert kind == "local" and ("from trial 8 on, one trial in 3 is drawn near the trial the GP "
                                "rates best") in why
    assert auto.choose(slow, NUMERIC, 27, every=0)[0] == "gp"  # the rule before 2026-12-04 pm
    assert auto.choose(slow, None, 27, first=4)[0] == "gp"  # no space: no local draws
    # Where the GP's draws do not fit, TPE's: a local draw does not stand in for them.
    assert auto.choose(_history(1.0, [*sobol, *[("GP", 0.5)] * 3]), NUMERIC, 9)[0] == "tpe"
    picked = auto.Auto(0, NUMERIC, 2)
    study = optuna.create_study()
    assert isinstance(picked._pick(study), auto.Latin)
    assert samplers.label(picked) == "Latin hypercube"


def test_the_sampler_keeps_its_share_of_a_night_of_one_second_trials():
    """200 one-second trials, a GP draw costing 5 ms more for each trial the study holds (its
    cost grows with the trials), TPE's 20 ms: the rule's picks keep the sampler's own time
    within its 10% however long the night."""
    draws: list[tuple[str, float]] = []
    for n in range(200):
        kind, _ = auto.choose(_history(1.0, draws), NUMERIC, n)
        cost = {"lhs": 0.001, "gp": 0.005 * n, "local": 0.001, "tpe": 0.02}[kind]
        draws.append(({"lhs": "Latin hypercube", "gp": "GP", "local": "local search",
                       "tpe": "TPE"}[kind], cost))
    spent = sum(s for _, s in draws)
    assert spent / 200 <= 0.1 + 1e-9
    kinds = [k for k, _ in draws]
    assert kinds[:4] == ["Latin hypercube"] * 4 and "GP" in kinds and "TPE" in kinds
    assert "GP" in kinds[4:7]  # as soon as the share can pay for a first draw, then measured


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_a_local_draw_lands_near_the_best_trial_and_keeps_most_choices(direction: str):
    """`auto`'s local draws (`NearBest`): around the best finished trial (the worse ones, a
    pruned trial with a better last value and a failed one are not it), each number within a
    few tenths of its (log) range, ints whole, inside the range; the choice kept about 4 times
    in 5. Before any trial has finished: uniform random draws over the whole space."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    from optuna.trial import TrialState, create_trial

    sign = 1.0 if direction == "minimize" else -1.0
    dists = {"lr": FloatDistribution(1e-5, 1.0, log=True), "width": IntDistribution(8, 1024,
                                                                                    log=True),
             "act": CategoricalDistribution(["relu", "tanh", "gelu"])}
    best = {"lr": 1e-3, "width": 64, "act": "tanh"}
    study = optuna.create_study(direction=direction)
    empty = auto.NearBest(0, NUMERIC_3)
    study.sampler = empty
    first = study.ask(dists)  # nothing finished: random, over the whole space
    assert set(first.params) == set(dists)
    study.tell(first, state=TrialState.FAIL)
    assert "no finished trial to draw near" in samplers.describe(empty, study, NUMERIC_3, dists)[0]
    for params, value, state in ((best, 0.1, TrialState.COMPLETE),
                                 ({"lr": 0.3, "width": 900, "act": "relu"}, 0.5,
                                  TrialState.COMPLETE),
                                 ({"lr": 1e-5, "width": 8, "act": "gelu"}, None,
                                  TrialState.PRUNED)):
        trial = create_trial(params=params, distributions=dists, state=state,
                             value=None if value is None else sign * value,
                             intermediate_values={1: sign * 0.01} if value is None else None)
        study.add_trial(trial)
    shown = samplers.describe(empty, study, NUMERIC_3, dists)  # what a reviewing model reads
    assert "the best trial so far (#1, " in shown[0] and "lr=0.001 width=64 act=tanh" in shown[0]
    kept, lrs, widths = 0, [], []
    for n in range(200):
        study.sampler = auto.NearBest(n, NUMERIC_3)
        trial = study.ask(dists)
        lrs.append(math.log10(trial.params["lr"]))
        widths.append(trial.params["width"])
        kept += trial.params["act"] == "tanh"
        study.tell(trial, state=TrialState.FAIL)  # not a best: every draw is near `best`
    # A tenth of lr's 5 decades is half a decade; of width's 7 doublings, 0.7 of one.
    assert all(abs(x + 3) <= 4 * 0.5 for x in lrs) and 0.3 < statistics.pstdev(lrs) < 0.7
    assert all(isinstance(w, int) and 8 <= w <= 1024 for w in widths)
    assert all(abs(math.log2(w / 64)) <= 4 * 0.7 + 0.1 for w in widths)
    assert 0.75 * 200 < kept < 0.95 * 200  # kept 4 in 5, plus a redraw's 1 in 3 of 1 in 5
    assert samplers.label(auto.NearBest(0, NUMERIC_3)) == "local search"


NUMERIC_3 = SearchSpace.of(lr=Float(1e-5, 1.0, log=True), width=Int(8, 1024, log=True),
                           act=Categorical(["relu", "tanh", "gelu"]))


def test_a_local_draw_on_noisy_losses_goes_near_the_trial_the_model_rates_best():
    """With `anchor="model"` the draw goes near the trial a GP fitted to the losses rates best,
    not the luckiest one: here a config run twice read 0.15 and 0.95 (seed noise), while three
    neighbouring configs agree near 0.2."""
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    dists = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
    space = SearchSpace.of(x=Float(0.0, 1.0), y=Float(0.0, 1.0))
    study = optuna.create_study()
    for x, y, loss in ((0.1, 0.5, 0.15), (0.1, 0.5, 0.95), (0.12, 0.48, 0.9),
                       (0.65, 0.5, 0.21), (0.7, 0.5, 0.2), (0.75, 0.52, 0.22),
                       (0.3, 0.9, 0.8), (0.9, 0.1, 0.7), (0.4, 0.2, 0.75)):
        study.add_trial(create_trial(params={"x": x, "y": y}, distributions=dists, value=loss))
    seen, model = auto.NearBest(0, space), auto.NearBest(0, space, anchor="model")
    assert seen.best(study, dists).params["x"] == 0.1  # type: ignore[union-attr]
    chosen = model.best(study, dists)
    assert chosen is not None and 0.65 <= chosen.params["x"] <= 0.75
    study.sampler = model
    trial = study.ask(dists)
    assert abs(trial.params["x"] - chosen.params["x"]) < 0.45
    line = samplers.describe(model, study, space, dists)[0]
    assert f"the trial a GP fitted to the losses so far rates best (#{chosen.number}, " in line


@pytest.mark.parametrize("seed", [100, None])
def test_the_start_up_trials_cover_every_parameter_once_a_stratum(seed: int | None):
    """A Latin hypercube: with 4 start-up trials, each quarter of lr's (log) range holds one,
    each choice two; trials asked together (several workers) take different points, and the
    next 4 trials are a new hypercube, not the first again. Unseeded (`Tuner(seed=None)`), the
    study draws one design seed and keeps it, so its start-up is one hypercube all the same."""
    n = auto.startup(NUMERIC)
    study = optuna.create_study()
    for number in range(2 * n):
        study.sampler = auto.build("lhs", None if seed is None else seed + number, NUMERIC,
                                   number)
        study.ask(NUMERIC.distributions())  # none told: all running at once
    for block in (study.trials[:n], study.trials[n:]):
        strata = sorted(int((math.log10(t.params["lr"]) + 5) / 5 * n) for t in block)
        assert strata == list(range(n))
        assert sorted(t.params["act"] for t in block) == ["relu", "relu", "tanh", "tanh"]
    assert study.trials[0].params != study.trials[n].params
    if seed is None:
        again = optuna.create_study()  # another unseeded study: another design
        again.sampler = auto.build("lhs", None, NUMERIC, 0)
        assert again.ask(NUMERIC.distributions()).params != study.trials[0].params


def test_the_start_up_draws_the_whole_space_while_other_workers_trials_are_half_drawn(caplog):
    """Workers starting together: the only trials are running ones, one parameter drawn so far.
    Optuna's QMC sampler would read a conditional space off them and warn every worker."""
    study = optuna.create_study()
    running = study.ask()
    running.suggest_float("lr", 1e-5, 1.0, log=True)
    second = study.ask()
    start = auto.Auto(0, NUMERIC, second.number)
    with caplog.at_level("WARNING", logger="optuna"):
        space = start.infer_relative_search_space(study, study.trials[second.number])
        config = start.sample_relative(study, study.trials[second.number], space)
    assert set(space) == set(NUMERIC.params) and set(config) == set(NUMERIC.params)
    assert not [r for r in caplog.records if "conditions" in r.getMessage()]


def test_a_gp_built_for_each_trial_fits_its_kernel_from_the_last_trials(monkeypatch):
    """Optuna's GPSampler keeps its fitted kernel to start the next fit from; tunepilot builds
    a sampler per trial (seeded by it), which must start from the study's last fit too."""
    import optuna.samplers._gp.sampler as gp_sampler

    optuna_gp = gp_sampler.gp  # the module as the sampler sees it (Optuna imports it lazily)
    fit, started_from = optuna_gp.fit_kernel_params, []

    def recording(*args: Any, **kw: Any) -> Any:
        started_from.append(kw.get("gpr_cache"))
        return fit(*args, **kw)

    monkeypatch.setattr(optuna_gp, "fit_kernel_params", recording)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))

    def objective(trial: optuna.Trial) -> float:
        config = NUMERIC.sample(trial)
        return abs(math.log10(config["lr"]) + 3) + (config["act"] == "tanh")

    study.optimize(objective, 6)
    for number in (6, 7):
        study.sampler = auto.build("gp", number, NUMERIC, number, first=4)
        study.optimize(objective, 1)
    assert len(started_from) == 2, started_from
    assert started_from[0] is None and started_from[1] is not None
    assert study.trials[7].params != study.trials[6].params
    # Kept by the storage, weakly: a study in a storage of its own starts afresh, and once the
    # first study's storage is collected its kernel goes with it (keyed by `id`, a storage made
    # after that could take the id, and the kernel).
    assert gp.last_kernel(study) is not None
    assert gp.last_kernel(optuna.create_study()) is None
    kept = len(gp._KERNELS)
    del study
    gc.collect()
    assert len(gp._KERNELS) == kept - 1


def _edge_study() -> optuna.Study:
    """Four finished trials whose loss falls toward x = 1, and two pruned at the edge: the
    README demo's shape (lr = 0.1, the range's edge, pruned at epoch 2)."""
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    dist = {"x": FloatDistribution(0.0, 1.0)}
    study = optuna.create_study()
    for x, loss in [(0.05, 1.0), (0.3, 0.8), (0.55, 0.6), (0.8, 0.4)]:
        study.add_trial(create_trial(params={"x": x}, distributions=dist, value=loss))
    for x in (0.97, 1.0):
        study.add_trial(create_trial(params={"x": x}, distributions=dist,
                                     state=TrialState.PRUNED,
                                     intermediate_values={1: 3.0, 2: 2.0}))
    return study


@pytest.mark.parametrize("kind", ["optuna", "auto"])
def test_the_gp_does_not_go_back_to_where_trials_were_pruned(kind: str):
    """Past x = 0.9 every trial is pruned (loss 2.0 at epoch 1). Optuna's GPSampler models
    finished trials only and proposes the pruned edge again and again; tunepilot's GP models
    the pruned trials at their last loss and stays inside."""
    from optuna.trial import TrialState

    study, drawn = _edge_study(), []
    for i in range(6):
        study.sampler = (optuna.samplers.GPSampler(seed=i, n_startup_trials=4)
                         if kind == "optuna" else auto.build("gp", i, None, i, first=4))
        trial = study.ask()
        x = trial.suggest_float("x", 0.0, 1.0)
        drawn.append(x)
        if x > 0.9:
            trial.report(2.0, 1)
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, 1.0 - x)
    if kind == "optuna":  # the failure this GP exists for; if Optuna fixes it, drop ours
        assert sum(x > 0.9 for x in drawn) >= 3, drawn
    else:
        assert all(x <= 0.9 for x in drawn), drawn
        assert max(drawn) > 0.6, drawn  # and it still goes where the finished trials point


def test_pruned_and_broken_trials_count_at_their_last_loss_or_the_worst():
    from optuna.distributions import FloatDistribution
    from optuna.study import StudyDirection
    from optuna.trial import TrialState, create_trial

    from tunepilot.memory import attrs

    dist = {"x": FloatDistribution(0.0, 1.0)}

    def made(number: int, state: TrialState, **kw: Any) -> Any:
        trial = create_trial(params={"x": number / 10}, distributions=dist, state=state, **kw)
        trial.number = number
        return trial

    done = [made(0, TrialState.COMPLETE, value=0.5), made(1, TrialState.COMPLETE, value=0.7)]
    stopped = [
        made(2, TrialState.PRUNED, intermediate_values={1: 0.9, 2: 0.8}),  # its last: 0.8
        made(3, TrialState.PRUNED, intermediate_values={1: float("nan")}),  # the worst
        made(4, TrialState.PRUNED),  # pruned before any report: the worst
        made(5, TrialState.FAIL, user_attrs={attrs.ERROR: {"kind": "diverged"}}),
        made(6, TrialState.FAIL, user_attrs={attrs.ERROR: {"kind": "oom"}}),
        made(7, TrialState.FAIL, user_attrs={attrs.ERROR: {"kind": "exception"}}),  # a bug: out
        made(8, TrialState.FAIL, user_attrs={attrs.ERROR: {"kind": "interrupted"}}),  # Ctrl-C
        made(9, TrialState.FAIL),
    ]
    got = gp.stopped_losses(done, stopped, StudyDirection.MINIMIZE)
    assert got == {2: 0.8, 3: 0.8, 4: 0.8, 5: 0.8, 6: 0.8}
    assert gp.stopped_losses(done, stopped, StudyDirection.MAXIMIZE)[5] == 0.5


def test_a_models_trial_worse_than_all_the_engines_is_modelled_at_their_worst():
    """A model's config on a cliff of the space (a diverged run, chance level) does not stretch
    the GP's scale past what the engine's own trials met; one within their range is kept."""
    from optuna.distributions import FloatDistribution
    from optuna.study import StudyDirection
    from optuna.trial import TrialState, create_trial

    from tunepilot.memory import attrs

    dist = {"x": FloatDistribution(0.0, 1.0)}

    def made(number: int, value: float, by: str) -> Any:
        trial = create_trial(params={"x": number / 10}, distributions=dist, value=value,
                             state=TrialState.COMPLETE, user_attrs={attrs.PROPOSER: by})
        trial.number = number
        return trial

    done = [made(0, 9.0, "llm"), made(1, 0.5, "optuna"), made(2, 0.7, "optuna"),
            made(3, 0.6, "llm"), made(4, 0.1, "llm")]
    assert gp.model_capped(done, StudyDirection.MINIMIZE) == {0: 0.7}
    assert gp.model_capped(done, StudyDirection.MAXIMIZE) == {4: 0.5}
    assert gp.model_capped([t for t in done if t.number in (0, 3)],
                           StudyDirection.MINIMIZE) == {}  # nothing of the engine's to cap at


def test_a_gp_after_a_start_up_that_was_all_pruned_still_models_it():
    """Every start-up trial pruned: Optuna's GPSampler, counting finished trials only, had too
    few and drew at random; tunepilot's draws from a model of the pruned trials."""
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    dist = {"x": FloatDistribution(0.0, 1.0)}
    study = optuna.create_study()
    for x in (0.1, 0.4, 0.6, 0.9):
        study.add_trial(create_trial(params={"x": x}, distributions=dist,
                                     state=TrialState.PRUNED,
                                     intermediate_values={1: 1.0 + abs(x - 0.4)}))
    gp = auto.build("gp", 4, None, 4, first=4)
    trial = study.ask()
    assert gp.sample_relative(study, study._storage.get_trial(trial._trial_id), dist)
    plain = optuna.samplers.GPSampler(seed=4, n_startup_trials=4)
    assert plain.sample_relative(study, study._storage.get_trial(trial._trial_id), dist) == {}


def test_cmaes_tpe_picks_by_the_space_and_the_trial():
    numeric = NUMERIC
    choices = SearchSpace.of(a=Categorical([1, 2]), b=Categorical(["x", "y"]),
                             c=Float(0.0, 1.0))
    assert samplers.auto_kind(numeric, 0) == samplers.auto_kind(numeric, 9) == "cmaes"
    assert samplers.auto_kind(numeric, samplers.CMAES_UNTIL) == "tpe"
    assert samplers.auto_kind(choices, 0) == "tpe"
    cma = samplers.optuna_sampler("cmaes-tpe", 0, space=numeric, number=3)
    assert isinstance(cma, optuna.samplers.CmaEsSampler)
    assert isinstance(cma._independent_sampler, optuna.samplers.TPESampler)  # for `act`


def test_cmaes_tpes_choices_follow_the_first_trials_while_cma_es_draws_the_numbers():
    """Under `cmaes-tpe`'s CMA-ES the choices are TPE's from the first finished trial: after a
    default whose choice was best, trial 1 keeps it (TPE's 10 random start-up draws left it to
    a 1-in-5 chance; bench/README.md#the-default-sampler)."""
    space = SearchSpace.of(x=Float(-10.0, 10.0, default=0.0), y=Float(-10.0, 10.0),
                           batch=Categorical([256, 512, 1024, 2048, 4096], default=256))

    def loss(config: Any, report: Any) -> float:
        return (config["x"] - 2.0) ** 2 + config["y"] ** 2 / 10 + config["batch"] / 256

    kept = [run(f"choices-{seed}", n=2, space=space, fn=loss, sampler="cmaes-tpe",
                seed=seed)[1].params["batch"] for seed in range(5)]
    assert kept == [256] * 5


@pytest.mark.slow
def test_the_first_lines_name_the_sampler_and_why(tmp_path: Path):
    work = toy_workdir(tmp_path, "def f(config, report):\n    return (config['x'] - 2) ** 2\n")
    out = run_tune("run", "--trainer", "toy:f", "--config", "toy.toml", "--n-trials", "6",
                   "--sampler", "auto", cwd=work)
    assert out.returncode == 0, out.stderr
    assert ("sampler: auto: a Latin hypercube of 4 trials, then Gaussian-process BO while its "
            "draws fit in a share of the search's time") in out.stdout
    assert "and from trial 8 on one trial in 3 drawn near the trial the GP rates best" in out.stdout
    out = run_tune("run", "--trainer", "toy:f", "--config", "toy.toml", "--n-trials", "2",
                   "--sampler", "tpe", "--study", "other", cwd=work)
    assert "sampler: tpe (--sampler tpe)" in out.stdout


def test_a_trial_stops_once_its_loss_has_turned_up_and_keeps_its_best_epoch():
    seen: list[int] = []

    def overfits(config, report):
        for epoch, loss in enumerate([0.9, 0.5, 0.6, 0.7, 0.8, 0.9], start=1):
            seen.append(epoch)
            report(epoch, loss + config["x"] ** 2)
        return 0.9

    space = SearchSpace.of(x=Float(-1.0, 1.0, default=0.0))
    trials = run("overfit", n=1, space=space, fn=overfits)
    assert seen == [1, 2, 3, 4]  # epochs 3 and 4 brought nothing better than epoch 2
    assert trials[0].value == 0.5 and trials[0].state == "complete"
    assert trials[0].train.stopped_early == {"epoch": 4, "best_epoch": 2}
    seen.clear()
    trials = run("all-epochs", n=1, space=space, fn=overfits, epoch_patience=0)
    assert seen == [1, 2, 3, 4, 5, 6] and trials[0].value == 0.5


def test_a_trial_whose_patience_runs_out_at_its_last_epoch_is_not_stopped_early():
    def overfits(config, report):
        for epoch in range(1, config["epochs"] + 1):
            report(epoch, [0.5, 0.6, 0.7][epoch - 1])
        return 0.5

    space = SearchSpace.of(x=Float(-1.0, 1.0, default=0.0), epochs=3)
    (trial,) = run("last-epoch", n=1, space=space, fn=overfits, epoch_patience=2)
    assert trial.curve == (0.5, 0.6, 0.7) and trial.train.stopped_early is None


def test_the_epoch_patience_is_a_third_of_the_trials_epochs_when_unset():
    seen: list[int] = []

    def turns_up(config, report):  # better at epoch 1, worse after: the built-in task's shape
        for epoch in range(1, config["epochs"] + 1):
            seen.append(epoch)
            report(epoch, 0.5 + 0.01 * (epoch - 1))
        return 0.5

    for epochs, trained in ((3, 2), (6, 3), (30, 4)):  # patience 1, 2, then at most 3
        seen.clear()
        space = SearchSpace.of(x=Float(-1.0, 1.0, default=0.0), epochs=epochs)
        (trial,) = run(f"auto-patience-{epochs}", n=1, space=space, fn=turns_up)
        assert seen == list(range(1, trained + 1)), epochs
        assert trial.train.stopped_early == {"epoch": trained, "best_epoch": 1}
        assert trial.value == 0.5


def test_an_epoch_at_the_target_ends_its_trial_and_the_search(capsys):
    seen: list[int] = []

    def improves(config, report):
        for epoch in range(1, config["epochs"] + 1):
            seen.append(epoch)
            report(epoch, 0.5 - 0.1 * epoch)  # 0.4, 0.3, 0.2, 0.1
        return 0.1

    tuner = Tuner(trainers.callable(improves), SearchSpace.of(
        x=Float(-1.0, 1.0, default=0.0), epochs=4), storage="sqlite:///:memory:",
        study="at-target", pruner="none")
    result = tuner.run(n_trials=5, target=0.35)
    (trial,) = result.history
    assert seen == [1, 2]  # epoch 2's 0.3 is at the target: epochs 3 and 4 would change nothing
    assert trial.state == "complete" and trial.value == pytest.approx(0.3)
    assert trial.train.stopped_early == {"epoch": 2, "best_epoch": 2, "target": True}
    assert "target 0.35 reached by trial 0" in (result.stop_reason or "")
    assert "stopped at epoch 2: the target reached" in capsys.readouterr().out
    # At the last epoch the trial ends anyway: complete, not stopped.
    seen.clear()
    tuner = Tuner(trainers.callable(improves), SearchSpace.of(
        x=Float(-1.0, 1.0, default=0.0), epochs=4), storage="sqlite:///:memory:",
        study="at-target-last", pruner="none", display=None)
    (trial,) = tuner.run(n_trials=5, target=0.15).history
    assert seen == [1, 2, 3, 4] and trial.train.stopped_early is None


@pytest.mark.slow
def test_lightning_trials_in_their_own_process_stop_early_and_say_so(tmp_path: Path):
    """The built-in Lightning trainer, each trial isolated: a config that overfits 4,000 rows
    at once (the space's declared defaults, trial 0) stops after --epoch-patience epochs
    without a better loss, kept with its best."""
    (tmp_path / "es.toml").write_text(
        'n_trials = 1\nepochs = 8\ndata = "synthetic:4000"\npruner = "none"\n'
        "isolate = true\n[space]\n"
        'lr = { type = "float", low = 1e-5, high = 0.1, log = true, default = 0.05 }\n'
        'batch_size = { type = "categorical", choices = [256, 1024], default = 256 }\n'
        'dropout = { type = "float", low = 0.0, high = 0.5, default = 0.0 }\n')
    storage = f"sqlite:///{tmp_path / 'es.db'}"
    out = run_tune("run", "--config", "es.toml", "--storage", storage, "--sampler", "tpe",
                   cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    trial = Tuner.load(storage, "lightning-synthetic-4000").study.trials[0]
    # the file's defaults; precision, a choice only where the CPU computes bf16, at its default
    assert {k: v for k, v in trial.params.items() if k != "precision"} == {
        "lr": 0.05, "batch_size": 256, "dropout": 0.0}
    assert trial.params.get("precision", "32-true") == "32-true"
    stop = trial.user_attrs["train"]["stopped_early"]
    curve = [trial.intermediate_values[e] for e in sorted(trial.intermediate_values)]
    assert stop["epoch"] == len(curve) < 8 and stop["epoch"] - stop["best_epoch"] == 2
    assert trial.value == min(curve) == curve[stop["best_epoch"] - 1]
    assert f"stopped at epoch {stop['epoch']}, best epoch {stop['best_epoch']}" in out.stdout


def test_the_readmes_config_file_runs_its_defaults_then_its_start_config(tmp_path: Path):
    """The README's tune.toml, as printed, on the built-in task: trial 0 is the built-in
    defaults with the file's own `weight_decay` default, trial 1 its [[start]] table."""
    import re

    from tunepilot import load_config
    from tunepilot.agent.build import from_config

    readme = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    block = re.search(r"```toml\n(# tune\.toml\n.*?)```", readme, re.S)
    assert block is not None
    (tmp_path / "tune.toml").write_text(block.group(1))
    cfg = load_config(tmp_path / "tune.toml", storage=f"sqlite:///{tmp_path / 't.db'}")
    tuner, notes = from_config(cfg)
    queued = [t.system_attrs["fixed_params"] for t in tuner.study.get_trials(deepcopy=False)]
    # (precision is a choice only where the device computes bf16: then its default, 32-true)
    assert {k: v for k, v in queued[0].items() if k != "precision"} == {
        "lr": 1e-3, "batch_size": 256, "dropout": 0.1, "weight_decay": 1e-5}
    assert queued[0].get("precision", "32-true") == "32-true"
    assert queued[1] == {"lr": 3e-3, "hidden": "400-400-400"}
    assert any(n.startswith("sampler: auto: ") and "Latin hypercube" in n for n in notes)


@pytest.mark.parametrize(("flag", "says"), [
    (["--target", "inf"], "with inf the search would stop after its first trial"),
    (["--target", "nan"], "with nan the search would never stop on it"),
    (["--llm-base-url", "http://"], "the LLM server's URL names no host after its scheme, e.g. "
                                    "http://127.0.0.1:8080/v1"),
])
def test_a_wrong_flag_is_told_what_is_wrong_with_it(tmp_path: Path, flag, says):
    out = run_tune("run", *flag, cwd=tmp_path)
    assert out.returncode == 2 and says in out.stderr, out.stderr


def test_tune_version_prints_the_version(tmp_path: Path):
    from importlib.metadata import version

    out = run_tune("--version", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == f"tunepilot {version('tunepilot')}"


def test_a_sampler_registered_in_one_place_is_taken_everywhere(monkeypatch, tmp_path):
    """docs/development.md, "Adding a sampler": one registry entry, and the config, `tune
    init`'s file, the tuner and a reviewing model's label all know it."""
    from tunepilot.config import load_config, starter

    def qmc(seed, space, number):
        return optuna.samplers.QMCSampler(seed=seed, warn_independent_sampling=False)

    monkeypatch.setitem(samplers.REGISTRY, "qmc", samplers.SamplerKind(
        "qmc", qmc, help="Sobol points (Optuna's QMCSampler)", label="QMC",
        owns=lambda s: isinstance(s, optuna.samplers.QMCSampler)))
    assert load_config(sampler="qmc").sampler == "qmc"
    assert "| qmc" in starter()
    tuner = Tuner(trainers.callable(quadratic), SPACE, storage="sqlite:///:memory:",
                  study="qmc", sampler="qmc", pruner="none", display=None)
    assert tuner.first_lines == ["sampler: qmc (--sampler qmc)"]
    result = tuner.run(n_trials=4)
    assert result.n_finished == 4
    drawn = tuner.study.sampler.fallback
    assert isinstance(drawn, optuna.samplers.QMCSampler) and samplers.label(drawn) == "QMC"
    monkeypatch.delitem(samplers.REGISTRY, "qmc")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="Unknown sampler 'qmc'"):
        Tuner(trainers.callable(quadratic), SPACE, sampler="qmc")
    assert list(tmp_path.iterdir()) == []  # refused before the default storage is opened


@pytest.mark.parametrize("block", [0, 1, 3])
def test_the_latin_hypercube_draws_what_scipys_draws(block):
    """`auto.Latin.design` is SciPy's `qmc.LatinHypercube` number for number (the benchmarks'
    start-ups stay what they measured), without importing `scipy.stats` in a worker."""
    import numpy as np
    from scipy.stats import qmc

    from tunepilot.proposers import auto

    latin = auto.Latin(None, 5, seed=1234)
    seed = 1234 if block == 0 else np.random.default_rng([1234, block])
    assert np.array_equal(latin.design(block, 3), qmc.LatinHypercube(3, seed=seed).random(5))


def test_a_gp_draw_runs_torch_on_one_thread_and_leaves_the_trainers_threads_as_they_were():
    import torch

    from tunepilot.proposers import gp

    seen: list[int] = []
    during: list[int] = []

    def train(config, report):
        seen.append(torch.get_num_threads())
        return (config["x"] - 1.0) ** 2

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with gp.one_thread():
            during.append(torch.get_num_threads())
        Tuner(trainers.callable(train), SearchSpace.of(x=Float(-5.0, 5.0)),
              storage="sqlite:///:memory:", study="threads", sampler="gp", pruner="none",
              seed=0, display=None).run(n_trials=6)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert during == [1] and seen == [2] * 6, (during, seen)


@pytest.mark.parametrize("n_trials, warms", [(None, True), (40, True), (3, False)])
def test_the_start_up_imports_what_a_gp_draw_needs_while_its_trials_train(n_trials, warms):
    """While the default's start-up draws (no GP), what the GP draws after them import is
    imported in the background; not where the budget ends within the start-up."""
    import sys

    from tunepilot.memory import records
    from tunepilot.proposers import auto, gp

    imported = "optuna._gp.gp" in sys.modules
    space = SearchSpace.of(x=Float(-5.0, 5.0), y=Float(-5.0, 5.0))
    study = optuna.create_study()
    if n_trials is not None:
        records.goal(study, {"target": None, "timeout": None, "n_trials": n_trials})
    sampler = auto.Auto(0, space, 0)
    started = len(gp._WARMING)
    sampler.before_trial(study, study.ask()._cached_frozen_trial)
    assert sampler.warm is warms
    assert auto.startup(space) > 3  # the budget of 3 ends within it
    if warms and not imported and not started:  # the first warm-up of this process
        assert len(gp._WARMING) == 1 and gp._WARMING[0].name == "tunepilot-gp-imports"
