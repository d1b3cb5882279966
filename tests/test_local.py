"""The embedded local model, for real: in process, and behind llama.cpp's own OpenAI server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import run_tune
from tunepilot.memory import load_study

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_path():
    from tunepilot.llm import local

    if not local.available():
        if os.environ.get("CI"):
            raise RuntimeError(f"the local model is not installed in CI: {local.INSTALL}")
        pytest.skip(f"the local model is not installed ({local.INSTALL})")
    return str(local.default_model_path())


@pytest.fixture(scope="module")
def llama_server(model_path):
    """llama.cpp's OpenAI-compatible server with the embedded model, on a free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", model_path, "--host", "127.0.0.1",
         "--port", str(port), "--n_threads", "1", "--n_ctx", "4096", "--verbose", "False"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as r:
                json.load(r)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(
                    f"llama.cpp server did not start: {proc.stderr.read()[-2000:]}") from None
            time.sleep(0.5)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # a generation still running on a loaded machine
        proc.kill()
        proc.wait(timeout=30)


def check_llm_trials(storage, n):
    """n trials: the space's default config first (every strategy runs it), then the LLM's."""
    study = load_study(storage, None)
    assert len(study.trials) == n
    assert study.trials[0].user_attrs["proposer"] == "enqueued"
    for t in study.trials[1:]:
        assert t.state.name == "COMPLETE", t
        proposer = t.user_attrs["proposer"]
        assert proposer in ("llm", "fallback")
        if proposer == "fallback":
            assert t.user_attrs["fallback_reason"]  # the cause is recorded
    return [t.user_attrs["proposer"] for t in study.trials]


