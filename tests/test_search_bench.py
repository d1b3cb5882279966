"""The search-quality harness (bench/search.py) in a tiny configuration: its bookkeeping."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys

import pytest

from tests.conftest import ROOT
from tests.llm_server import ScriptedLLMServer
from tests.test_llm import openai_model


@pytest.fixture(scope="module")
def search():
    spec = importlib.util.spec_from_file_location("bench_search", ROOT / "bench" / "search.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def test_every_strategy_gets_the_same_seeds_budget_and_start(search):
    task = search.TASKS["mixed"]
    count = iter(range(1000))

    def reply(request):  # a model that walks the learning rate down, one step a trial
        lr = 10 ** -(1 + 0.3 * next(count))
        return json.dumps({"config": {"lr": lr, "width": 128, "activation": "relu",
                                      "dropout": 0.1}, "rationale": "lower the rate"})

    with ScriptedLLMServer(reply) as server:
        results = search.benchmark([task], ["random", "tpe", "hybrid"], seeds=range(3),
                                   budget=6, reference_repeats=4, log=lambda line: None,
                                   llm=openai_model(server.base_url))
    for strategy in ("random", "tpe", "hybrid"):
        runs = [r for r in results.runs if r.strategy == strategy]
        assert sorted(r.seed for r in runs) == [0, 1, 2]
        assert all(len(r.values) == 6 for r in runs)
        assert all(r.configs[0] == task.default and r.proposers[0] == "human" for r in runs)
    hybrid = [r for r in results.runs if r.strategy == "hybrid"]
    assert all("llm" in r.proposers and "optuna" in r.proposers for r in hybrid)
    assert results.optimum(task) == 0.0  # the analytic minimum, not the best seen
    text = search.table(results, [task], ["random", "tpe", "hybrid"], [3, 6])
    assert text.count("| mixed |") == 2 and "score" in text


def test_random_search_scores_about_one(search):
    task = search.TASKS["branin"]
    results = search.benchmark([task], ["random"], seeds=range(8), budget=10,
                               reference_repeats=16, log=lambda line: None)
    # The reference pool against its own mean is 1 by construction; random search with other
    # seeds lands near it.
    own = [results.score(task, r, 10) for r in results.reference["branin"]]
    assert statistics.fmean(own) == pytest.approx(1.0)
    scores = [results.score(task, r, 10) for r in results.runs]
    assert 0.5 < statistics.fmean(scores) < 1.6
    # Best-so-far never gets worse with budget; trials-to-target is within the budget or None.
    for r in results.runs:
        assert r.best_at(5) >= r.best_at(10)
        reach = results.trials_to_target(task, r, 10)
        assert reach is None or 1 <= reach <= 10


def test_hpobench_tasks_look_up_the_published_tables_and_rank_the_strategies(search):
    task = search.get_task("hpobench-credit_g")
    # The known optimum is the table's best grid point; the default config is a grid point.
    assert 0.0 < task.optimum <= task.fn(task.default) < 1.0
    # Values off the grid snap to the nearest grid point on a log scale.
    assert task.fn({**task.default, "learning_rate_init": 1.1e-3}) == task.fn(task.default)

    def reply(request):
        return json.dumps({"decision": "override",
                           "config": {**task.default, "width": 645, "depth": 2},
                           "rationale": "A wider, deeper net suits this tabular data better."})

    with ScriptedLLMServer(reply) as server:
        results = search.benchmark([task], ["random", "tpe", "review"], seeds=range(2), budget=6,
                                   reference_repeats=3, log=lambda line: None,
                                   llm=openai_model(server.base_url))
    ranks = search.ranks(results, [task], ["random", "tpe", "review"], [6])
    rows = {line.split("|")[1].strip(): float(line.split("|")[2]) for line in
            ranks.splitlines()[2:]}
    assert set(rows) == {"random", "tpe", "review"}
    assert sum(rows.values()) == pytest.approx(1 + 2 + 3)  # ranks 1..3, ties sharing the mean
    stats = search.review_stats(results)
    assert "of its" in stats and "overrides taken" in stats
    review = [r for r in results.runs if r.strategy == "review"]
    # One override per run: its loss and the replaced candidate's are both looked up.
    assert all(sum(v == "override" for _, v, _, _ in r.reviews) == 1 for r in review)


def test_finished_runs_are_kept_and_reused_instead_of_run_again(search, tmp_path, monkeypatch):
    task = search.get_task("hpobench-credit_g")
    calls = iter(range(1000))

    def reply(request):  # an override on the first turn, accepts after it
        if next(calls) == 0:
            return json.dumps({"decision": "override", "config": {**task.default, "depth": 3},
                               "rationale": "A deeper net may fit the interactions better."})
        return json.dumps({"decision": "accept", "config": task.default,
                           "rationale": "The candidate looks sound."})

    first = tmp_path / "a.jsonl"
    with ScriptedLLMServer(reply) as server:
        llm = openai_model(server.base_url)
        done = search.benchmark([task], ["tpe", "review"], seeds=range(2), budget=6,
                                reference_repeats=2, log=lambda line: None, llm=llm,
                                saved=search.Saved([first]))
        assert len(first.read_text().splitlines()) == 4  # one line per finished run

        def no_more(*args, **kwargs):
            raise AssertionError("a saved run was run again")

        ran = search.run_one
        monkeypatch.setattr(search, "run_one", lambda task, strategy, seed, budget, llm=None:
                            ran(task, strategy, seed, budget) if strategy == "random"
                            else no_more())
        # The same runs read back at a smaller budget: cut to it, reviews included.
        again = search.benchmark([task], ["tpe", "review"], seeds=range(2), budget=4,
                                 reference_repeats=2, log=lambda line: None, llm=llm,
                                 saved=search.Saved([first, tmp_path / "b.jsonl"]))
    assert [(r.strategy, r.seed, r.values[:4]) for r in done.runs] == \
        [(r.strategy, r.seed, r.values) for r in again.runs]
    review = [r for r in again.runs if r.strategy == "review"]
    assert all(r.model == f"ChatOpenAI:gpt-4o-mini at {server.base_url}" for r in review)
    # Seed 0: one override at trial 1 uses its share up until it is judged (a win, once 3 of
    # the sampler's trials have finished), which earns the turn at trial 5; seed 1: accepts at
    # trials 1-3 of 4 (trials 4 and 5 cut off).
    full = [r.reviews for r in done.runs if r.strategy == "review"]
    assert [[(n, v) for n, v, *_ in r] for r in full] == \
        [[(1, "override"), (5, "accepted")], [(n, "accepted") for n in range(1, 6)]]
    assert [r.reviews for r in review] == [full[0][:1], full[1][:3]]
    assert [r.model for r in again.runs if r.strategy == "tpe"] == ["none", "none"]
    assert not (tmp_path / "b.jsonl").exists()  # nothing new was run, nothing written
    # --saved-only: the kept runs whole, nothing run for what the file lacks (cmaes), and a
    # budget past the kept runs' length shows no figure rather than a shorter run's.
    kept = search.benchmark([task], ["tpe", "cmaes"], seeds=range(2), budget=8,
                            reference_repeats=2, log=lambda line: None,
                            saved=search.Saved([first]), run_missing=False)
    assert [(r.strategy, len(r.values)) for r in kept.runs] == [("tpe", 6), ("tpe", 6)]
    rows = search.table(kept, [task], ["tpe", "cmaes"], [6, 8]).splitlines()[2:]
    assert "score" in rows[0].split("|")[3] and rows[1].split("|")[3:5] == [" - ", " - "]
    assert "| tpe | 0." in search.summary(kept, [task], ["tpe", "cmaes"], [6, 8])


def test_the_knowledge_experts_answer_from_their_part_of_the_ranking():
    """bench/experts.py: what each expert answers, read back from its HTTP server."""
    import urllib.request

    spec = importlib.util.spec_from_file_location("bench_experts", ROOT / "bench" / "experts.py")
    experts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(experts)
    ranked = [{"x": float(i)} for i in range(200)]  # best first
    review = {"response_format": {"json_schema": {"schema": {"properties": {"decision": {}}}}}}

    def ask(expert, request):
        body = json.dumps({"model": "m", "messages": [], **request}).encode()
        req = urllib.request.Request(f"{expert.base_url}/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())["choices"][0]["message"]["content"]

    with experts.Expert("oracle:1%", ranked, seed=0) as oracle:
        answers = [json.loads(ask(oracle, review)) for _ in range(3)]
    assert all(a["decision"] == "override" for a in answers)
    assert [a["config"]["x"] for a in answers[:2]] in ([0.0, 1.0], [1.0, 0.0])  # never twice
    assert answers[2]["config"]["x"] == 2.0  # its 1% spent: the next rank, not a repeat
    with experts.Expert("picky:0.5", ranked, seed=0) as picky:
        verdicts = [json.loads(ask(picky, review)) for _ in range(40)]
    overrides = [v["config"]["x"] for v in verdicts if v["decision"] == "override"]
    assert 8 <= len(overrides) <= 32 and max(overrides) < len(overrides) + 2  # its best, or none
    assert {v["decision"] for v in verdicts} == {"accept", "override"}
    with experts.Expert("misleading", ranked, seed=0) as bad:
        assert json.loads(ask(bad, {}))["config"]["x"] >= 160  # the worst 20%, proposing
    with experts.Expert("accept", ranked) as accept, experts.Expert("garbage", ranked) as junk:
        assert json.loads(ask(accept, review))["decision"] == "accept"
        assert not ask(junk, review).lstrip().startswith("{")
    with pytest.raises(ValueError, match="unknown expert 'oracle'"):
        experts.Expert("oracle", ranked)


def test_the_local_start_up_arm_stays_near_a_declared_default():
    """bench/engine.py's `auto-local`: the default's trial 0, then about half the start-up's
    other points within LOCAL_WIDTH of each declared number's (log) range, with the declared
    choice; every point of a space with no defaults covers the whole range."""
    import math

    import optuna

    from tunepilot import Categorical, Float, Int, SearchSpace
    from tunepilot.proposers.auto import startup

    engine = _engine()
    numeric = SearchSpace.of(lr=Float(1e-5, 1.0, log=True), width=Int(8, 1024, log=True),
                             act=Categorical(["relu", "tanh"]))
    declared = SearchSpace.of(lr=Float(1e-5, 1.0, log=True, default=1e-3),
                              width=Int(8, 1024, log=True, default=64),
                              act=Categorical(["relu", "tanh"], default="tanh"))
    for space, near in ((declared, 1), (numeric, 0)):
        study = optuna.create_study()
        if space.defaults():
            study.enqueue_trial(space.defaults())
        for number in range(startup(space)):
            study.sampler = engine._near_default(100 + number, space, number, None)
            study.tell(study.ask(space.distributions()), 1.0)
        box = [t for t in study.trials[1:] if t.params["act"] == "tanh" and abs(
            math.log10(t.params["lr"]) + 3) <= 5 * engine.LOCAL_WIDTH + 1e-9 and abs(
            math.log2(t.params["width"] / 64)) <= 7 * engine.LOCAL_WIDTH + 0.1]
        assert len(box) >= near and len(study.trials) == startup(space)
        if not near:
            lr = sorted(int((math.log10(t.params["lr"]) + 5) / 5 * 4) for t in study.trials)
            assert lr == [0, 1, 2, 3]


def _engine():
    return _bench("engine")


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cliff(x: float) -> float:
    """A shallow bowl (best at x = 0.2) beside a cliff: past 0.5 the model learns nothing and
    its loss is chance level, as for a tenth to a quarter of each HPOBench table's configs."""
    return 0.9 if x > 0.5 else 0.10 + 0.05 * (x - 0.2) ** 2


