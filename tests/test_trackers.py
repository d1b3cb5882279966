"""`--track`: each trial as a run in MLflow (a local SQLite store), W&B (offline) and TensorBoard,
read back with each tracker's own reader: the config, the per-epoch curve, who proposed the
trial and why."""

from __future__ import annotations

import json
import shlex
import struct
from pathlib import Path

import pytest

from tests.conftest import ROOT, TOY_EPOCHS, TOY_SPACE, run_tune, toy_workdir
from tests.llm_server import ScriptedLLMServer

TOY = TOY_EPOCHS
RATIONALE = "Try x near two, where the curve fell fastest so far."


def _answer(request: dict) -> str:
    _answer.n = getattr(_answer, "n", 0) + 1  # type: ignore[attr-defined]
    return json.dumps({"config": {"x": 1.0 + 0.5 * _answer.n}, "rationale": RATIONALE})


@pytest.fixture(scope="module")
def tracked(tmp_path_factory) -> Path:
    """One `tune run` with every tracker, its trials proposed by a scripted LLM."""
    workdir = toy_workdir(tmp_path_factory.mktemp("track"), TOY)
    with ScriptedLLMServer(_answer) as server:
        done = run_tune("run", "--config", "toy.toml", "--trainer", "toy:epochs", "--epochs", "3",
                        "--storage", "sqlite:///s.db", "--study", "tracked", "--pruner", "none",
                        "--llm", "openai:scripted", "--llm-base-url", server.base_url,
                        "--strategy", "llm", "--llm-time-share", "1", "--n-trials", "2",
                        "--track", "mlflow", "--track", "wandb", "--track", "tensorboard:tb",
                        cwd=workdir, env={"OPENAI_API_KEY": "sk-track-secret",
                                          "WANDB_MODE": "offline", "WANDB_SILENT": "true"},
                        timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    return workdir


def test_mlflow_local_store_holds_one_run_per_trial(tracked):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tracked / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tracked")
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    assert len(runs) == 2
    first = runs[0]
    assert first.data.params == {"x": "1.5"}
    assert first.data.tags["proposer"] == "llm" and first.data.tags["rationale"] == RATIONALE
    curve = client.get_metric_history(first.info.run_id, "val_loss")
    assert [(m.step, round(m.value, 4)) for m in curve] == [(1, 1.25), (2, 0.75), (3, 0.5833)]
    assert first.info.status == "FINISHED"


def _wandb_records(path: Path):
    """The records of a W&B offline run file: a 7-byte header (":W&B", magic, version), then
    the LevelDB log format (32 KiB blocks of chunks: crc32c, length, type, data) that wandb
    writes; each record is a `wandb_internal_pb2.Record`."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # block trailer too short for a header
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        pending += chunk
        if kind in (1, 4):  # FULL, LAST
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def test_wandb_offline_run_per_trial(tracked):
    files = sorted((tracked / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2
    history, config = [], {}
    for record in _wandb_records(files[0]):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
        elif kind == "run":  # the run's start: its config
            config.update({item.key: json.loads(item.value_json)
                           for item in record.run.config.update})
    assert config["x"] == 1.5 and config["rationale"] == RATIONALE
    assert config["proposer"] == "llm"
    losses = [round(row["val_loss"], 4) for row in history if "val_loss" in row]
    assert losses == [1.25, 0.75, 0.5833]


def test_tensorboard_event_files_per_trial(tracked):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs = sorted((tracked / "tb" / "tracked").glob("trial-*"))
    assert [r.name for r in runs] == ["trial-0", "trial-1"]
    events = EventAccumulator(str(runs[0]), size_guidance={"tensors": 0}).Reload()
    curve = [(e.step, round(e.value, 4)) for e in events.Scalars("val_loss")]
    assert curve == [(1, 1.25), (2, 0.75), (3, 0.5833)]
    text = events.Tensors("rationale/text_summary")[0].tensor_proto.string_val[0].decode()
    assert text == RATIONALE


def test_no_secret_reaches_a_tracker(tracked):
    for path in [tracked / "mlflow.db", *tracked.joinpath("wandb").rglob("*"),
                 *tracked.joinpath("tb").rglob("*")]:
        if path.is_file():
            assert b"sk-track-secret" not in path.read_bytes(), path


def test_a_bad_track_spec_is_refused_before_any_trial(tmp_path):
    workdir = toy_workdir(tmp_path, TOY)
    proc = run_tune("run", "--config", "toy.toml", "--trainer", "toy:epochs", "--llm", "none",
                    "--storage", "sqlite:///s.db", "--track", "comet", cwd=workdir)
    assert proc.returncode == 2
    assert "--track 'comet': expected mlflow[:URI], wandb[:PROJECT] or tensorboard:DIR" in \
        proc.stderr
    assert not (workdir / "s.db").exists() or "trial" not in proc.stdout


README_LINES = [
    "tune run --config tune.toml --track mlflow",
    "tune run --config tune.toml --track mlflow:sqlite:///runs.db",
    "tune run --config tune.toml --track wandb",
    "tune run --config tune.toml --track tensorboard:runs",
]


def test_the_readme_track_commands_verbatim(tmp_path, monkeypatch):
    """Each README line in a folder of its own (a fresh study), as a person would try them."""
    from mlflow import MlflowClient

    readme = (ROOT / "docs" / "tracking.md").read_text()
    for name in ("WANDB_API_KEY", "WANDB_MODE"):  # no account: W&B's offline mode
        monkeypatch.delenv(name, raising=False)
    env = {"WANDB_SILENT": "true"}
    folders = []
    for i, line in enumerate(README_LINES):
        assert line in readme, line
        folder = tmp_path / str(i)
        folder.mkdir()
        (folder / "toy.py").write_text(TOY)
        (folder / "tune.toml").write_text('trainer = "toy:epochs"\nllm = "none"\nn_trials = 2\n'
                                          'epochs = 2\npruner = "none"\n' + TOY_SPACE)
        done = run_tune(*shlex.split(line)[1:], cwd=folder, env=env, timeout=300)
        assert done.returncode == 0, line + "\n" + done.stdout + done.stderr
        folders.append(folder)
    for folder, db in ((folders[0], "mlflow.db"), (folders[1], "runs.db")):
        client = MlflowClient(tracking_uri=f"sqlite:///{folder / db}")
        experiment = client.get_experiment_by_name("toy-epochs")
        assert len(client.search_runs([experiment.experiment_id])) == 2, db
    assert len(list((folders[2] / "wandb").glob("offline-run-*/run-*.wandb"))) == 2
    assert len(list((folders[3] / "runs" / "toy-epochs").glob("trial-*"))) == 2
