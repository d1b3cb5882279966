"""One `Tuner.run`: the objective Optuna calls, the stopping rules, and the gate that admits
each new trial across workers."""

from __future__ import annotations

import os
import threading
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
from optuna.storages._heartbeat import is_heartbeat_enabled
from optuna.trial import TrialState

from tunepilot.agent import opening
from tunepilot.errors import ConfigError, Terminated, describe
from tunepilot.memory import History, records
from tunepilot.memory.connections import engine_of, idle
from tunepilot.memory.environment import device, versions
from tunepilot.memory.recovery import requeue
from tunepilot.memory.stops import Stop, StopKind
from tunepilot.memory.text import clip
from tunepilot.runtime import interrupts, startup
from tunepilot.trainers.base import (
    StoppedEarly,
    TargetReached,
    Trainer,
    TrainResult,
    auto_epoch_patience,
    check_finite,
    release_device_memory,
)

if TYPE_CHECKING:
    from tunepilot.agent.observer import Observer
    from tunepilot.memory.lock import StudyLock
    from tunepilot.space import SearchSpace


@dataclass(frozen=True)
class Rules:
    """A run's goal and budgets: what stops it."""

    n_trials: int
    target: float | None = None
    timeout: float | None = None
    patience: int | None = None
    min_delta: float = 0.0
    llm_budget_usd: float | None = None
    llm_token_budget: int | None = None

    def reached(self, value: float | None) -> bool:
        """Whether a loss meets the target: the one place the target is compared."""
        return self.target is not None and value is not None and value <= self.target

    def target_stop(self, history: History, *, already: bool = False) -> Stop | None:
        """The target, if a trial of the study has reached it."""
        best = history.best_trial
        if best is None or best.value is None or not self.reached(best.value):
            return None
        assert self.target is not None
        return Stop.target(self.target, trial=best.number, value=best.value, already=already)

    def study_stop(self, history: History) -> Stop | None:
        """The rules of the whole study, checked before each new trial: a target some trial
        reached, the trial budget, the time budget (the study's, like the trial budget: a
        resumed run, or a worker that joins late, gets what the study has left; parallel trials
        count once)."""
        if (stop := self.target_stop(history)) is not None:
            return stop
        if history.budget_used() >= self.n_trials:
            return Stop.budget(self.n_trials)
        if self.timeout is not None and history.wall_time_s() >= self.timeout:
            return Stop.timeout(self.timeout)
        return None

    def after_trial_stop(self, history: History) -> Stop | None:
        """The rules that look at the trials so far, after each one ends."""
        if self.patience and (stale := _trials_since_improvement(history, self.min_delta)) \
                >= self.patience:
            return Stop.plateau(stale, self.min_delta)
        if self.llm_budget_usd is not None and (spent := history.llm_spend()) \
                >= self.llm_budget_usd:
            return Stop.llm_budget(spent, self.llm_budget_usd)
        if self.llm_token_budget is not None and (tokens := history.llm_tokens()) \
                >= self.llm_token_budget:
            return Stop.llm_tokens(tokens, self.llm_token_budget)
        if (alike := failing_alike(history)) is not None:
            return Stop.repeated_failure(*alike)
        return None


class Gate:
    """The study lock, held from the gate's "yes" until Optuna has created (numbered) the trial
    it admitted: so with any number of workers the study never holds more than its budget."""

    def __init__(self, lock: StudyLock):
        self.lock = lock
        self.held = False

    def hold(self) -> None:
        self.held = True

    def open(self) -> None:
        """Releases the lock if the gate holds it (the trial exists now, or the run ends)."""
        if self.held:
            self.held = False
            self.lock.release()