def test_tune_with_the_embedded_model_in_process(tmp_path, model_path):
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    # Asked for by name (--strategy review), the embedded model reviews every candidate, though
    # its turns take longer than these trials: no time share caps what a person named.
    proc = run_tune("run", "--data", "synthetic:4000", "--epochs", "1", "--n-trials", "4",
                    "--trainer", "jax", "--storage", "sqlite:///s.db",
                    "--strategy", "review", cwd=tmp_path, env={"OPENAI_API_KEY": ""} | env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no OPENAI_API_KEY, so the embedded model" in proc.stdout
    assert "small demonstration model" in proc.stdout
    assert "strategy: review (Optuna's" in proc.stdout
    study = load_study(f"sqlite:///{tmp_path / 's.db'}", None)
    assert study.trials[0].user_attrs["proposer"] == "enqueued"  # the space's defaults
    asked = [t for t in study.trials[1:] if "llm" in t.user_attrs]
    assert asked and asked[0].number == 1  # its first turn is always asked
    for t in study.trials[1:]:
        if "llm" in t.user_attrs:  # the model read the sampler's candidate and answered
            assert t.user_attrs["llm"]["tokens_out"] > 0, t.user_attrs
            assert t.user_attrs.get("review") or t.user_attrs["proposer"] == "fallback"
        else:
            # Not asked: only after a turn with no valid answer put its record below even,
            # until the engine's GP can check what it proposes (proposers/review.py). The
            # small model's answers follow its prompt, which holds the trials' timings.
            assert any(e.user_attrs["proposer"] == "fallback" and "no valid answer" in
                       e.user_attrs["fallback_reason"] for e in study.trials[1:t.number]), \
                [e.user_attrs for e in study.trials]
    assert f"LLM: asked on {len(asked)} trials" in proc.stdout
    show = run_tune("show", "--storage", "sqlite:///s.db", cwd=tmp_path)
    assert show.returncode == 0 and " optuna " in show.stdout  # accepted: the sampler's


def test_a_named_model_and_strategy_are_asked_on_their_turns(tmp_path, model_path):
    """`--strategy llm --llm local`: after the space's default config (trial 0), the model the
    person named is asked on every trial, though each of its turns takes longer than a trial;
    the first lines say it is not capped, and how to cap it."""
    proc = run_tune("run", "--strategy", "llm", "--llm", "local", "--n-trials", "3",
                    "--data", "synthetic:4000", "--epochs", "1", "--trainer", "jax",
                    "--storage", "sqlite:///s.db", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "asked on all its turns, as named (--llm-time-share caps" in proc.stdout
    study = load_study(f"sqlite:///{tmp_path / 's.db'}", None)
    for t in study.trials[1:]:
        assert t.user_attrs["llm"]["tokens_out"] > 0, t.user_attrs  # asked, and it answered
        assert "llm_skipped" not in t.user_attrs
    assert check_llm_trials(f"sqlite:///{tmp_path / 's.db'}", 3)[0] == "enqueued"


def test_the_default_does_not_spend_turns_on_the_embedded_model(tmp_path, model_path):
    """No key and no flags: `--llm auto` finds only the embedded model, whose reviews measured
    no gain (bench/README.md), so `--strategy auto` is Optuna alone, and the run says why and
    how to ask the model anyway."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = run_tune("run", "--data", "synthetic:4000", "--epochs", "1", "--n-trials", "2",
                    "--trainer", "jax", "--storage", "sqlite:///s.db", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "strategy: optuna (auto sampler, seed 0): Optuna proposes every trial" in proc.stdout
    assert "only the embedded demonstration model (SmolLM2-135M)" in proc.stdout
    assert "--strategy review asks it anyway" in proc.stdout
    assert "LLM: asked" not in proc.stdout
    study = load_study(f"sqlite:///{tmp_path / 's.db'}", None)
    assert [t.user_attrs["proposer"] for t in study.trials] == ["enqueued", "optuna"]
    assert not any("llm" in t.user_attrs for t in study.trials)


def test_the_embedded_model_named_or_a_gguf_of_ones_own_is_asked_under_auto(model_path):
    """`--llm local` names the embedded model: `auto` is `review` with it, on the embedded
    model's terms (a short prompt, no notes), asked on all its turns, as named. A GGUF file of
    the user's under `--llm auto` (--llm-model-path; here the same file stands in for a bigger
    model) is not the demo model: the full prompt with notes, the usual answer length, and the
    time share that caps what `auto` chose."""
    from tunepilot.llm.models import LLMSettings
    from tunepilot.proposers.review import LLM_TIME_SHARE, Reviewer
    from tunepilot.proposers.strategies import agent

    named, llm, line = agent("local", task="t")
    assert isinstance(named, Reviewer) and llm.notes is False and llm.model.max_tokens == 160
    assert named.llm_time_share == 1.0 and "asked on all its turns, as named" in line
    own, llm, line = agent(LLMSettings("auto", model_path=model_path), task="t")
    assert isinstance(own, Reviewer) and own.llm_time_share == LLM_TIME_SHARE
    assert llm.notes is True and llm.first_turn_s == 0.0 and llm.model.max_tokens == 400
    assert "the GGUF model" in line and "SmolLM2-135M, a small" not in line


def test_the_embedded_models_first_turn_is_priced_before_it_is_measured(model_path):
    """With a share set, a first turn of the embedded model counts as 8 s (measured here): on
    trials of a few seconds the sampler takes its turns (test_review tests the rule itself)."""
    from tunepilot.proposers.review import EMBEDDED_FIRST_TURN_S, Reviewer
    from tunepilot.proposers.strategies import agent

    reviewer, llm, line = agent("local", task="t", llm_time_share=0.05)
    assert isinstance(reviewer, Reviewer) and reviewer.llm_time_share == 0.05
    assert llm.first_turn_s == EMBEDDED_FIRST_TURN_S == 8.0
    assert "past 5% of the wall time" in line


def test_tune_through_llama_cpp_openai_server(tmp_path, llama_server):
    # The real openai client and langchain against llama.cpp's server, which refuses
    # response_format json_schema: the suggester must move to another structured-output method.
    # Its turns take longer than these 1-epoch trials: the cap on the LLM's share of the wall
    # time is lifted, so that every trial asks the server.
    proc = run_tune("run", "--llm", "openai:smollm2", "--llm-base-url", llama_server,
                    "--strategy", "llm", "--data", "synthetic:4000", "--epochs", "1",
                    "--n-trials", "4", "--trainer", "jax", "--storage", "sqlite:///s.db",
                    "--llm-time-share", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_llm_trials(f"sqlite:///{tmp_path / 's.db'}", 4)
    study = load_study(f"sqlite:///{tmp_path / 's.db'}", None)
    # The model answered (tokens came back) even where its answer was refused; a 135M model
    # is not reliable enough to promise that any given answer is valid.
    assert sum(t.user_attrs["llm"]["tokens_out"] for t in study.trials[1:]) > 0