@pytest.mark.parametrize("warp", [None, "rank", "cap", "log"])
def test_the_warped_arms_fit_their_gp_on_warped_losses_and_leave_the_study_alone(warp):
    """bench/engine.py's `auto-rank`, `auto-cap` and `auto-log`: on raw losses the GP spends its
    scale on the cliff and its next draw lands far from the bowl's bottom (the default, `None`);
    the rank and log warps spread the good end and the draw goes near the bottom; the cap
    changes nothing while half the trials or more are on the cliff. The study keeps the losses
    it was told."""
    from datetime import timedelta

    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    from tunepilot.proposers.auto import Auto

    warps = _bench("warps")
    dist = {"x": FloatDistribution(0.0, 1.0)}
    study = optuna.create_study()
    for x in (0.05, 0.35, 0.45, 0.6, 0.7, 0.8, 0.9, 0.95):  # 5 of 8 on the cliff
        trial = create_trial(params={"x": x}, distributions=dist, value=_cliff(x))
        trial.datetime_start = trial.datetime_complete - timedelta(minutes=1)  # a minute: GP draws
        study.add_trial(trial)
    study.sampler = (Auto(8, None, 8, first=4) if warp is None
                     else warps.warped(8, None, 8, warp=warp, first=4))
    x = study.ask().suggest_float("x", 0.0, 1.0)
    assert study.sampler.inner.__class__.__name__ == ("GP" if warp is None else "WarpedGP")
    if warp in (None, "cap"):  # the median is on the cliff: the cap leaves the losses alone
        assert abs(x - 0.2) > 0.1, x
    else:
        assert abs(x - 0.2) < 0.1, x
    assert [t.value for t in study.trials[:8]] == [_cliff(t.params["x"]) for t in study.trials[:8]]