class Loop:
    """Per-run state of `Tuner.run`: the objective and the stopping rules."""

    def __init__(self, rules: Rules, *, trainer: Trainer, space: SearchSpace,
                 display: Observer, gate: Gate, early_beat: EarlyHeartbeat,
                 epoch_patience: int | None):
        self.rules = rules
        self.trainer = trainer
        self.space = space
        self.display = display
        self.gate = gate
        self.early_beat = early_beat
        self.epoch_patience = epoch_patience
        self.stop: Stop | None = None
        self.decided: Stop | None = None  # the stop this worker recorded for every worker
        self.fatal: Exception | None = None  # raised by run() once Optuna has closed the trial
        self.n_new = 0

    def objective(self, trial: optuna.Trial) -> float:
        # No storage writes on Ctrl-C here: the interrupt may have cut a write short. Tuner.run
        # records it once the stack has unwound (record_interrupt).
        storage = trial.study._storage
        self.early_beat.stop()  # Optuna's own heartbeat runs from here
        try:
            config = self.space.sample(trial)
        except Exception as e:
            # The sampler or suggester failed: a bug (model-caused failures fall back inside
            # AgentSampler), so stop rather than fail every trial quietly.
            self.fatal = e
            trial.study.stop()
            records.error(storage, trial._trial_id, describe(e))
            raise
        records.fixed(storage, trial._trial_id, self.space.fixed)
        self.display.trial_start(trial.number, {k: config[k] for k in self.space.params},
                                 History.proposer_of(storage, trial._trial_id))

        curve: list[float] = []
        epochs = config.get("epochs")
        epochs = epochs if isinstance(epochs, int) else None
        patience = (self.epoch_patience if self.epoch_patience is not None
                    else auto_epoch_patience(epochs))

        def report(epoch: int, val_loss: float) -> None:
            interrupts.check()
            check_finite(epoch, val_loss)
            trial.report(val_loss, epoch)
            curve.append(float(val_loss))
            self.display.epoch(trial.number, epoch, val_loss)
            # At its last epoch a trial ends anyway, its value paid for: neither pruned nor
            # "stopped early" (the demo said "stopped at epoch 3, best epoch 1" of 3-epoch trials).
            last = epochs is not None and len(curve) >= epochs
            if self.rules.reached(val_loss):
                if last:
                    return
                # Its value is at the target already: the search is over, its epochs are not.
                assert self.rules.target is not None
                raise TargetReached(len(curve), val_loss, self.rules.target)
            if not last and trial.should_prune():
                raise optuna.TrialPruned(f"pruned after epoch {epoch} (val loss {val_loss:.4g})")
            best = curve.index(min(curve)) + 1
            if patience and len(curve) - best >= patience and not last:
                raise StoppedEarly(len(curve), best, patience)

        start = time.perf_counter()
        stopped: StoppedEarly | None = None
        startup.end()  # a `tune` command's start is over: its objects frozen, collected no more
        try:
            with idle(engine_of(storage)):  # no connection kept while it trains
                result = self.trainer(config, report)
        except optuna.TrialPruned:
            raise
        except StoppedEarly as e:
            # The trainer let it through: the trial is its epochs so far, the best one kept.
            stopped = e
            result = TrainResult(min(curve), tuple(curve), time.perf_counter() - start)
        except ConfigError as e:
            # Bad input fails every trial alike: stop the search and tell the person.
            self.fatal = e
            trial.study.stop()
            records.error(storage, trial._trial_id, describe(e))
            raise
        except Exception as e:
            described = describe(e)
            if described["kind"] == "oom":
                # What did not fit where: the agent reads it in its next prompt.
                described["device"] = device()
                described["message"] = (f"[on {described['device']}] "
                                        f"{clip(described['message'], 400)}")
                release_device_memory()
            records.error(storage, trial._trial_id, described)
            raise
        if not isinstance(result, TrainResult):
            raise TypeError(f"a trainer must return TrainResult, got {type(result).__name__}")
        check_finite(len(result.curve), result.best_val_loss)
        if self.rules.reached(result.best_val_loss):
            # Before Optuna records the value: from here on no worker's gate admits a trial.
            assert self.rules.target is not None
            hit = Stop.target(self.rules.target, trial=trial.number, value=result.best_val_loss)
            with self.gate.lock:
                if records.first_target(trial.study, hit):
                    self.decided = hit
        records.train(storage, trial._trial_id, {
            "wall_time_s": round(result.wall_time_s, 3),
            "samples_per_s": result.samples_per_s and round(result.samples_per_s, 1),
            "peak_memory_mb": result.peak_memory_mb and round(result.peak_memory_mb, 1),
            # The trainer knows its device best (an isolated trial ran in another process).
            "device": result.extra.get("device") or device(),
            # Which framework trained it, where the trainer chose one (`--trainer both`).
            **({"framework": result.extra["framework"]} if "framework" in result.extra else {}),
            # The GPUs this worker was pinned to (`tune run --n-workers` on a GPU machine).
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "versions": versions(),
            **({"stopped_early": {"epoch": stopped.epoch, "best_epoch": stopped.best_epoch,
                                  **({"target": True} if isinstance(stopped, TargetReached)
                                     else {})}}
               if stopped is not None else {}),
        })
        return result.best_val_loss

    def after_trial(self, study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> None:
        self.n_new += 1
        self.admit(study, finished=frozen)

    def admit(self, study: optuna.Study, in_optimize: bool = True,
              finished: optuna.trial.FrozenTrial | None = None) -> bool:
        """May this worker start another trial? Asked under the study lock, which is kept until
        Optuna has created the trial: so with any number of workers, the study never holds more
        than `n_trials` trials, and none starts after another worker reached the target.
        `finished`: the trial this worker just ended, shown and judged by the stopping rules
        from the same read of the history (one read per trial, not two)."""
        lock = self.gate.lock
        while True:
            lock.acquire()
            try:
                history = History.from_study(study)
                opening.release(study, history, self.display.say)
                if finished is not None:
                    self.display.trial_end(history[finished.number]
                                           if finished.number < len(history) else None, history)
                    self.stop = self._recorded(history) or self.rules.after_trial_stop(history)
                    finished = None
                self.stop = self.stop or self._recorded(history) or self.rules.study_stop(
                    history)
                if self.stop is not None and self.stop.is_target and history.stop is None:
                    records.stop(study, self.stop)  # tells the other workers
            except BaseException:
                lock.release()
                raise
            others = [t for t in history.running() if not t.ask_tell]
            if not (self.stop is not None and self.stop.kind is StopKind.BUDGET and others
                    and is_heartbeat_enabled(study._storage)):
                break
            # The budget is taken, but by trials still running elsewhere: if one of their
            # workers died, its trial turns stale and is queued again, and this worker should
            # run it. Wait for them. (Trials of a person's own loop have no heartbeat: not them.)
            budget, self.stop = self.stop, None
            lock.release()
            self.display.waiting([t.number for t in others])
            if wait_for(study, {t.number for t in others},
                        getattr(study._storage, "get_heartbeat_interval", lambda: None)() or 10):
                # All ended and none queued again: nothing left to run, no lock needed (every
                # waiting worker taking it in turn to learn that cost seconds at the end).
                history = History.from_study(study)
                self.stop = self._recorded(history) or self.rules.study_stop(history) or budget
                if in_optimize:
                    study.stop()
                return False
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)
        if self.stop is not None:
            lock.release()
            if in_optimize:  # Optuna refuses stop() outside optimize()
                study.stop()
            return False
        self.gate.hold()
        return True

    def _recorded(self, history: History) -> Stop | None:
        """The stop a worker recorded for the whole study: this one's own, or another's."""
        if history.stop is None:
            return None
        return self.decided if history.stop == self.decided else history.stop.from_elsewhere()


