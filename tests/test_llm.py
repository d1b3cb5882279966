"""The LLM suggester: fake chat models for the loop logic, a real HTTP server for the rest."""

from __future__ import annotations

import itertools
import json
import socket
import time

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_openai import ChatOpenAI

from tests.conftest import quadratic, run_tune, runs_file
from tests.llm_server import ScriptedLLMServer
from tunepilot import Categorical, Float, SearchSpace, Tuner, load_config, trainers
from tunepilot.agent.build import from_config
from tunepilot.memory import History, attrs, load_study
from tunepilot.proposers.llm_suggester import LLMSuggester, answer_schema

SPACE = SearchSpace.of(x=Float(-10.0, 10.0), opt=Categorical(["adam", "sgd"]))


def answer(x, opt="adam", rationale="because", notes=None):
    body = {"config": {"x": x, "opt": opt}, "rationale": rationale}
    if notes:
        body["notes"] = notes
    return json.dumps(body)


def suggester(model, **kw):
    return LLMSuggester(model, model_name=kw.pop("model_name", "gpt-4o-mini"), task="toy task",
                        n_trials=10, **kw)


def tuner(storage, llm, name="toy"):
    return Tuner(trainers.callable(quadratic), SPACE, storage=storage, study=name,
                 suggester=llm, pruner="none")


# --- loop logic, with langchain's fake chat model -------------------------------------------

def test_valid_answer_becomes_the_trial_with_rationale_and_notes(storage):
    fake = FakeListChatModel(responses=[
        "Here you go:\n```json\n" + answer(1.0, notes="x near 2 looks good") + "\n```",
        answer(2.5, "sgd"),
    ])
    result = tuner(storage, suggester(fake, structured=False)).run(n_trials=2)
    first, second = result.history
    assert first.params == {"x": 1.0, "opt": "adam"} and first.proposer == "llm"
    assert first.rationale == "because"
    assert first.user_attrs["llm"]["notes"] == "x near 2 looks good"
    assert second.params == {"x": 2.5, "opt": "sgd"}
    assert History.from_study(load_study(storage, "toy")).notes == "x near 2 looks good"


def test_invalid_then_valid_answer_shows_the_error_to_the_model():
    fake = FakeListChatModel(responses=[answer(50.0), answer(3.0)])
    llm = suggester(fake, structured=False)
    seen = []
    original = llm.prompt

    def spy(space, history, feedback=None):
        seen.append(feedback)
        return original(space, history, feedback)

    llm.prompt = spy
    suggestion = llm(SPACE, History())
    assert suggestion.params == {"x": 3.0, "opt": "adam"}
    assert seen == [None, "'x': 50 is outside [-10, 10]"]
    assert suggestion.meta["llm"]["attempts"] == 2


def test_repeats_and_garbage_fall_back_to_optuna_with_the_cause(storage):
    fake = FakeListChatModel(responses=[answer(1.0)] + [answer(1.0)] * 3 + ["no idea"] * 3)
    result = tuner(storage, suggester(fake, structured=False)).run(n_trials=3)
    first, second, third = result.history
    assert first.proposer == "llm"
    assert second.proposer == "fallback"
    assert "repeats trial #0" in second.user_attrs[attrs.FALLBACK_REASON]
    assert third.proposer == "fallback"
    assert "not a JSON object" in third.user_attrs[attrs.FALLBACK_REASON]
    assert third.user_attrs["llm"]["attempts"] == 3


def test_prompt_carries_history_notes_hints_and_running_trials(storage):
    fake = FakeListChatModel(responses=[answer(x) for x in (1.0, 2.0, 3.0)])
    llm = suggester(fake, structured=False)
    t = tuner(storage, llm)
    t.run(n_trials=2)
    t.hint("opt=sgd was unstable last time")
    running = t.study.ask()
    running.suggest_float("x", -10, 10)
    running.suggest_categorical("opt", ["adam", "sgd"])
    prompt = llm.prompt(SPACE, History.from_study(t.study))
    assert "opt=sgd was unstable last time" in prompt
    assert "Best so far:" in prompt and "#0 [llm] x=1 opt=adam -> 1.0000" in prompt
    assert f"#{running.number} x=" in prompt.split("Running now")[1]
    assert "Trial #3 (4 of a budget of 10)" in prompt