def test_a_warp_keeps_the_order_of_the_losses_and_their_ties():
    import numpy as np

    warps = _bench("warps")
    losses = np.array([0.06, 0.07, 0.5, 0.065, 0.5, float("inf")])
    for how in ("rank", "cap", "log"):
        for minimize in (True, False):
            values = losses if minimize else -losses
            got = warps.warp(values, how, minimize)
            order = np.argsort(values, kind="stable")  # a better loss stays better
            assert np.all(np.diff(got[order]) >= 0), (how, minimize, got)
            assert got[2] == got[4]
    assert np.isfinite(warps.warp(losses, "rank")).all()
    with pytest.raises(ValueError, match="expected 'rank', 'cap' or 'log'"):
        warps.warp(losses, "box-cox")


def test_the_engine_tables_pair_any_strategy_against_any_peer(tmp_path, monkeypatch, capsys):
    """bench/engine.py's `--paired-against`: per seed each family's mean over its problems and
    variants, pooled the mean of the families; a seed counts only where both ran it, and the
    difference and ratio read from those seeds alone."""
    engine = _engine()

    def row(strategy, family, problem, seed, declared, rank):
        return {"strategy": strategy, "family": family, "problem": problem, "seed": seed,
                "declared": declared, "budget": 5, "ranks": [0.5, 0.4, 0.3, 0.2, rank],
                "sampler_s": [0.01]}

    runs = []
    for seed in range(3):
        for declared in (False, True):
            runs.append(row("tp:auto", "classic", "branin", seed, declared, 0.10 + 0.01 * seed))
            runs.append(row("tp:auto", "ctr", "ctr-lightning", seed, declared, 0.30))
            runs.append(row("hebo", "classic", "branin", seed, declared, 0.20))
            runs.append(row("hebo", "ctr", "ctr-lightning", seed, declared, 0.30 + 0.02 * seed))
    runs.append(row("tp:auto", "classic", "branin", 3, False, 0.9))  # hebo lacks seed 3
    # classic: auto - hebo = -0.10, -0.09, -0.08; ctr: 0, -0.02, -0.04; pooled, the
    # means of the two: -0.05, -0.055, -0.06.
    mean, se, ratio, seeds = engine.paired(runs, "tp:auto", "hebo", None, 5)
    assert seeds == 3 and mean == pytest.approx(-0.055)
    assert se == pytest.approx(0.005 / 3 ** 0.5)
    assert ratio == pytest.approx((0.11 + 0.30) / 2 / ((0.20 + 0.32) / 2))
    assert engine.paired(runs, "tp:auto", "hebo", "classic", 5)[:2] == pytest.approx(
        (-0.09, 0.01 / 3 ** 0.5))
    assert engine.paired(runs, "tp:auto", "hebo", "hpobench", 5) is None  # no seeds there
    lines = engine.paired_table(runs, ["tp:auto", "hebo"], "hebo", None, [5]).splitlines()
    assert lines[0] == "| strategy less hebo | @5 |" and len(lines) == 3
    assert lines[2] == "| tp:auto | -0.0550 ± 0.0029 (0.79x, 3 seeds) |"

    # The command: a saved file read back, the peer added to the strategies when not named.
    saved = tmp_path / "runs.jsonl"
    saved.write_text("".join(json.dumps(r) + "\n" for r in runs))

    def tables(*args):
        monkeypatch.setattr(sys, "argv", ["engine.py", "--results", str(saved), "--saved-only",
                                          "--budget", "5", *args])
        engine.main()
        return capsys.readouterr().out

    out = tables("--strategies", "tp:auto", "--paired-against", "hebo")
    assert "2 problems x 2 variants x 3 seeds that every strategy ran" in out
    pooled = out.split("pooled (each family weighs the same)")[1]
    assert "| tp:auto | -0.0550 ± 0.0029 (0.79x, 3 seeds) |" in pooled
    # --problems holds for saved runs too: pooled is then branin's alone.
    out = tables("--problems", "branin", "--paired-against", "hebo")
    assert "1 problems x 2 variants x 3 seeds" in out
    assert "| tp:auto | -0.0900 ± 0.0058 (0.55x, 3 seeds) |" in out.split("pooled")[1]
    # --seeds with --saved-only: those seeds only (seed 0 and 1 here: -0.05, -0.055).
    out = tables("--seeds", "2", "--paired-against", "hebo")
    assert "2 problems x 2 variants x 2 seeds" in out
    assert "| tp:auto | -0.0525 ± 0.0025 " in out.split("pooled")[1]
    # A peer the file does not hold: a clear error, not empty tables.
    with pytest.raises(SystemExit):
        tables("--paired-against", "smac")
    assert "--paired-against smac: no runs of it here (these hold: hebo, tp:auto)" in \
        capsys.readouterr().err


