"""The notebook API: ask/tell, hints, enqueue, read-only loading, plots, the live display, and
the example notebook run top to bottom in a real Jupyter kernel."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, TUNE, toy_workdir
from tests.llm_server import ScriptedLLMServer
from tests.test_llm import SPACE, answer, openai_model
from tunepilot import ConfigError, Float, SearchSpace, TuneError, Tuner, trainers
from tunepilot.memory import insights

XSPACE = SearchSpace.of(x=Float(-10.0, 10.0), epochs=3)


def test_ask_tell_with_a_hand_written_loop(storage):
    tuner = Tuner(space=XSPACE, storage=storage, study="asktell", display=None)
    pruned = 0
    for i in range(8):
        config = tuner.suggest()
        assert config["epochs"] == 3 and -10 <= config["x"] <= 10  # fixed settings included
        assert config.number == i and config.proposer == "optuna"
        # Later trials are worse at every epoch: the median pruner stops some of them.
        losses = [(config["x"] - 2) ** 2 + 10.0 * i + 1.0 / e for e in (1, 2, 3)]
        for epoch, loss in enumerate(losses, 1):
            if tuner.report(config, val_loss=loss, epoch=epoch):
                pruned += 1
                break
        else:
            assert tuner.report(config, val_loss=min(losses)) is True
    frame = tuner.history()
    assert list(frame.index) == list(range(8))
    assert pruned >= 1 and (frame["state"] == "pruned").sum() == pruned
    complete = frame[frame["state"] == "complete"]
    assert (complete["epochs"] == 3).all()
    assert frame.loc[0, "value"] == pytest.approx((frame.loc[0, "params_x"] - 2) ** 2 + 1 / 3)


def test_report_refuses_unknown_configs_and_records_failures(storage):
    tuner = Tuner(space=XSPACE, storage=storage, study="asktell", display=None)
    config = tuner.suggest()
    with pytest.raises(ConfigError, match="not an open trial"):
        tuner.report({"x": 123.0}, val_loss=1.0)
    assert tuner.report(dict(config), val_loss=float("nan")) is True  # matched by its params
    other = tuner.suggest()
    tuner.report(other, error=RuntimeError("CUDA out of memory"))
    frame = tuner.history()
    assert list(frame["state"]) == ["fail", "fail"]
    assert "nan" in frame.loc[0, "error"] and "out of memory" in frame.loc[1, "error"]
    with pytest.raises(ConfigError, match="not an open trial"):
        tuner.report(config, val_loss=1.0)  # already reported


def test_suggestion_carries_the_llm_rationale(storage):
    with ScriptedLLMServer(lambda r: answer(1.5, rationale="start near the middle")) as server:
        tuner = Tuner(space=SPACE, llm=openai_model(server.base_url), strategy="llm",
                      storage=storage, study="why", display=None)
        config = tuner.suggest()
    assert dict(config) == {"x": 1.5, "opt": "adam"}
    assert config.proposer == "llm" and config.rationale == "start near the middle"
    tuner.report(config, val_loss=0.25)
    assert tuner.history().loc[0, "rationale"] == "start near the middle"


def test_a_hint_reaches_the_next_prompt(storage):
    # The trials take no time, so the default cap on the LLM's share of wall time could give the
    # second turn to the sampler on a slow machine (it did on CI): lifted, to test the hint.
    with ScriptedLLMServer(lambda r: answer(1.0 + len(server.requests))) as server:
        tuner = Tuner(trainers.callable(lambda c, r: (c["x"] - 2) ** 2), SPACE,
                      llm=openai_model(server.base_url), strategy="llm", storage=storage,
                      study="hinted", display=None, llm_time_share=1.0)
        tuner.run(n_trials=1)
        tuner.hint("smaller learning rates diverge less; try bf16")
        tuner.run(n_trials=2)
        prompts = [r["messages"][-1]["content"] for r in server.requests]
    assert len(prompts) == 2
    assert "try bf16" not in prompts[0]
    assert "Hints from the person" in prompts[1] and "try bf16" in prompts[1]
    assert "Trial #1 (2 of a budget of 2)" in prompts[1]  # run() told the agent its budget


def test_enqueue_runs_the_persons_config_next(storage):
    tuner = Tuner(trainers.callable(lambda c, r: (c["x"] - 2) ** 2), XSPACE, storage=storage,
                  study="queued", display=None)
    tuner.run(n_trials=2)
    tuner.enqueue({"x": 2.5})
    with pytest.raises(ConfigError, match="unknown parameters"):
        tuner.enqueue({"y": 1})
    with pytest.raises(ConfigError, match="x"):
        tuner.enqueue({"x": 99.0})
    tuner.run(n_trials=3)
    frame = tuner.history()
    assert frame.loc[2, "params_x"] == 2.5 and frame.loc[2, "proposer"] == "human"


def test_plots_render_to_png(storage, tmp_path):
    tuner = Tuner(trainers.callable(_two_params), SearchSpace.of(
        x=Float(-10.0, 10.0), lr=Float(1e-4, 1.0, log=True)), storage=storage, study="plots",
        display=None, pruner="none")
    tuner.run(n_trials=10)
    for kind in ("history", "importance", "curves", "parallel"):
        fig = tuner.plot(kind)
        path = tmp_path / f"{kind}.png"
        fig.savefig(path)
        assert path.stat().st_size > 5_000, kind
        assert _title(fig), kind
    # Importance and parallel coordinates are Optuna's own matplotlib plots.
    assert _title(tuner.plot("parallel")) == "Parallel Coordinate Plot"
    assert _title(tuner.plot("importance")) == "Hyperparameter Importances"
    # Its bars are the PED-ANOVA figures the prompts, `tune show` and the report give.
    bars = sorted(p.get_width() for p in tuner.plot("importance").axes[0].patches)
    said = insights.of_study(tuner.study).importance
    assert len(said) == 2 and bars == pytest.approx(sorted(said.values()), abs=0.01)
    with pytest.raises(ConfigError, match="Did you mean 'history'"):
        tuner.plot("histroy")


def _title(fig):
    ax = fig.axes[0]
    return ax.get_title() or ax.get_title(loc="left")


def _two_params(config, report):
    for epoch in (1, 2):
        report(epoch, (config["x"] - 2) ** 2 + abs(config["lr"] - 0.01) + 1 / epoch)
    return (config["x"] - 2) ** 2 + abs(config["lr"] - 0.01)


def test_no_trial_is_drawn_white_in_the_parallel_coordinates():
    """Optuna colours the lines by value from white: the worst trial's was invisible."""
    import optuna
    from matplotlib.collections import LineCollection

    from tunepilot.ui import plots

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: t.suggest_float("x", 0, 1) + t.suggest_float("y", 0, 1),
                   n_trials=8)
    fig = plots.parallel_figure(study)
    [lines] = [c for ax in fig.axes for c in ax.collections
               if isinstance(c, LineCollection) and c.get_array() is not None]
    rgba = lines.get_cmap()(lines.norm(lines.get_array()))
    assert len(rgba) == 8 and (rgba[:, :3].mean(axis=1) < 0.8).all()


