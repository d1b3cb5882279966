"""Experiment trackers: each finished trial as one run in MLflow, Weights & Biases or TensorBoard.

A run carries the trial's config (params), its validation loss per epoch (a metric with the
epoch as step), its final state and best loss, who proposed it and the LLM's rationale (tags, or
text in TensorBoard). Each tracker is an `Observer` of the run loop, written with the tracker's
own client API; `--track` takes one or more of:

    mlflow            a local store, sqlite:///mlflow.db in the working directory (no server;
                      what MLflow 3 recommends now that its ./mlruns file store is frozen)
    mlflow:URI        any MLflow tracking URI (http://host:5000, sqlite:///path.db, ...)
    wandb             Weights & Biases; offline (files under ./wandb, sync later with `wandb
                      sync`) unless WANDB_API_KEY is set or WANDB_MODE says otherwise
    wandb:PROJECT     ... in that project (default: the study's name)
    tensorboard:DIR   event files under DIR/STUDY/trial-N (`tensorboard --logdir DIR`)

A tracker that fails to log never stops a search: the failure is said once as a notice.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunepilot.agent.observer import Observer
from tunepilot.errors import ConfigError
from tunepilot.memory import redact

if TYPE_CHECKING:
    from tunepilot.memory import History, TrialRecord

KINDS = ("mlflow", "wandb", "tensorboard")
_INSTALL = "pip install 'tunepilot[track]'"


def trackers(specs: Sequence[str], study: str) -> list[Observer]:
    """The trackers `specs` name (``--track``), checked now: a bad spec or a missing package is
    a `ConfigError` before the first trial, not a surprise after it."""
    return [_one(spec, study) for spec in specs]


def _one(spec: str, study: str) -> Observer:
    kind, _, arg = spec.partition(":")
    if kind not in KINDS:
        raise ConfigError(f"--track {spec!r}: expected mlflow[:URI], wandb[:PROJECT] or "
                          "tensorboard:DIR.")
    if kind == "mlflow":
        return MLflowTracker(arg or None, study)
    if kind == "wandb":
        return WandbTracker(arg or study)
    if not arg:
        raise ConfigError("--track tensorboard needs a directory: --track tensorboard:runs")
    return TensorBoardTracker(Path(arg), study)


def _need(module: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"--track {what} needs the {what} package: {_INSTALL}.") from None


class _Tracker(Observer):
    name = "tracker"

    def __init__(self) -> None:
        self._failed = False

    def trial_end(self, record: TrialRecord | None, history: History) -> None:
        if record is None or record.state not in ("complete", "pruned", "fail"):
            return
        try:
            self.log(record)
        except Exception as e:  # a tracker never stops a search
            if not self._failed:
                self._failed = True
                print(f"! {self.name}: could not log trial {record.number} "
                      f"({type(e).__name__}: {str(e)[:200]}); the search goes on",
                      file=sys.stderr)

    def log(self, record: TrialRecord) -> None:
        raise NotImplementedError


def _tags(record: TrialRecord) -> dict[str, str]:
    tags = {"proposer": record.proposer or "?", "state": record.state,
            "trial": str(record.number)}
    if record.rationale:
        tags["rationale"] = record.rationale
    if record.why and record.why != record.rationale:
        tags["why"] = record.why
    return tags


class MLflowTracker(_Tracker):
    """One MLflow run per trial, in the experiment named after the study."""

    name = "mlflow"

    def __init__(self, uri: str | None, study: str):
        super().__init__()
        _need("mlflow", "mlflow")
        from mlflow import MlflowClient

        self.uri = uri or f"sqlite:///{Path('mlflow.db').resolve()}"
        try:
            self.client = MlflowClient(tracking_uri=self.uri)
            found = self.client.get_experiment_by_name(study)
            self.experiment = (found.experiment_id if found is not None
                               else self.client.create_experiment(study))
        except Exception as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            raise ConfigError(f"--track mlflow: cannot open the tracking store "
                              f"{redact(self.uri)}: {first}") from None

    def log(self, record: TrialRecord) -> None:
        from mlflow.entities import Metric, Param, RunTag

        run = self.client.create_run(self.experiment, run_name=f"trial {record.number}",
                                     tags=_tags(record))
        now = int(time.time() * 1000)
        metrics = [Metric("val_loss", float(v), now, epoch)
                   for epoch, v in enumerate(record.curve, 1)]
        if record.value is not None:
            metrics.append(Metric("best_val_loss", float(record.value), now, 0))
        self.client.log_batch(run.info.run_id, metrics=metrics,
                              params=[Param(k, str(v)) for k, v in record.params.items()],
                              tags=[RunTag("mlflow.note.content", record.why or "")])
        status = {"complete": "FINISHED", "pruned": "KILLED"}.get(record.state, "FAILED")
        self.client.set_terminated(run.info.run_id, status=status)


class WandbTracker(_Tracker):
    """One W&B run per trial, grouped by study. Offline unless an API key or WANDB_MODE says
    otherwise: no account is needed to try it."""

    name = "wandb"

    def __init__(self, project: str):
        super().__init__()
        self.wandb = _need("wandb", "wandb")
        self.project = project
        self.mode = os.environ.get("WANDB_MODE") or (
            "online" if os.environ.get("WANDB_API_KEY") else "offline")

    def log(self, record: TrialRecord) -> None:
        run = self.wandb.init(project=self.project, group=self.project, mode=self.mode,
                              name=f"trial {record.number}", job_type="trial",
                              config={**record.params, **_tags(record)}, reinit="create_new",
                              settings=self.wandb.Settings(silent=True, console="off"))
        try:
            for epoch, v in enumerate(record.curve, 1):
                run.log({"val_loss": float(v), "epoch": epoch}, step=epoch)
            if record.value is not None:
                run.summary["best_val_loss"] = float(record.value)
            run.summary["state"] = record.state
        finally:
            run.finish(exit_code=0 if record.state != "fail" else 1)


class TensorBoardTracker(_Tracker):
    """Event files per trial under DIR/STUDY/trial-N: the curve as a scalar, the config as
    hyperparameters, who proposed it and why as text."""

    name = "tensorboard"

    def __init__(self, root: Path, study: str):
        super().__init__()
        _need("tensorboard", "tensorboard")
        self.root = root / study

    def log(self, record: TrialRecord) -> None:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=str(self.root / f"trial-{record.number}"))
        try:
            for epoch, v in enumerate(record.curve, 1):
                writer.add_scalar("val_loss", float(v), epoch)
            for key, text in _tags(record).items():
                writer.add_text(key, text)
            params = {k: v if isinstance(v, (int, float, str, bool)) else str(v)
                      for k, v in record.params.items()}
            final = record.value if record.value is not None else (
                record.curve[-1] if record.curve else float("nan"))
            writer.add_hparams(params, {"hparam/best_val_loss": float(final)}, run_name=".")
        finally:
            writer.close()