def test_the_clock_benchs_choices_are_in_an_order_drawn_per_seed_alike_for_every_strategy():
    """bench/clock.py: a choice's options listed in an order drawn for the table and seed (a
    table's own list can favour a sampler that rounds to an option's index); numbers untouched;
    a raw line of the tables' own order no longer counts where the order can matter."""
    clock = _bench("clock")
    nb201, hpobench = clock.SPACES["nb201"], clock.SPACES["hpobench"]
    once = clock.shuffled(nb201, "cifar10", 3)
    assert once == clock.shuffled(nb201, "cifar10", 3)  # every strategy's run of the seed
    orders = {clock.shuffled(nb201, "cifar10", s).params["Op0"].choices for s in range(20)}
    assert len(orders) > 10 and all(sorted(o) == sorted(clock._OPS) for o in orders)
    assert once.params["Op0"].choices != once.params["Op1"].choices or \
        once.params["Op1"].choices != once.params["Op2"].choices  # each choice drawn apart
    assert clock.shuffled(hpobench, "vehicle", 3) == hpobench
    line = {"family": "nb201", "strategy": "hebo", "table": "cifar10", "seed": 0}
    assert not clock.fair(line) and clock.fair({**line, "choices": "shuffled"})
    assert clock.fair({**line, "family": "hpolib"})  # two-way choices: no order to favour