def test_the_prompt_shows_each_trial_once():
    import optuna

    study = optuna.create_study()

    def objective(trial):
        x = trial.suggest_float("x", -10, 10)
        trial.suggest_categorical("opt", ["adam", "sgd"])
        if trial.number == 6:
            raise RuntimeError("CUDA out of memory")
        return (x - 2) ** 2

    study.optimize(objective, n_trials=8, catch=(RuntimeError,))
    prompt = suggester(FakeListChatModel(responses=["{}"]), structured=False).prompt(
        SPACE, History.from_study(study))
    assert "Failures:" in prompt and "Most recent:" in prompt
    lines = [line for line in prompt.splitlines() if line.startswith("- #")]
    numbers = [line.split()[1] for line in lines]
    assert sorted(numbers) == sorted(set(numbers)), lines
    assert "#6" in numbers


def test_a_pruned_trials_curve_ends_where_it_was_pruned_not_at_its_last_epoch():
    from tunepilot.memory import TrialRecord
    from tunepilot.memory.text import trial_line

    falling = (0.52, 0.49)
    pruned = trial_line(TrialRecord(9, "pruned", {"x": 1.0}, None, curve=falling))
    assert pruned.endswith("-> pruned after epoch 2 at 0.4900 (curve 0.520 0.490: still "
                           "falling when pruned)"), pruned
    complete = trial_line(TrialRecord(8, "complete", {"x": 1.0}, 0.49, curve=falling))
    assert complete.endswith("(curve 0.520 0.490: still falling at the last epoch)"), complete


def test_prompt_size_is_bounded_however_long_the_history(storage):
    import optuna

    llm = suggester(FakeListChatModel(responses=["{}"]), structured=False)
    study = optuna.create_study()
    sizes = {}
    for n in (10, 100, 1000):
        while len(study.trials) < n:
            study.optimize(lambda tr: (tr.suggest_float("x", -10, 10) - 2) ** 2
                           + 0 * len(tr.suggest_categorical("opt", ["adam", "sgd"])),
                           n_trials=n - len(study.trials))
        sizes[n] = len(llm.prompt(SPACE, History.from_study(study)))
    assert sizes[1000] < sizes[10] * 1.5, sizes


def test_schema_lists_bounds_and_choices():
    schema = answer_schema(SPACE)["properties"]["config"]
    assert schema["properties"]["x"] == {"type": "number", "minimum": -10.0, "maximum": 10.0,
                                         "description": "float in [-10, 10] (linear)"}
    assert schema["properties"]["opt"]["enum"] == ["adam", "sgd"]


# --- a real OpenAI-compatible server on loopback ---------------------------------------------

def openai_model(url, timeout=5.0):
    return ChatOpenAI(model="gpt-4o-mini", base_url=url, api_key="not-needed", max_retries=0,
                      timeout=timeout)


def test_real_server_tokens_cost_and_structured_request():
    with ScriptedLLMServer(lambda r: answer(1.5)) as server:
        suggestion = suggester(openai_model(server.base_url))(SPACE, History())
    assert suggestion.params == {"x": 1.5, "opt": "adam"}
    llm = suggestion.meta["llm"]
    assert llm["tokens_in"] > 100 and llm["tokens_out"] > 5
    assert llm["cost_usd"] == pytest.approx((llm["tokens_in"] * 0.15 + llm["tokens_out"] * 0.6)
                                            / 1e6)
    request = server.requests[0]
    assert request["response_format"]["type"] == "json_schema"
    assert request["messages"][0]["role"] == "system"


def test_a_server_that_refuses_json_schema_gets_the_next_method():
    with ScriptedLLMServer(lambda r: answer(1.5), refuse_json_schema=True) as server:
        llm = suggester(openai_model(server.base_url), max_wait_s=0.1)
        first = llm(SPACE, History())
        second = llm(SPACE, History())
    assert first.params == {"x": 1.5, "opt": "adam"}
    assert any("500" in e for e in first.meta["llm"]["errors"])
    assert second.meta["llm"]["attempts"] == 1  # the method that worked is kept
    assert server.requests[-1].get("tools") or server.requests[-1].get("response_format")


def test_429_is_retried_after_retry_after():
    with ScriptedLLMServer(lambda r: answer(1.5)) as server:
        server.enqueue(status=429, headers={"Retry-After": "1"})
        start = time.monotonic()
        suggestion = suggester(openai_model(server.base_url))(SPACE, History())
        waited = time.monotonic() - start
    assert suggestion.proposer == "llm"
    assert waited >= 1.0
    assert "429" in suggestion.meta["llm"]["errors"][0]


