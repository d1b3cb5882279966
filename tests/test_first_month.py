"""What a careful user tripped on in a first month, each as they ran it: the default sampler
with Hyperband, read commands on a database that is not tunepilot's, a worker told `--llm
none`, a bug in the user's trainer, `tune rerun` of a failed trial, the best config after
changed settings, logs of two storages, calibration figures from one table, a model that falls
silent, and a slow model."""

from __future__ import annotations

import json
import os
import sqlite3
import uuid

import pytest
import sqlalchemy

from tests.conftest import quadratic, run_tune, server_url, toy_workdir
from tests.llm_server import ScriptedLLMServer
from tests.test_cli import TOY, assert_refused
from tunepilot.agent.observer import Observer
from tunepilot.agent.results import TuneResult
from tunepilot.memory import History, Stop, TrialRecord

BAD_TRAIN = "def train(config, report):\n    return 1 / 0\n"
RUN = ("run", "--config", "toy.toml", "--llm", "none")


@pytest.fixture
def workdir(tmp_path):
    toy_workdir(tmp_path, TOY)
    (tmp_path / "bad_train.py").write_text(BAD_TRAIN)
    return tmp_path


def test_hyperband_runs_with_the_default_sampler(workdir):
    """It ended in `AttributeError: _BracketStudy does not have attribute of 'user_attrs'`."""
    done = run_tune(*RUN, "--trainer", "toy:quadratic", "--pruner", "hyperband",
                    "--n-trials", "7", "--storage", "sqlite:///h.db", cwd=workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "budget of 7 trials used" in done.stdout
    assert "[optuna]" in done.stdout and "sampler: auto" in done.stdout


# --- read commands write nothing where there is no study ----------------------------------------

READERS = [("show",), ("best",), ("report",), ("prompt",), ("rerun", "0")]


@pytest.mark.parametrize("reader", READERS, ids=lambda r: r[0])
def test_read_commands_leave_an_applications_sqlite_file_as_it_was(workdir, reader):
    app = workdir / "app.db"
    with sqlite3.connect(app) as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO users (name) VALUES ('ada')")
    db.close()
    before = app.read_bytes()
    done = run_tune(*reader, "--storage", "sqlite:///app.db", cwd=workdir)
    assert_refused(done, "No tunepilot studies in sqlite:///app.db", "no Optuna tables",
                   "(it holds users)", "wrote nothing there")
    assert app.read_bytes() == before
    assert {p.name for p in workdir.iterdir()} & {"tunepilot-runs", "tunepilot.db"} == set()


def test_read_commands_leave_an_empty_file_and_an_empty_server_database_as_they_were(workdir):
    (workdir / "empty.db").write_bytes(b"")
    done = run_tune("show", "--storage", "sqlite:///empty.db", cwd=workdir)
    assert_refused(done, "No tunepilot studies in sqlite:///empty.db", "(it is empty)")
    assert (workdir / "empty.db").read_bytes() == b""
    dashboard = run_tune("dashboard", "--storage", "sqlite:///empty.db", cwd=workdir)
    assert_refused(dashboard, "No tunepilot studies in sqlite:///empty.db")

    base = server_url("postgresql")
    name = f"tp_empty_{uuid.uuid4().hex[:8]}"
    admin = sqlalchemy.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as db:
        db.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    url = base.rsplit("/", 1)[0] + f"/{name}"
    try:
        for reader in READERS:
            done = run_tune(*reader, "--storage", url, cwd=workdir)
            assert_refused(done, f"No tunepilot studies in {url}", "(it is empty)")
        engine = sqlalchemy.create_engine(url)
        assert sqlalchemy.inspect(engine).get_table_names() == []
        engine.dispose()
    finally:
        with admin.connect() as db:
            db.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


def test_a_storage_with_optunas_tables_and_no_study_says_so(workdir):
    import optuna

    optuna.storages.RDBStorage(f"sqlite:///{workdir / 'none.db'}")  # the tables, no study
    done = run_tune("show", "--storage", "sqlite:///none.db", cwd=workdir)
    assert_refused(done, "No tunepilot studies in sqlite:///none.db yet", "tune run")
    assert "None" not in done.stderr


# --- a worker told --llm none -------------------------------------------------------------------

def test_a_worker_told_llm_none_joins_a_study_that_names_a_server(workdir, study_name):
    url = server_url("postgresql")
    made = run_tune("create", "--config", "toy.toml", "--trainer", "toy:quadratic", "--llm",
                    "openai:gpt-4o-mini", "--llm-base-url", "http://127.0.0.1:9/v1",
                    "--storage", url, "--study", study_name, "--n-trials", "3",
                    "--pruner", "none", cwd=workdir)
    assert made.returncode == 0, made.stdout + made.stderr
    keyed = {"OPENAI_API_KEY": "sk-NOT-FOR-THAT-SERVER"}
    refused = run_tune("worker", "--storage", url, "--study", study_name, cwd=workdir,
                       env=keyed)
    assert_refused(refused, "--llm none")  # without the flag: the key would go there
    done = run_tune("worker", "--storage", url, "--study", study_name, "--llm", "none",
                    cwd=workdir, env=keyed)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stopped: budget of 3 trials used" in done.stdout
    assert "[llm]" not in done.stdout


def test_a_new_study_opens_beside_studies_it_cannot_rank(workdir):
    """A new study on a shared server ended in Optuna's study summaries (`TypeError: '<' not
    supported between instances of 'NoneType' and 'NoneType'`): another study's trials read
    complete before their values were. The warm start reads the studies' own records and
    opens only those of the same task."""
    import optuna

    url = f"sqlite:///{workdir / 'shared.db'}"
    storage = optuna.storages.RDBStorage(url)
    other = optuna.create_study(storage=storage, study_name="another process's")
    for _ in range(2):  # complete, no value yet: what a read between the two writes saw
        storage.set_trial_state_values(other.ask()._trial_id, optuna.trial.TrialState.COMPLETE)
    optuna.create_study(storage=storage, study_name="two goals",
                        directions=["minimize", "maximize"]).optimize(
        lambda t: (t.suggest_float("x", 0.0, 1.0), 1.0), n_trials=2)
    where = ("--config", "toy.toml", "--trainer", "toy:quadratic", "--storage", url)
    first = run_tune("run", *where, "--llm", "none", "--study", "first", "--n-trials", "3",
                     cwd=workdir)
    assert first.returncode == 0, first.stdout + first.stderr
    second = run_tune("run", *where, "--llm", "none", "--study", "second", "--n-trials", "2",
                      cwd=workdir)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "warm start: from study first" in second.stdout


# --- a bug in the user's trainer: its file and line -------------------------------------------

def test_a_bug_in_the_trainer_is_shown_at_its_file_and_line_everywhere(workdir):
    where = "bad_train.py:2 in train"  # below the working directory: as the user opens it
    done = run_tune(*RUN, "--trainer", "bad_train:train", "--storage", "sqlite:///b.db",
                    "--n-trials", "10", cwd=workdir)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"ZeroDivisionError: division by zero at {where}" in done.stdout  # each trial
    assert f"(ZeroDivisionError: division by zero) at {where}; this looks like a bug" in (
        done.stdout)
    runs = workdir / "tunepilot-runs" / "sqlite-b.db"
    assert where in (runs / "bad_train-train.log").read_text()
    assert where in (runs / "bad_train-train.html").read_text()
    show = run_tune("show", "--storage", "sqlite:///b.db", cwd=workdir, env={"COLUMNS": "200"})
    assert show.returncode == 0, show.stderr
    assert "by zero at bad_train.py:2 in train" in show.stdout

    # `tune rerun` of the failed trial: its record, then the same error, no traceback.
    again = run_tune("rerun", "0", "--storage", "sqlite:///b.db", cwd=workdir)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "Traceback" not in again.stdout + again.stderr
    assert (f"recorded: failed, exception: ZeroDivisionError: division by zero at {where}"
            in again.stdout)
    assert f"now: failed, exception: ZeroDivisionError: division by zero at {where}" in (
        again.stdout)
    assert "?" not in again.stdout.splitlines()[1]  # nothing unknown printed as "?"


def test_the_place_is_the_users_line_not_the_librarys():
    import numpy as np

    from tunepilot.errors import describe

    def users_code():
        return np.linalg.inv(np.zeros((2, 2)))  # raises inside numpy

    try:
        users_code()
    except Exception as e:
        where = describe(e)["where"]
    here = os.path.relpath(__file__) if __file__.startswith(os.getcwd()) else __file__
    assert where.startswith(f"{here}:") and where.endswith(" in users_code"), where


# --- the best config is the one its trial ran -----------------------------------------------------

def test_the_best_config_keeps_the_epochs_its_trial_ran():
    best = TrialRecord(number=0, state="complete", params={"lr": 0.01}, value=0.4,
                       fixed={"epochs": 3, "seed": 0})
    later = TrialRecord(number=1, state="complete", params={"lr": 0.1}, value=0.5,
                        fixed={"epochs": 2, "seed": 0})
    result = TuneResult.of("s", History((best, later)), {"epochs": 2, "seed": 0},
                           Stop.budget(2))
    assert result.best_config == {"epochs": 3, "seed": 0, "lr": 0.01}
    old = TrialRecord(number=0, state="complete", params={"lr": 0.01}, value=0.4)
    assert TuneResult.of("s", History((old,)), {"epochs": 2}, Stop.budget(1)).best_config == {
        "epochs": 2, "lr": 0.01}  # a release that did not record its settings: this run's


# --- logs and reports of two storages ------------------------------------------------------------

def test_runs_on_two_storages_keep_two_logs_and_a_refused_run_logs_its_error(workdir):
    for db in ("one.db", "two.db"):
        done = run_tune(*RUN, "--trainer", "toy:quadratic", "--storage", f"sqlite:///{db}",
                        "--n-trials", "2", cwd=workdir)
        assert done.returncode == 0, done.stderr
        assert f"log: tunepilot-runs/sqlite-{db}/toy-quadratic.log" in done.stdout
    logs = sorted(p.relative_to(workdir).as_posix()
                  for p in (workdir / "tunepilot-runs").rglob("*.log"))
    assert logs == ["tunepilot-runs/sqlite-one.db/toy-quadratic.log",
                    "tunepilot-runs/sqlite-two.db/toy-quadratic.log"]
    for db in ("one.db", "two.db"):
        text = (workdir / "tunepilot-runs" / f"sqlite-{db}" / "toy-quadratic.log").read_text()
        assert text.count("run starts") == 1 and f"storage: sqlite:///{db}" in text
        assert (workdir / "tunepilot-runs" / f"sqlite-{db}" / "toy-quadratic.html").exists()
    # A run refused once its log is open: the log says why, after its settings.
    refused = run_tune(*RUN, "--trainer", "toy:quadratic", "--storage", "sqlite:///one.db",
                       "--n-trials", "2", "--epochs", "9", cwd=workdir)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    log = (workdir / "tunepilot-runs" / "sqlite-one.db" / "toy-quadratic.log").read_text()
    settings = log.rindex("epochs = 9 (flag)")
    assert log.index("error (nothing ran): ", settings) > settings
    assert "--accept-changes" in log[settings:]


def test_a_journal_run_leaves_no_lock_file(workdir):
    done = run_tune(*RUN, "--trainer", "toy:quadratic", "--storage", "journal:j.log",
                    "--n-trials", "3", cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in workdir.iterdir() if p.name.startswith("j.log")) == ["j.log"]


# --- tune calibrate from one table ---------------------------------------------------------------

def test_calibration_from_too_few_searches_gives_no_verdict_and_plain_json(tmp_path):
    from tunepilot.agent import calibrate as cal
    from tunepilot.memory import calibrations
    from tunepilot.ui.calibrate_command import report_lines

    def accept(request):
        if "configs" in json.dumps(request.get("response_format") or {}):
            return json.dumps({"configs": [], "rationale": "Nothing known about this table."})
        return json.dumps({"decision": "accept", "rationale": "The candidate looks fine."})

    from langchain_openai import ChatOpenAI

    with ScriptedLLMServer(accept) as server:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test",
                           max_retries=0, timeout=10)
        report = cal.calibrate(model, datasets=("australian",), seeds=1, budget=6, jobs=2)
    assert report.verdict == calibrations.TOO_FEW
    assert "1 table x 1 seed" in report.summary and "inf" not in report.summary
    lines = report_lines(report)
    assert not any("inf" in line for line in lines), lines
    # Each variant's trials counted apart: the verdict's (disguised) and the published.
    assert sum(line.startswith("its trials on the disguised (the verdict's) tables") for line
               in lines) == 1
    path = calibrations.save(report.calibration("v"), tmp_path / "calibrations.json")
    text = path.read_text()
    assert "Infinity" not in text and "NaN" not in text
    kept = calibrations.Calibration.from_record(json.loads(text)[0])
    assert kept is not None and kept.prior() == (0.0, 0.0)  # starts from nothing, not the floor