WAIT_POLL_S = 0.5  # how often a worker with no trial left looks whether the others' ended


def wait_for(study: optuna.Study, numbers: set[int], longest: float) -> bool:
    """Sleeps while the trials `numbers` run, for at most `longest` seconds (a heartbeat's
    interval: time to look for trials whose workers died); True when all of them ended and no
    trial is queued (nothing left for this worker), False when a trial is queued again or the
    time is up. One read of the running and queued trials every `WAIT_POLL_S`, so a worker
    exits within that of the last trial's end (bench/README.md#several-workers)."""
    end = time.monotonic() + longest
    with idle(engine_of(study._storage)):  # dozens of waiting workers keep no connection
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(WAIT_POLL_S, left))
            trials = study._storage.get_all_trials(
                study._study_id, deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING))
            if any(t.state == TrialState.WAITING for t in trials):
                return False
            if not numbers & {t.number for t in trials}:
                return True
    return False


class EarlyHeartbeat:
    """Heartbeats for a trial from its creation until Optuna's own heartbeat takes over."""

    def __init__(self, storage: Any):
        self.storage = storage
        self._stop: threading.Event | None = None

    def start(self, trial_id: int) -> None:
        self.stop()
        if not is_heartbeat_enabled(self.storage):
            return
        stop = self._stop = threading.Event()
        interval = self.storage.get_heartbeat_interval()
        self.storage.record_heartbeat(trial_id)

        def beat() -> None:
            while not stop.wait(interval):
                self.storage.record_heartbeat(trial_id)

        threading.Thread(target=beat, daemon=True, name="tunepilot-early-heartbeat").start()

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
            self._stop = None


