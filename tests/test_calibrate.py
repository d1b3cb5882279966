"""`tune calibrate`: loopback experts of known quality (bench/experts.py) get the verdicts they
deserve, a model that recalls the published tables is called out by their disguised copies,
and what is kept (no secret in it) is what a later run with the model starts from."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.conftest import ROOT, run_tune, toy_workdir
from tunepilot.agent import calibrate as cal
from tunepilot.agent.calibration_tables import tables
from tunepilot.memory import calibrations

pytestmark = pytest.mark.slow

DATASETS, SEEDS, TRIALS = ("car", "credit_g"), 2, 12


def _experts():
    spec = importlib.util.spec_from_file_location("bench_experts", ROOT / "bench" / "experts.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def expert(kind: str):
    """An expert serving every calibration table, published and disguised, by its space."""
    experts = _experts()
    problems, published = experts.served(tables(DATASETS, range(SEEDS)))
    return experts.Expert(kind, [], seed=0, problems=problems, published=published)


NOT_WORTH = {calibrations.LEVEL, calibrations.WORSE}


@pytest.mark.parametrize("kind, said", [
    ("oracle:1%", {calibrations.WORTH}),
    ("misleading", NOT_WORTH),
    ("garbage", {calibrations.LEVEL}),
    ("memorizer", {calibrations.RECALLS}),
])
def test_each_expert_gets_the_verdict_it_deserves(kind, said):
    with expert(kind) as model:
        report = cal.calibrate(model.chat_model(), datasets=DATASETS, seeds=SEEDS,
                               budget=TRIALS, jobs=2)
    assert report.verdict in said, report.summary
    assert report.summary.startswith("2 tables x 2 seeds, disguised: ")
    assert len(report.runs) == len(DATASETS) * SEEDS * 4
    calibration = report.calibration("v1")
    wins, judged = calibration.prior()
    if said == {calibrations.WORTH}:
        assert judged > 0 and wins / judged > 0.5  # it starts above the even share
    else:
        assert wins == 0  # it starts at the floor


def test_calibrate_keeps_what_a_later_run_starts_from_and_no_secret(tmp_path, monkeypatch):
    home = tmp_path / "home"
    env = {"TUNEPILOT_HOME": str(home), "OPENAI_API_KEY": "sk-calibrate-secret"}
    workdir = toy_workdir(tmp_path, "def f(config, report):\n    return (config['x'] - 2) ** 2\n")
    with expert("misleading") as model:
        url = model.base_url.replace("http://", "http://me:s3cret@")
        done = run_tune("calibrate", "--llm", "openai:expert-misleading", "--llm-base-url", url,
                        "--tasks", ",".join(DATASETS), "--seeds", str(SEEDS), "--trials",
                        str(TRIALS), "--price", "0.15,0.60", cwd=workdir, env=env, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "verdict: 2 tables x 2 seeds, disguised: " in done.stdout
        assert "not worth its turns" in done.stdout
        assert "published, model" in done.stdout and "disguised, sampler alone" in done.stdout
        assert "cost: " in done.stdout and "tokens, $" in done.stdout
        # no bar in a pipe: lines now and then instead
        assert "searches: 8 of 16 done" in done.stdout and "searches: 16 of 16" in done.stdout
        kept = (home / "calibrations.json").read_text()
        assert "s3cret" not in kept and "sk-calibrate-secret" not in kept
        [record] = json.loads(kept)
        assert record["model"] == "expert-misleading" and record["endpoint"].startswith(
            "http://me:") and record["verdict"] in NOT_WORTH
        # A run with that model reads it, says so, and its share starts at the floor.
        run = run_tune("run", "--trainer", "toy:f", "--config", "toy.toml", "--n-trials", "3",
                       "--llm", "openai:expert-misleading", "--llm-base-url", url,
                       cwd=workdir, env=env)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "calibration of expert-misleading at http://me:" in run.stdout
        assert "; its record starts from it" in run.stdout and "s3cret" not in run.stdout
    from tunepilot.memory import History, load_study, trust

    history = History.from_study(load_study(f"sqlite:///{workdir / 'tunepilot.db'}", None))
    assert history.calibration is not None and history.calibration.verdict in NOT_WORTH
    assert trust.TrackRecord(calibration=history.calibration).share == trust.FLOOR
