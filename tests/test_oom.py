"""Out of memory is knowledge: a device OOM of any framework fails its trial as kind `oom`,
names the device, frees what the frameworks cache, shows in the agent's prompt, and never stops
the search however many come in a row. (The frameworks' own exception classes, raised on the
CPU: no GPU here.)"""

from __future__ import annotations

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from tunepilot import Float, SearchSpace, Tuner, trainers
from tunepilot.memory import History
from tunepilot.proposers.llm_suggester import LLMSuggester
from tunepilot.ui.display import trial_line

SPACE = SearchSpace.of(x=Float(-10.0, 10.0))


def _torch_oom():
    import torch

    return torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def _xla_oom():
    import jax

    return jax.errors.JaxRuntimeError(
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.")


@pytest.mark.parametrize("make_error", [_torch_oom, _xla_oom], ids=["torch", "jax"])
def test_an_oom_fails_the_trial_names_the_device_and_the_search_goes_on(storage, make_error):
    def greedy(config, report):
        if config["x"] in (-1.0, -2.0, -3.0):  # "batch too big for this card" (the queued ones)
            raise make_error()
        return (config["x"] - 2.0) ** 2

    tuner = Tuner(trainers.callable(greedy), SPACE, storage=storage, study="oom",
                  pruner="none", display=None)
    for x in (-1.0, -2.0, -3.0):  # three OOMs in a row
        tuner.enqueue({"x": x})
    result = tuner.run(n_trials=5)
    assert result.n_finished == 5 and not result.failed_alike
    ooms = result.history.failures()
    assert [t.number for t in ooms] == [0, 1, 2]
    for t in ooms:
        assert t.error["kind"] == "oom"
        assert t.error["message"].startswith("[on ") and t.error["device"]
        # The device first: a line cut for the terminal loses the message's tail, not "]".
        assert "]" in trial_line(t, result.history)
    prompt = LLMSuggester(FakeListChatModel(responses=["{}"]), model_name="m", task="t",
                          n_trials=5).prompt(SPACE, History.from_study(tuner.study))
    assert "FAILED (oom:" in prompt and "[on " in prompt


def test_peak_memory_is_the_trial_s_own():
    """A big trial then a small one in the same process report different peaks (the process's
    lifetime peak would report the big one twice)."""
    from tunepilot.trainers.base import PeakMemory

    def trial(mb):
        peak = PeakMemory()
        block = b"\x01" * (mb * 2**20)  # touched pages: resident
        used = peak.mb()
        del block
        return used

    big, small = trial(400), trial(40)
    assert big - small > 250, (big, small)


@pytest.mark.slow
def test_the_built_in_trainers_report_their_peak():
    from tunepilot.trainers.base import no_report

    data = trainers.load_data("synthetic:2000")
    for kind in ("lightning", "jax"):
        result = trainers.from_spec(kind, data)({"lr": 1e-3, "batch_size": 512, "epochs": 1},
                                                no_report)
        assert result.peak_memory_mb and result.peak_memory_mb > 10, kind


def test_an_empty_memory_error_reads_as_its_name():
    from tunepilot.errors import describe

    assert describe(MemoryError())["message"] == "MemoryError"
    assert describe(MemoryError("no room"))["message"] == "MemoryError: no room"


@pytest.mark.slow
def test_the_default_stops_drawing_next_to_configs_that_ran_out_of_memory():
    """bench/oom.py's stand-in (memory = batch size x width x bytes per value; torch's OOM past
    the limit; the optimum just inside it), three seeds, 20 trials: the default's GP, which models
    an OOM trial at the study's worst loss, draws few configs past the limit once its start-up
    is over; Optuna's TPE, which leaves failed trials out, draws most of its there."""
    import importlib.util

    import optuna

    from tests.conftest import ROOT

    spec = importlib.util.spec_from_file_location("bench_oom", ROOT / "bench" / "oom.py")
    assert spec is not None and spec.loader is not None
    oom = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(oom)
    before = optuna.logging.get_verbosity()
    try:  # OOM trials among trials 10-19, seeds 0-2 (without the worst-loss imputation: 12)
        late = {who: sum(oom.one((who, seed, 20))["late"] for seed in range(3))
                for who in ("tp:auto", "optuna-tpe")}
    finally:
        optuna.logging.set_verbosity(before)
    assert late["tp:auto"] <= 6 and late["optuna-tpe"] >= 15, late