# --- a model that falls silent, and a slow one ----------------------------------------------------

class Heard(Observer):
    """What a run says once, as it happens (`Observer.notice`)."""

    def __init__(self):
        self.notices: list[str] = []

    def notice(self, text):
        self.notices.append(text)


def test_a_model_whose_share_is_spent_says_so_once_and_when_it_reviews_again():
    from langchain_openai import ChatOpenAI

    from tunepilot import Categorical, Float, SearchSpace, Tuner, trainers

    n = {"calls": 0}

    def override(request):
        n["calls"] += 1
        return json.dumps({"decision": "override",
                           "config": {"x": -9.0 + 0.7 * n["calls"], "opt": "sgd"},
                           "rationale": "A point far from the candidate tests a new region."})

    heard = Heard()
    space = SearchSpace.of(x=Float(-10.0, 10.0), opt=Categorical(["adam", "sgd"]))
    with ScriptedLLMServer(override) as server:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test",
                           max_retries=0, timeout=10)
        history = Tuner(trainers.callable(quadratic), space, storage="sqlite:///:memory:",
                        study="q", llm=model, strategy="review", sampler="tpe", pruner="none",
                        display=heard, llm_time_share=1.0, max_override_share=0.25,
                        opening=0).run(n_trials=8).history
    quiet = [t for t in heard.notices if t.startswith("LLM not asked")]
    # Trial 0 was its override: at 25% (at least one) it may have 1 of the trials up to the
    # 8th; from trial 1 it waits, said once, there.
    assert [t.proposer for t in history] == ["llm"] + ["optuna"] * 6 + ["llm"]
    assert quiet == [
        "LLM not asked from trial 1: its turns took 1 of the last 1 trial, all that the "
        "share you set (max_override_share) (25%) allows in 2 in a row; the sampler proposes "
        "until trial 7, where the model reviews again"], heard.notices