@pytest.mark.parametrize("content", ['{"config": {"x": 1.0, "opt": "ad', "",
                                     answer(42.0), answer(1.0, opt="rmsprop")])
def test_bad_answers_fall_back_with_the_cause_and_the_search_goes_on(storage, content):
    # Truncated JSON, an empty answer, a value outside the space, a choice not offered.
    with ScriptedLLMServer(lambda r: answer(1.5)) as server:
        for _ in range(3):
            server.enqueue(content=content)
        result = tuner(storage, suggester(openai_model(server.base_url))).run(n_trials=2)
    first, second = result.history
    assert first.proposer == "fallback" and first.state == "complete"
    reason = first.user_attrs[attrs.FALLBACK_REASON]
    assert reason.startswith("no valid answer in 3 attempts")
    assert len(first.user_attrs["llm"]["errors"]) == 3
    assert second.proposer == "llm"  # good answers again: the LLM is back


@pytest.mark.parametrize("failure", ["5xx", "slow", "garbage body", "refused", "401"])
def test_transport_failures_fall_back_and_the_search_goes_on(storage, failure):
    with ScriptedLLMServer(lambda r: answer(1.5)) as server:
        url = server.base_url
        for _ in range(4):
            if failure == "5xx":
                server.enqueue(status=503)
            elif failure == "slow" and not server.script:  # a time-out is not retried
                server.enqueue(content=answer(1.5), delay=1.5)
            elif failure == "garbage body":
                server.enqueue(body="<html>bad gateway</html>")
            elif failure == "401" and not server.script:  # not retried: one is enough
                server.enqueue(status=401)
        if failure == "refused":
            with socket.socket() as s:  # a port nobody listens on
                s.bind(("127.0.0.1", 0))
                url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        llm = suggester(openai_model(url, timeout=0.5), max_wait_s=0.2)
        result = tuner(storage, llm).run(n_trials=2)
    first, second = result.history
    assert first.proposer == "fallback" and first.state == "complete"
    assert first.user_attrs["llm"]["errors"]
    if failure == "401":  # a wrong key does not heal by waiting: off for the run
        assert first.fallback_reason.startswith("LLM switched off for this run")
        assert second.fallback_reason.startswith("LLM off for this run")
        return
    said = "LLM too slow: no answer within llm_timeout" if failure == "slow" else (
        "LLM unreachable")
    assert first.user_attrs[attrs.FALLBACK_REASON].startswith(said)
    if failure != "refused":  # the server is back for the second trial
        assert second.proposer == "llm"


def test_cli_run_with_an_llm_on_the_builtin_task(tmp_path):
    lrs = itertools.cycle([3e-3, 1e-3, 1e-2, 5e-4, 2e-3])

    def responder(request):
        return json.dumps({"config": {"lr": next(lrs), "batch_size": 512,
                                      "precision": "32-true", "dropout": 0.1},
                           "rationale": "moderate lr for Adam on CTR",
                           "notes": "batch 512 is a safe default"})

    with ScriptedLLMServer(responder) as server:
        proc = run_tune("run", "--llm", "openai:gpt-4o-mini", "--llm-base-url", server.base_url,
                        "--strategy", "llm", "--data", "synthetic:4000", "--epochs", "1",
                        "--n-trials", "4", "--trainer", "jax", "--storage", "sqlite:///s.db",
                        cwd=tmp_path, env={"OPENAI_API_KEY": "sk-secret-should-not-leak"})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "strategy: llm (gpt-4o-mini at http://127.0.0.1" in proc.stdout
        show = run_tune("show", "--storage", "sqlite:///s.db", cwd=tmp_path)
    assert show.stdout.count(" llm ") >= 3, show.stdout
    assert "agent's notes:\nbatch 512 is a safe default" in show.stdout
    study = load_study(f"sqlite:///{tmp_path / 's.db'}", None)
    # Trial 0 is the built-in space's default config, under every strategy; then the LLM's.
    assert study.trials[0].user_attrs["proposer"] == "enqueued"
    # (precision among them only where this CPU computes bf16: else it is fixed)
    assert study.trials[0].params == trainers.default_space("jax").defaults()
    for trial in study.trials[1:]:
        assert trial.user_attrs["proposer"] == "llm"
        assert trial.user_attrs["llm"]["rationale"] == "moderate lr for Adam on CTR"
        assert trial.user_attrs["llm"]["tokens_in"] > 0
        assert trial.user_attrs["llm"]["cost_usd"] > 0
    # The key reached the server as a header, and nothing else: not the study, the log, the
    # report, the output or a prompt.
    assert "sk-secret" not in (tmp_path / "s.db").read_bytes().decode("latin-1")
    log = runs_file(tmp_path, "sqlite:///s.db", "jax-synthetic-4000", ".log")
    report = runs_file(tmp_path, "sqlite:///s.db", "jax-synthetic-4000", ".html")
    text = log.read_text()
    assert "[llm]" in text and "LLM proposed it: moderate lr for Adam on CTR" in text
    assert "rationale as written: moderate lr for Adam on CTR" in text
    assert "LLM usage" in report.read_text() and "gpt-4o-mini" in report.read_text()
    for path in (log, report):
        assert "sk-secret" not in path.read_text()
    assert all("sk-secret" not in json.dumps(r) for r in server.requests)
    assert "sk-secret" not in proc.stdout + proc.stderr


