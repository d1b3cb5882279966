"""A study written by the previous release opens, resumes and reports with this one; stored
settings migrate from any earlier version.

tests/data/study-0.1.db was written by release 0.1 (commit 0c75246): `tune run --llm none
--trainer toy:quadratic --config toy.toml --storage sqlite:///study-0.1.db --n-trials 4
--pruner none` (study toy-quadratic), then a `Tuner` with a scripted LLM and a hint (toy-llm).
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import run_tune, toy_workdir
from tunepilot import Tuner
from tunepilot.memory import History, load_study, records, settings
from tunepilot.memory.settings import MIGRATIONS, VERSION, migrate
from tunepilot.memory.store import open_storage

TOY = """
def quadratic(config, report):
    loss = (config["x"] - 2.0) ** 2
    for epoch in range(1, 4):
        report(epoch, loss + 1.0 / epoch)
    return loss
"""


@pytest.fixture
def old_study(tmp_path):
    toy_workdir(tmp_path, TOY, '[space]\nx = { type = "float", low = -10.0, high = 10.0 }\n'
                               'epochs = 3\n')
    shutil.copy(__file__.replace("test_compat.py", "data/study-0.1.db"), tmp_path / "s.db")
    return tmp_path


def test_the_previous_release_s_study_reads_as_it_was(old_study):
    url = f"sqlite:///{old_study / 's.db'}"
    history = History.from_study(load_study(url, "toy-quadratic"))
    assert [t.number for t in history] == [0, 1, 2, 3]
    assert history.settings["config"]["trainer"] == "toy:quadratic"  # migrated from version 1
    assert history.fixed == {"epochs": 3, "seed": 0}
    llm = History.from_study(load_study(url, "toy-llm"))
    first = llm[0]
    assert first.proposer == "llm" and first.rationale == "try x=1.0"
    assert first.llm.model == "gpt-4o-mini" and first.llm.attempts == 1
    assert llm.notes == "x near 2" and llm.hints == ("x is probably near 2",)
    assert Tuner.load(url, "toy-llm").notes == "x near 2"


def test_the_previous_release_s_study_resumes_and_reports(old_study):
    args = ("--llm", "none", "--trainer", "toy:quadratic", "--config", "toy.toml",
            "--storage", "sqlite:///s.db", "--pruner", "none")
    proc = run_tune("run", *args, "--n-trials", "6", cwd=old_study)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "resuming: 4 trials done" in proc.stdout
    assert "trials: 6 finished in study toy-quadratic (2 new)" in proc.stdout
    url = f"sqlite:///{old_study / 's.db'}"
    study = load_study(url, "toy-quadratic")
    assert study.user_attrs["tunepilot:settings"]["version"] == VERSION  # written anew
    report = run_tune("report", "--storage", "sqlite:///s.db", "--study", "toy-llm", "-o",
                      "r.html", cwd=old_study)
    assert report.returncode == 0, report.stderr
    html = (old_study / "r.html").read_text()
    assert "try x=1.0" in html and "x is probably near 2" in html
    best = run_tune("best", "--storage", "sqlite:///s.db", "--study", "toy-quadratic",
                    cwd=old_study)
    assert json.loads(best.stdout)["epochs"] == 3


def test_version_1_settings_have_their_urls_redacted_again():
    old = {"config": {"storage": "postgresql://me@db/tune?password=SECRET",
                      "llm_base_url": "http://u:SECRET@llm:8080/v1"}, "space": {}}
    new = migrate(old)
    assert "SECRET" not in json.dumps(new)
    assert new["config"]["storage"].startswith("postgresql://me@db/tune?password=")


def test_a_rename_tomorrow_goes_through_a_migration(monkeypatch, tmp_path):
    """The mechanism: settings stored today open after a setting is renamed, through the
    migration function that the rename adds."""
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    import optuna

    study = optuna.create_study(study_name="s", storage=storage)
    records.settings(study, {"config": {"n_trials": 7}})

    def rename(stored):
        config = dict(stored["config"])
        config["trial_budget"] = config.pop("n_trials")
        return {**stored, "config": config}

    monkeypatch.setattr(settings, "VERSION", VERSION + 1)
    monkeypatch.setitem(MIGRATIONS, VERSION, rename)
    assert History.from_study(study).settings == {"config": {"trial_budget": 7}}


def test_settings_from_a_newer_release_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="newer tunepilot"):
        migrate({"version": VERSION + 1, "config": {}})