def test_a_slow_model_costs_one_time_out_a_turn_and_is_said_slow():
    import time

    from langchain_openai import ChatOpenAI

    from tunepilot import Float, SearchSpace, Tuner, trainers

    heard = Heard()
    with ScriptedLLMServer(lambda request: "{}") as server:
        for _ in range(3):
            server.enqueue("{}", delay=3.0)
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test",
                           max_retries=0, timeout=1.0)
        start = time.monotonic()
        history = Tuner(trainers.callable(quadratic), SearchSpace.of(x=Float(-10.0, 10.0)),
                        storage="sqlite:///:memory:", study="slow", llm=model, strategy="llm",
                        pruner="none", display=heard, opening=0, llm_time_share=1.0
                        ).run(n_trials=1).history
        took = time.monotonic() - start
    assert len(server.requests) == 1  # one request, not one per transport retry
    assert took < 2.8, took
    assert history[0].proposer == "fallback"
    assert history[0].fallback_reason.startswith("LLM too slow: no answer within llm_timeout")
    assert heard.notices == ["LLM too slow: no answer within llm_timeout (raise llm_timeout "
                             "for a slow model). Optuna proposes until it answers again; the "
                             "search goes on"]


# --- small things --------------------------------------------------------------------------------

def test_the_settings_line_shows_a_duration_as_written(workdir):
    (workdir / "timed.toml").write_text('timeout = "2h"\n' + (workdir / "toy.toml").read_text())
    done = run_tune("run", "--config", "timed.toml", "--llm", "none", "--trainer",
                    "toy:quadratic", "--n-trials", "1", "--storage", "sqlite:///t.db",
                    cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert "timeout = 2h (file)" in done.stdout


def test_make_clean_removes_the_runs_folder():
    from tests.conftest import ROOT

    clean = next(line for line in (ROOT / "Makefile").read_text().splitlines()
                 if line.startswith("\trm -rf"))
    assert "tunepilot-runs" in clean.split()


def test_no_worker_line_speaks_of_a_killed_trial_when_none_was_killed():
    from rich.console import Console

    from tunepilot.ui.display import PlainDisplay

    console = Console(record=True, width=200)
    PlainDisplay(console).waiting([3, 5])
    said = console.export_text()
    assert "waiting for running trials #3, #5" in said and "killed" not in said