def _trials_since_improvement(history: History, min_delta: float) -> int:
    """Finished trials since the last one that beat the best before it by min_delta or more."""
    finished = history.finished()
    best, last = float("inf"), -1
    for i, t in enumerate(finished):
        if t.state == "complete" and t.value is not None and t.value <= best - min_delta:
            best, last = t.value, i
        elif t.state == "complete" and t.value is not None:
            best = min(best, t.value)
    return len(finished) - 1 - last


def failing_alike(history: History) -> tuple[str, str] | None:
    """(the error message, where the trainer's code raised it) when the study's last `Stop.REPEATS`
    finished trials all failed with it (read from the history: a resume or another worker sees the
    same). Divergence, time-outs and OOM depend on the config, so they never count."""
    last = history.last_finished(Stop.REPEATS)
    # Only exceptions of the trainer's own code: a crash, an OOM, a time-out or a divergence
    # says something about its config, and an interrupt nothing.
    if len(last) < Stop.REPEATS or any(
            t.state != "fail" or not t.error or t.error.get("kind") != "exception"
            for t in last):
        return None
    messages = {t.error.get("message", "") for t in last if t.error}
    if len(messages) != 1:
        return None
    return messages.pop(), str((last[-1].error or {}).get("where") or "")


def record_interrupt(study: optuna.Study, e: KeyboardInterrupt, lock: StudyLock) -> str | None:
    """Marks the trial this process was running as interrupted, FAILs it if Optuna did not (an
    interrupt between Optuna creating the trial and running it leaves it RUNNING), and queues
    its config to run first when the search goes on (once, as a killed process's trial: an
    interrupted trial says nothing about its config). What became of it, in a line; None when
    no trial of this run was running (a trial-end callback counted all of them)."""
    trial_id = getattr(study.sampler, "last_trial_id", None)
    if trial_id is None:
        return None
    storage = study._storage
    trial = storage.get_trial(trial_id)
    if trial.state == TrialState.RUNNING:
        records.fail(storage, trial_id, "interrupted", signal_name(e))
    elif trial.state == TrialState.FAIL and History.error_of(trial) is None:
        # Optuna failed it already, and a finished trial takes no more attributes.
        records.interrupted(study, trial.number, signal_name(e), lock)
    else:
        return None
    again = requeue(study, trial_id, "its config runs first when the search is resumed")
    return f"trial {trial.number} was interrupted: marked failed; {again}"


def signal_name(e: KeyboardInterrupt) -> str:
    return "SIGTERM" if isinstance(e, Terminated) else "Ctrl-C"