def test_warm_start_from_a_finished_study_of_the_same_task(tmp_path, monkeypatch):
    (tmp_path / "toy.py").write_text("def f(config, report):\n    return (config['x'] - 2) ** 2\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    storage = f"sqlite:///{tmp_path / 's.db'}"
    space = {"x": {"type": "float", "low": -10.0, "high": 10.0}}
    first_cfg = load_config(trainer="toy:f", storage=storage, study="first", space=space,
                            strategy="optuna", n_trials=8)
    first, _ = from_config(first_cfg)
    result = first.run(8)
    first.study.set_user_attr(attrs.NOTES, {"text": "x close to 2 wins", "trial": 7})

    fake = FakeListChatModel(responses=[answer(0.5)] * 3)
    second_cfg = first_cfg.model_copy(update={"study": "second"})
    second, _ = from_config(second_cfg)
    llm = suggester(fake, structured=False)
    history = History.from_study(second.study)
    assert history.warm_start["study"] == "first"
    prompt = llm.prompt(SearchSpace.of(x=Float(-10.0, 10.0)), history)
    assert "x close to 2 wins" in prompt and "From an earlier study" in prompt
    run = second.run(1)
    assert run.history[0].params["x"] == pytest.approx(result.best_params["x"])
    assert run.history[0].user_attrs["warm_start_from"] == "first"


def test_llm_spend_budget_stops_the_search(storage):
    with ScriptedLLMServer(lambda r: answer(1.5 + len(r["messages"][-1]["content"]) % 7)) as server:
        result = tuner(storage, suggester(openai_model(server.base_url))).run(
            n_trials=20, llm_budget_usd=1e-5)
    assert result.n_finished == 1  # one gpt-4o-mini call of ~400 tokens costs ~7e-5 USD
    assert result.stop_reason.startswith("LLM spend $0.0001 reached the budget of $1e-05")


def test_llm_token_budget_stops_the_search(storage):
    with ScriptedLLMServer(lambda r: answer(1.5 + len(r["messages"][-1]["content"]) % 7)) as server:
        result = tuner(storage, suggester(openai_model(server.base_url))).run(
            n_trials=20, llm_token_budget=1000)
    assert 2 <= result.n_finished <= 4  # ~400 tokens a trial
    assert result.stop_reason.startswith("LLM tokens ") and "reached the budget of 1,000" in \
        result.stop_reason


def test_the_prompt_names_the_users_metric_and_gives_curve_rules_only_with_curves():
    from tunepilot.memory import History, TrialRecord
    from tunepilot.proposers.llm_suggester import has_curves

    assert load_config(metric="1 - validation accuracy").metric == "1 - validation accuracy"
    llm = LLMSuggester(None, model_name="-", task="t", n_trials=5,  # type: ignore[arg-type]
                       metric="1 - validation accuracy")
    space = SearchSpace.of(x=Float(0.0, 1.0))
    one_epoch = History((TrialRecord(number=0, state="complete", params={"x": 0.5}, value=0.2,
                                     curve=(0.2,), proposer="optuna"),))
    prompt = llm.prompt(space, one_epoch)
    assert "Metric: 1 - validation accuracy; the search minimizes it" in prompt
    assert "Trial #1 (2 of a budget of 5)" in prompt  # one numbering: trials count from #0
    assert not has_curves(one_epoch)
    assert "learning curves" not in llm.system_prompt(review=False, curves=False)
    assert "Read the learning curves" in llm.system_prompt(review=True, curves=True)
