"""A night alone: one study is one experiment, secrets stay secret, a sick LLM costs seconds,
nothing a model writes breaks a command, and the rules that stop a search say so."""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_openai import ChatOpenAI

from tests.conftest import (
    ROOT,
    TOY_EPOCHS,
    TUNE,
    quadratic,
    run_tune,
    runs_file,
    server_url,
    toy_workdir,
)
from tests.llm_server import ScriptedLLMServer
from tunepilot import Categorical, Float, SearchSpace, Suggestion, Tuner, trainers
from tunepilot.memory import History, load_study
from tunepilot.proposers.llm_suggester import LLMSuggester

TOY = TOY_EPOCHS + """
import ctypes, time

def sleepy(config, report):
    time.sleep(1.0)
    report(1, (config["x"] - 2.0) ** 2)
    return (config["x"] - 2.0) ** 2

def segfault(config, report):
    ctypes.string_at(0)

def broken(config, report):
    raise KeyError("features")
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return toy_workdir(tmp_path, TOY)


def tune(workdir, *args, env=None, timeout=300):
    return run_tune(*args, cwd=workdir, env=env, timeout=timeout)


RUN = ("run", "--llm", "none", "--config", "toy.toml", "--storage", "sqlite:///s.db",
       "--pruner", "none")


# --- one study, one experiment ---------------------------------------------------------------

def test_a_changed_epochs_or_space_is_refused_with_the_difference_named(workdir):
    first = tune(workdir, *RUN, "--trainer", "toy:epochs", "--epochs", "3", "--n-trials", "3")
    assert first.returncode == 0, first.stderr
    again = tune(workdir, *RUN, "--trainer", "toy:epochs", "--epochs", "6", "--n-trials", "5")
    assert again.returncode == 2
    assert "space.fixed.epochs: 3 -> 6" in again.stderr
    assert "--study NAME" in again.stderr and "--accept-changes" in again.stderr
    (workdir / "wide.toml").write_text('[space]\nx = { type = "float", low = -10.0, '
                                       'high = 20.0 }\n')
    wider = tune(workdir, "run", "--llm", "none", "--config", "wide.toml", "--storage",
                 "sqlite:///s.db", "--trainer", "toy:epochs", "--study", "toy-epochs")
    assert wider.returncode == 2 and "space.params.x.high: 10.0 -> 20.0" in wider.stderr
    study = load_study(f"sqlite:///{workdir / 's.db'}", "toy-epochs")
    assert len(study.trials) == 3  # nothing ran


def test_accepted_changes_are_recorded_and_best_and_rerun_use_each_trial_s_settings(workdir):
    assert tune(workdir, *RUN, "--trainer", "toy:epochs", "--epochs", "3",
                "--n-trials", "3").returncode == 0
    more = tune(workdir, *RUN, "--trainer", "toy:epochs", "--epochs", "6", "--n-trials", "5",
                "--accept-changes")
    assert more.returncode == 0, more.stderr
    history = History.from_study(load_study(f"sqlite:///{workdir / 's.db'}", "toy-epochs"))
    assert [history.config_of(t)["epochs"] for t in history] == [3, 3, 3, 6, 6]
    assert [len(t.curve) for t in history] == [3, 3, 3, 6, 6]
    assert history.changes[0]["changes"] == ["space.fixed.epochs: 3 -> 6"]
    best = tune(workdir, "best", "--storage", "sqlite:///s.db", "--study", "toy-epochs")
    trial = history.best_trial
    assert json.loads(best.stdout)["epochs"] == len(trial.curve)
    rerun = tune(workdir, "rerun", "0", "--storage", "sqlite:///s.db", "--study", "toy-epochs")
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stdout.count("  epoch ") == 3  # trial 0's own 3 epochs, not today's 6


# --- secrets ---------------------------------------------------------------------------------

SECRETS = ("PGSECRET1", "PGSECRET2", "sk-KEYSECRET3")


def _dump_database(url: str) -> str:
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    meta = sqlalchemy.MetaData()
    meta.reflect(engine)
    with engine.connect() as conn:
        return "\n".join(repr(row) for table in meta.sorted_tables
                         for row in conn.execute(table.select()))


@pytest.mark.parametrize("form", ["userinfo", "query"])
def test_no_secret_reaches_output_logs_reports_the_database_or_ps(workdir, study_name, form):
    base = server_url("postgresql")  # postgresql://postgres@127.0.0.1:5432/test
    url = (base.replace("postgres@", "postgres:PGSECRET1@") if form == "userinfo"
           else base + "?password=PGSECRET2")
    with ScriptedLLMServer(lambda r: json.dumps({"config": {"x": 1.0 + len(r["messages"]) % 3},
                                                 "rationale": "a guess"})) as server:
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{workdir}",
               "TUNEPILOT_STORAGE": url, "OPENAI_API_KEY": "sk-KEYSECRET3"}
        proc = subprocess.Popen(
            [*TUNE, "run", "--config", "toy.toml", "--trainer", "toy:sleepy", "--study",
             study_name, "--llm", "openai:scripted", "--llm-base-url", server.base_url,
             "--n-workers", "2", "--n-trials", "4"],
            cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(4)  # mid-run: the workers are up
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, out + err
    assert "tunepilot worker" in ps or "-m tunepilot" in ps  # the workers were seen
    assert any({k.lower(): v for k, v in h.items()}.get("authorization")
               == "Bearer sk-KEYSECRET3" for h in server.headers)  # the key went where told
    texts = {"stdout": out, "stderr": err, "ps": ps,
             "log": runs_file(workdir, url, study_name, ".log").read_text(),
             "report": runs_file(workdir, url, study_name, ".html").read_text(),
             "database": _dump_database(base)}
    for where, text in texts.items():
        for secret in SECRETS:
            assert secret not in text, f"{secret} in {where}"
    assert "***" in out  # the storage line is there, redacted


def test_the_resume_line_redacts_a_password_typed_on_the_command_line(workdir, study_name):
    url = server_url("postgresql").replace("postgres@", "postgres:PGSECRET1@")
    done = tune(workdir, "run", "--llm", "none", "--config", "toy.toml", "--trainer",
                "toy:epochs", "--storage", url, "--study", study_name, "--n-trials", "2")
    assert done.returncode == 0, done.stderr
    assert "PGSECRET1" not in done.stdout + done.stderr
    assert "to resume: tune run" in done.stdout and "postgres:***@" in done.stdout


def test_a_worker_does_not_send_its_key_to_a_server_named_by_the_study(workdir, study_name):
    url = server_url("postgresql")
    with ScriptedLLMServer(lambda r: json.dumps({"config": {"x": 1.5}, "rationale": "r"})) as s:
        made = tune(workdir, "create", "--config", "toy.toml", "--trainer", "toy:epochs",
                    "--storage", url, "--study", study_name, "--llm", "openai:scripted",
                    "--llm-base-url", s.base_url, "--strategy", "llm", "--n-trials", "2")
        assert made.returncode == 0, made.stderr
        env = {"OPENAI_API_KEY": "sk-KEYSECRET3", "TUNEPILOT_STORAGE": url}
        refused = tune(workdir, "worker", "--study", study_name, env=env)
        assert refused.returncode == 2
        assert "--llm-base-url" in refused.stderr and "OPENAI_API_KEY" in refused.stderr
        assert s.requests == []  # nothing was sent
        confirmed = tune(workdir, "worker", "--study", study_name, "--llm-base-url",
                         s.base_url, env=env)
        assert confirmed.returncode == 0, confirmed.stdout + confirmed.stderr
        assert s.requests  # the endpoint this worker was given


# --- a sick LLM ------------------------------------------------------------------------------

SPACE = SearchSpace.of(x=Float(-10.0, 10.0), opt=Categorical(["adam", "sgd"]))


def _answer(x, opt="adam", rationale="because"):
    return json.dumps({"config": {"x": x, "opt": opt}, "rationale": rationale})


def _llm(url, timeout=5.0, **kw):
    model = ChatOpenAI(model="gpt-4o-mini", base_url=url, api_key="not-needed", max_retries=0,
                       timeout=timeout)
    return LLMSuggester(model, model_name="gpt-4o-mini", task="toy", n_trials=20, **kw)


def _tuner(storage, llm, name="toy"):
    return Tuner(trainers.callable(quadratic), SPACE, storage=storage, study=name,
                 suggester=llm, pruner="none", display=None)


def test_a_500_before_the_first_answer_keeps_json_schema(storage):
    xs = iter([1.0, 3.0, 5.0, 7.0])
    with ScriptedLLMServer(lambda r: _answer(next(xs))) as server:
        for _ in range(4):  # one whole turn of 5xx (the retries included)
            server.enqueue(status=500)
        result = _tuner(storage, _llm(server.base_url, max_wait_s=0.05)).run(n_trials=3)
    first, second, third = result.history
    assert first.proposer == "fallback" and "500" in first.fallback_reason
    assert (second.proposer, third.proposer) == ("llm", "llm")
    formats = {(r.get("response_format") or {}).get("type") for r in server.requests}
    assert formats == {"json_schema"} and not any(r.get("tools") for r in server.requests)


def test_an_outage_costs_seconds_per_trial_with_the_breaker(storage):
    with ScriptedLLMServer(lambda r: _answer(1.0)) as server:
        for _ in range(200):
            server.enqueue(content=_answer(1.0), delay=2.0)  # every request times out
        llm = _llm(server.base_url, timeout=0.3, max_wait_s=0.2)
        start = time.monotonic()
        result = _tuner(storage, llm).run(n_trials=20)
        per_trial = (time.monotonic() - start) / 20
    print(f"outage of 20 trials: {per_trial:.2f} s per trial, {len(server.requests)} requests")
    assert result.n_finished == 20
    assert all(t.proposer == "fallback" for t in result.history)
    assert per_trial < 3.0
    assert len(server.requests) < 3 * 4 + 8  # three full turns, then single probes
    sat_out = [t for t in result.history if t.fallback_reason.startswith("LLM sitting out")]
    assert len(sat_out) >= 10
    # The summary counts from the records: the turns with a request, those it sat out, and
    # the fallbacks said as the trial lines said them (unreachable, not "no valid answer").
    from tunepilot.ui.display import summary_lines

    [line] = [x for x in summary_lines(result) if x.startswith("LLM:")]
    asked = 20 - len(sat_out)
    assert f"LLM: asked on {asked} trials" in line
    assert f"{asked} fell back to the sampler (unreachable)" in line
    assert f"sat out {len(sat_out)} turns" in line and "no valid answer" not in line


def test_a_model_that_answers_garbage_sits_out_and_is_probed(storage):
    """Three turns in a row with no valid answer (3 attempts each), then the model sits out 1,
    2, 4, 8 turns with one single-attempt probe between: 3 requests after its third invalid
    turn over 20 trials, not 3 a trial. A probe answered validly brings it back."""
    served = itertools.count()

    def garbage_then_good(request):
        n = next(served)
        # Its valid configs must not repeat one the sampler drew (the repeat check would
        # refuse them): near the top of the range, where this seeded search does not go.
        return "no JSON here, sorry" if n < 12 else _answer(9.7 - 0.5 * (n - 12))

    with ScriptedLLMServer(garbage_then_good) as server:
        result = _tuner(storage, _llm(server.base_url)).run(n_trials=24)
    history = list(result.history)
    reasons = [t.fallback_reason for t in history[:21]]
    assert all(t.proposer == "fallback" for t in history[:21])
    assert "not a JSON object" in reasons[0]
    assert reasons[2].endswith("3 turns in a row, so it sits out its next 1")
    sat_out = [i for i, r in enumerate(reasons) if r.startswith("LLM sitting out: ")]
    assert "turns in a row gave no valid answer" in reasons[sat_out[0]]
    # Probes at twice the last interval: trials 4, 7, 12, then 21 (sitting out 13-20).
    assert [i for i in range(3, 21) if i not in sat_out] == [4, 7, 12]
    assert [t.llm.attempts for t in history if t.number in (4, 7, 12)] == [1, 1, 1]
    # The probe at trial 21 got a valid answer: the model proposes again, every turn.
    assert [t.proposer for t in history[21:]] == ["llm"] * 3
    # 3 requests after its 3rd invalid turn (before the probe at 21), not 3 a trial.
    assert sum(t.llm.attempts for t in history[:21]) == 3 * 3 + 3
    assert len(server.requests) == sum(t.llm.attempts for t in history)
    # The trial's line on the terminal says why in a few words; the log keeps the whole reason.
    from tunepilot.ui.display import short_cause

    assert [short_cause(r) for r in reasons[:5]] == ["not JSON"] * 3 + ["sitting out", "not JSON"]
    assert short_cause("no valid answer in 3 attempts; last: 'lr': 50.0 is outside [1e-05, "
                       "0.1]; 'x' is missing") == "lr=50.0 out of range"
    assert short_cause("no valid answer in 1 attempts; last: this configuration repeats trial "
                       "#3 (every value equal") == "repeats #3"


def test_the_llm_answers_again_after_an_outage(storage):
    xs = itertools.count(-9.0, 1.5)
    with ScriptedLLMServer(lambda r: _answer(next(xs))) as server:
        for _ in range(12):
            server.enqueue(status=503)
        result = _tuner(storage, _llm(server.base_url, max_wait_s=0.01)).run(n_trials=12)
    proposers = [t.proposer for t in result.history]
    assert proposers[0] == "fallback" and proposers[-1] == "llm"


def test_a_401_switches_the_llm_off_once(workdir):
    # The toy trials take no time, so the default cap on the LLM's share of wall time would take
    # the turns first: lifted, to see what the 401 alone does.
    with ScriptedLLMServer() as server:
        for _ in range(50):
            server.enqueue(status=401)
        done = tune(workdir, "run", "--config", "toy.toml", "--trainer", "toy:epochs",
                    "--storage", "sqlite:///s.db", "--llm", "openai:scripted",
                    "--llm-base-url", server.base_url, "--strategy", "llm", "--n-trials", "4",
                    "--llm-time-share", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("LLM switched off for this run") == 1
    assert done.stdout.count("[fallback: LLM off]") == 4  # each trial's line says why, briefly
    assert len(server.requests) == 1  # asked once, never again
    history = History.from_study(load_study(f"sqlite:///{workdir / 's.db'}", None))
    assert [t.proposer for t in history] == ["fallback"] * 4


def test_a_refused_connection_is_said_once_when_it_starts(workdir):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    done = tune(workdir, "run", "--config", "toy.toml", "--trainer", "toy:epochs", "--storage",
                "sqlite:///s.db", "--llm", "openai:scripted", "--llm-base-url", url,
                "--strategy", "llm", "--n-trials", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("! LLM unreachable") == 1  # at the first failure, not again


def test_a_400_digit_integer_in_an_answer_falls_back(storage):
    huge = '{"config": {"x": 1' + "0" * 400 + ', "opt": "adam"}, "rationale": "big"}'
    llm = LLMSuggester(FakeListChatModel(responses=[huge] * 3 + [_answer(1.5)]),
                       model_name="scripted", task="toy", n_trials=3, structured=False)
    result = _tuner(storage, llm).run(n_trials=2)
    first, second = result.history
    assert first.proposer == "fallback" and "invalid answer" in first.llm.errors[0]
    assert second.proposer == "llm"


def test_the_demo_s_near_duplicate_is_refused(storage):
    space = SearchSpace.of(lr=Float(1e-5, 1e-1, log=True), batch_size=Categorical([256, 512]),
                           precision=Categorical(["32-true", "bf16-mixed"]),
                           dropout=Float(0.0, 0.5))
    tried = {"lr": 0.000465712, "batch_size": 256, "precision": "bf16-mixed",
             "dropout": 0.198431}
    again = {"lr": 0.0004657, "batch_size": 256, "precision": "bf16-mixed", "dropout": 0.1984}
    answers = [json.dumps({"config": c, "rationale": "r"})
               for c in (tried, again, again, {**again, "lr": 0.002})]
    llm = LLMSuggester(FakeListChatModel(responses=answers), model_name="scripted",
                       task="toy", n_trials=2, structured=False)
    tuner = Tuner(trainers.callable(lambda c, r: c["lr"]), space, storage=storage,
                  study="dupes", suggester=llm, pruner="none", display=None)
    first, second = tuner.run(n_trials=2).history
    assert second.params["lr"] == 0.002  # the copy was refused twice, then it moved
    assert "repeats trial #0" in second.llm.errors[0]


# --- model text is text ----------------------------------------------------------------------

def test_show_prints_markup_in_rationales_and_errors_literally(workdir):
    def suggester(space, history):
        return Suggestion({"x": -1.0 - len(history)}, rationale="keep [/bold] and [red]x[/red]")

    def failing(config, report):
        if config["x"] < -1.5:
            raise RuntimeError("bad [/bold] [red]thing")
        return 1.0

    Tuner(trainers.callable(failing), SearchSpace.of(x=Float(-10.0, 10.0)),
          storage=f"sqlite:///{workdir / 's.db'}", study="markup", suggester=suggester,
          pruner="none", display=None).run(n_trials=2)
    shown = tune(workdir, "show", "--storage", "sqlite:///s.db", "--study", "markup",
                 env={"COLUMNS": "250"})
    assert shown.returncode == 0, shown.stderr
    assert "keep [/bold] and [red]x[/red]" in shown.stdout
    assert "bad [/bold] [red]thing" in shown.stdout


# --- rules a person can see ------------------------------------------------------------------

def test_segfaults_of_different_configs_do_not_stop_the_search(workdir):
    done = tune(workdir, *RUN, "--trainer", "toy:segfault", "--n-trials", "4", "--isolate",
                "--sampler", "random")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stopped: budget of 4 trials used" in done.stdout


def test_the_same_user_exception_three_times_stops_with_its_rule_and_exit_code(workdir):
    done = tune(workdir, *RUN, "--trainer", "toy:broken", "--n-trials", "20")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "stopped: repeated failure: the last 3 trials failed with the same error" in done.stdout
    assert "KeyError" in done.stdout
    log = runs_file(workdir, "sqlite:///s.db", "toy-broken", ".log").read_text()
    report = runs_file(workdir, "sqlite:///s.db", "toy-broken", ".html").read_text()
    assert "repeated failure" in log and "repeated failure" in report


@pytest.mark.parametrize("url", ["sqlite:///s.db", "journal:s.log"])
def test_a_second_process_on_one_sqlite_or_journal_study_is_refused(workdir, url):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{workdir}"}
    run = (*RUN, "--storage", url)  # the last --storage counts
    first = subprocess.Popen([*TUNE, *run, "--trainer", "toy:sleepy", "--n-trials", "6"],
                             cwd=workdir, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        log = runs_file(workdir, url, "toy-sleepy", ".log")
        for _ in range(600):  # until the first is running trials
            if log.exists() and "run starts" in log.read_text():
                break
            time.sleep(0.1)
        second = tune(workdir, *run, "--trainer", "toy:sleepy", "--n-trials", "6")
        assert second.returncode == 2
        assert f"is being run by process {first.pid}" in second.stderr
        # The advice names a storage that takes several processes, not the other file.
        assert "postgresql://" in second.stderr and "journal:" not in second.stderr
    finally:
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, out + err


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--target", "nan", "finite"), ("--target", "inf", "finite"),
    ("--llm-base-url", "notaurl", "http://"),
])
def test_what_can_never_work_is_refused_at_the_start(workdir, flag, value, said):
    done = tune(workdir, *RUN, "--trainer", "toy:epochs", flag, value)
    assert done.returncode == 2 and said in done.stderr
    assert not (workdir / "tunepilot-runs").exists()  # refused before anything ran