def test_load_reads_a_study_another_process_is_writing(tmp_path):
    workdir = toy_workdir(tmp_path, "import time\n\ndef slow(config, report):\n"
                                    "    time.sleep(0.4)\n    return (config['x'] - 2) ** 2\n")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{workdir}"}
    proc = subprocess.Popen([*TUNE, "run", "--llm", "none", "--config", "toy.toml", "--trainer",
                             "toy:slow", "--storage", "sqlite:///s.db", "--n-trials", "12"],
                            cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    url = f"sqlite:///{workdir / 's.db'}"
    try:
        deadline = time.monotonic() + 60
        while not (workdir / "s.db").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        seen = []
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                tuner = Tuner.load(url, "toy-slow")
            except ConfigError:  # the study is being created
                time.sleep(0.1)
                continue
            seen.append(len(tuner.history()))
            time.sleep(0.5)
        rc = proc.wait(timeout=60)
        assert rc == 0, proc.stdout.read()
    finally:
        proc.kill()
    assert len(seen) >= 3 and seen[-1] > seen[0], seen  # it grew while we read
    tuner = Tuner.load(url, "toy-slow")
    assert len(tuner.history()) == 12 and tuner.space.params["x"].high == 10.0
    assert tuner.plot("history").axes
    for call in (tuner.suggest, lambda: tuner.hint("x"), lambda: tuner.enqueue({"x": 1.0})):
        with pytest.raises(TuneError, match="read-only"):
            call()


def test_notebook_display_shows_progress_curve_and_proposers(storage, monkeypatch):
    """...and, as `tune run` does, the strategy and the sampler chosen, with why: here why the
    LLM is not asked (llm="auto" with no key finds only the embedded model)."""
    from tunepilot.ui.notebook import NotebookDisplay, _sparkline

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    shown = []

    class Capture(NotebookDisplay):
        def _update(self, force=False):
            shown.append(self._html())

    tuner = Tuner(trainers.callable(_two_params), SearchSpace.of(
        x=Float(-10.0, 10.0), lr=Float(1e-4, 1.0, log=True)), storage=storage, study="live",
        display=Capture(), llm="auto")
    tuner.run(n_trials=3)
    assert "strategy: optuna" in shown[-1] and "no OPENAI_API_KEY" in shown[-1]
    assert "sampler: auto: " in shown[-1] and "Latin hypercube" in shown[-1]
    mid = [h for h in shown if "running trial 2" in h and "epoch 2" in h]
    assert mid and "<polyline" in mid[-1]  # the running trial's curve
    assert "3/3 trials finished" in shown[-1] and "stopped: budget of 3 trials used" in shown[-1]
    assert shown[-1].count("<tr>") == 4 and "optuna" in shown[-1]
    assert _sparkline([1.0]) == ""


def test_display_is_plain_text_outside_jupyter():
    from tunepilot.ui.display import PlainDisplay
    from tunepilot.ui.notebook import auto_display, in_notebook

    assert not in_notebook()
    assert isinstance(auto_display(), PlainDisplay)  # a pipe, not a terminal: plain lines


@pytest.mark.slow
def test_example_notebook_runs_top_to_bottom(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(ROOT / "examples" / "quickstart.ipynb", as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on the first cell that fails
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 4  # the four plots
    text = "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                     for o in outputs)
    assert "stop reason" in text and "Proposal(trial" in text
    # No warning of a library the person did not call (tqdm's "IProgress not found", from the
    # progress bar Optuna imports and tunepilot never shows).
    warned = [o.get("text", "") for o in outputs if o.get("name") == "stderr"]
    assert not any("Warning" in w for w in warned), warned
    nbformat.write(notebook, tmp_path / "executed.ipynb")
    out = Path(os.environ.get("TUNEPILOT_NOTEBOOK_OUT", tmp_path)) / "quickstart.executed.ipynb"
    nbformat.write(notebook, out)
