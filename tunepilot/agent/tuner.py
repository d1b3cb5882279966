"""`Tuner`: the one search loop behind the CLI, notebooks and workers.

Each trial: the sampler (Optuna's, or `AgentSampler` around a suggester) proposes a config, the
trainer trains it and reports every epoch (pruning happens there), and the result goes to the
study's storage. The storage is the only state: a new `Tuner` on the same study resumes it.
"""

from __future__ import annotations

import threading
import time
import traceback
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.storages._heartbeat import is_heartbeat_enabled
from optuna.trial import TrialState

from tunepilot.agent import interrupts
from tunepilot.agent.display import Display
from tunepilot.agent.suggest import AgentSampler, Suggester, optuna_sampler
from tunepilot.errors import ConfigError, Terminated, TrialFailed, did_you_mean
from tunepilot.memory import DEFAULT_STORAGE, History, attrs, open_storage, open_study
from tunepilot.memory.environment import device, versions
from tunepilot.memory.lock import StudyLock
from tunepilot.memory.lookup import warm_start
from tunepilot.space import SearchSpace
from tunepilot.trainers.base import Trainer, TrainResult, check_finite

_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
_REPEATED_FAILURES = 3  # identical errors in a row look like a bug, not a bad config
PRUNERS = ("median", "none")


@dataclass(frozen=True)
class TuneResult:
    """What `Tuner.run` ended with. `stop_reason` says which rule stopped the search."""

    study_name: str
    stop_reason: str
    best_value: float | None
    best_params: Mapping[str, Any] | None
    best_number: int | None
    n_finished: int  # trials of the study that are done (all runs together)
    n_new: int  # trials this call ran
    target_reached: bool
    interrupted: bool  # by Ctrl-C or SIGTERM
    terminated: bool  # by SIGTERM
    history: History


class Tuner:
    """Tunes `trainer` over `space`, remembering every trial in an Optuna study.

    Example:
        >>> from tunepilot import Tuner, SearchSpace, Float, trainers
        >>> def quadratic(config, report):
        ...     return (config["x"] - 2.0) ** 2
        >>> tuner = Tuner(trainers.callable(quadratic), SearchSpace.of(x=Float(-5, 5)),
        ...               storage="sqlite:///:memory:", study="demo")
        >>> tuner.run(n_trials=30, target=0.01).best_value <= 0.01
        True
    """

    def __init__(
        self,
        trainer: Trainer,
        space: SearchSpace,
        *,
        storage: str | optuna.storages.BaseStorage = DEFAULT_STORAGE,
        study: str = "tunepilot",
        suggester: Suggester | None = None,
        sampler: str | optuna.samplers.BaseSampler = "tpe",
        pruner: str | optuna.pruners.BasePruner = "median",
        seed: int | None = 0,
        settings: Mapping[str, Any] | None = None,
        display: Display | None = None,
        warm_start: bool = True,
    ):
        if not space.params:
            raise ConfigError(
                "The search space has no parameters to tune. Declare some, e.g. in tune.toml: "
                '[space] lr = { type = "float", low = 1e-5, high = 1e-1, log = true }'
            )
        self.trainer = trainer
        self.space = space
        self.storage = open_storage(storage) if isinstance(storage, str) else storage
        self.study_name = study
        self.suggester = suggester
        self.sampler = sampler
        self.pruner = _pruner(pruner)
        self.seed = seed
        self.settings = dict(settings or {})
        self.display = display or Display()
        self.warm_start = warm_start
        self._study: optuna.Study | None = None
        self.lock = StudyLock(self.storage, study)
        self._gate_held = False  # the lock, taken before Optuna creates the next trial
        self._early_beat = _EarlyHeartbeat(self.storage)

    def _created(self, trial: optuna.trial.FrozenTrial) -> None:
        # Optuna has created (numbered) the trial the gate admitted: other workers may count.
        if self._gate_held:
            self._gate_held = False
            self.lock.release()
        # Optuna's heartbeat starts once the config is chosen, which can take an LLM a minute;
        # a worker killed before then would leave a trial RUNNING forever. Beat from now on.
        self._early_beat.start(trial._trial_id)

    @property
    def study(self) -> optuna.Study:
        """The Optuna study, created on first use or resumed if it exists."""
        if self._study is None:
            study = open_study(self.storage, self.study_name, pruner=self.pruner)
            # Offset the seed by the trials already run, so a resumed search does not replay
            # the same random proposals.
            done = len(study.get_trials(deepcopy=False))
            if isinstance(self.sampler, str):
                # Seeded by trial number: a resumed search does not replay its proposals, and
                # parallel workers (each with the same seed) do not replay one another's.
                name, seed = self.sampler, self.seed

                def fallback_for_trial(number: int) -> optuna.samplers.BaseSampler:
                    # Spread apart, so seed 1 is not seed 0 shifted by one trial.
                    return optuna_sampler(name, None if seed is None
                                          else (seed * 1_000_003 + number) % 2**32)

                study.sampler = AgentSampler(self.space, self.suggester,
                                             fallback_for_trial=fallback_for_trial,
                                             lock=self.lock, on_created=self._created)
            else:
                study.sampler = AgentSampler(self.space, self.suggester, self.sampler,
                                             lock=self.lock, on_created=self._created)
            if self.settings:
                if done == 0 and self.warm_start:
                    self._warm_start(study)
                study.set_user_attr(attrs.SETTINGS, self.settings)
            self._study = study
        return self._study

    def history(self) -> History:
        return History.from_study(self.study)

    def hint(self, text: str) -> None:
        """Tells the agent something; it sees the hint in every prompt from the next trial on."""
        hints = list(self.study.user_attrs.get(attrs.HINTS) or [])
        hints.append({"text": str(text), "after_trial": len(self.study.trials)})
        self.study.set_user_attr(attrs.HINTS, hints)

    def _warm_start(self, study: optuna.Study) -> None:
        """A new study starts from the best configs and notes of a finished one like it."""
        found = warm_start(self.storage, self.study_name, self.settings)
        if found is None:
            return
        study.set_user_attr(attrs.WARM_START, {k: v for k, v in found.items()
                                               if k != "best_params"})
        config = {k: v for k, v in found["best_params"].items() if k in self.space.params}
        if set(config) == set(self.space.params):
            try:
                study.enqueue_trial(self.space.snap(config), user_attrs={
                    attrs.PROPOSER: "enqueued", "warm_start_from": found["study"]})
            except ValueError:
                pass  # the old best lies outside the new bounds: the prompt still shows it

    def run(self, n_trials: int = 20, *, target: float | None = None,
            timeout: float | None = None, patience: int | None = None, min_delta: float = 0.0,
            llm_budget_usd: float | None = None,
            llm_token_budget: int | None = None) -> TuneResult:
        """Runs trials until `target` is reached, the study holds `n_trials` finished trials,
        the study's trials have used `timeout` seconds, `patience` finished trials bring no improvement of at least
        `min_delta`, or the study's LLM spend reaches `llm_budget_usd` or `llm_token_budget`
        tokens. Ctrl-C fails the running trial and returns."""
        study = self.study
        if is_heartbeat_enabled(study._storage):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)  # a crashed run's trial, if stale
        history = History.from_study(study)
        best = history.best_trial
        self.display.start(self.study_name, n_trials, history)
        if target is not None and best is not None and best.value <= target:
            return self._finish(f"target {target:g} already reached by trial {best.number}", 0)
        if study.user_attrs.get(attrs.STOP) and not history.running():
            # A new run with a new goal starts clean (not while other workers are running).
            study.set_user_attr(attrs.STOP, None)
        if len(history.finished()) >= n_trials and not history.running():
            return self._finish(f"budget of {n_trials} trials already used", 0)
        # The time budget is the study's, like the trial budget: a resumed run, or a worker that
        # joins late, gets what the study has left. Parallel trials count once.
        spent = history.wall_time_s()
        time_left = None if timeout is None else timeout - spent
        if time_left is not None and time_left <= 0:
            return self._finish(f"time budget of {timeout:g} s already used ({spent:.0f} s)", 0)

        loop = _Loop(self, n_trials, target, patience, min_delta, llm_budget_usd, llm_token_budget,
                     timeout)
        start = time.monotonic()
        try:
            if loop.admit(study, in_optimize=False):
                # No n_trials here: the gate counts the trials of every worker.
                study.optimize(loop.objective, timeout=time_left, callbacks=[loop.after_trial],
                               catch=(Exception,))
        except KeyboardInterrupt as e:
            loop.reason = f"interrupted ({_signal_name(e)})"
            _record_interrupt(study, e, self.lock)
        finally:
            self._early_beat.stop()
            if self._gate_held:
                self._gate_held = False
                self.lock.release()
        if loop.fatal is not None:
            raise loop.fatal
        reason = loop.reason
        if reason is None:
            timed_out = time_left is not None and time.monotonic() - start >= time_left
            reason = f"time budget of {timeout:g} s used" if timed_out else (
                f"budget of {n_trials} trials used")
        return self._finish(reason, loop.n_new)

    def _finish(self, reason: str, n_new: int) -> TuneResult:
        self.study.set_user_attr(attrs.LAST_STOP, reason)
        result = self.summary(reason, n_new)
        self.display.finish(result)
        return result

    def summary(self, reason: str, n_new: int = 0) -> TuneResult:
        """The study as it stands, as a `TuneResult` that says it stopped for `reason`."""
        history = History.from_study(self.study)
        best = history.best_trial
        return TuneResult(
            study_name=self.study_name,
            stop_reason=reason,
            best_value=best.value if best else None,
            best_params={**self.space.fixed, **best.params} if best else None,
            best_number=best.number if best else None,
            n_finished=len(history.finished()),
            n_new=n_new,
            target_reached=reason.startswith("target"),
            interrupted=reason.startswith("interrupted"),
            terminated=reason.startswith("interrupted (SIGTERM"),
            history=history,
        )


class _Loop:
    """Per-run state of `Tuner.run`: the objective and the stopping rules."""

    def __init__(self, tuner: Tuner, n_trials: int, target: float | None,
                 patience: int | None = None, min_delta: float = 0.0,
                 llm_budget_usd: float | None = None, llm_token_budget: int | None = None,
                 timeout: float | None = None):
        self.tuner = tuner
        self.timeout = timeout
        self.llm_token_budget = llm_token_budget
        self.n_trials = n_trials
        self.target = target
        self.patience = patience
        self.min_delta = min_delta
        self.llm_budget_usd = llm_budget_usd
        self.reason: str | None = None
        self.fatal: Exception | None = None  # raised by run() once Optuna has closed the trial
        self.n_new = 0
        self._last_errors: list[str] = []

    def objective(self, trial: optuna.Trial) -> float:
        # No storage writes on Ctrl-C here: the interrupt may have cut a write short. Tuner.run
        # records it once the stack has unwound (_record_interrupt).
        tuner = self.tuner
        tuner._early_beat.stop()  # Optuna's own heartbeat runs from here
        try:
            config = tuner.space.sample(trial)
        except Exception as e:
            # The sampler or suggester failed: a bug (model-caused failures fall back inside
            # AgentSampler), so stop rather than fail every trial quietly.
            self.fatal = e
            trial.study.stop()
            trial.set_user_attr(attrs.ERROR, _describe_error(e))
            raise
        tuner.display.trial_start(trial.number, {k: config[k] for k in tuner.space.params},
                                  trial.study._storage.get_trial_user_attrs(trial._trial_id)
                                  .get(attrs.PROPOSER))

        def report(epoch: int, val_loss: float) -> None:
            interrupts.check()
            check_finite(epoch, val_loss)
            trial.report(val_loss, epoch)
            tuner.display.epoch(trial.number, epoch, val_loss)
            if trial.should_prune():
                raise optuna.TrialPruned(f"pruned after epoch {epoch} (val loss {val_loss:.4g})")

        try:
            result = tuner.trainer(config, report)
        except optuna.TrialPruned:
            raise
        except ConfigError as e:
            # Bad input fails every trial alike: stop the search and tell the person.
            self.fatal = e
            trial.study.stop()
            trial.set_user_attr(attrs.ERROR, {"kind": "config", "message": str(e)})
            raise
        except Exception as e:
            trial.set_user_attr(attrs.ERROR, _describe_error(e))
            raise
        if not isinstance(result, TrainResult):
            raise TypeError(f"a trainer must return TrainResult, got {type(result).__name__}")
        check_finite(len(result.curve), result.best_val_loss)
        if self.target is not None and result.best_val_loss <= self.target:
            # Before Optuna records the value: from here on no worker's gate admits a trial.
            with tuner.lock:
                trial.study.set_user_attr(attrs.STOP, (
                    f"target {self.target:g} reached by trial {trial.number} "
                    f"({result.best_val_loss:.4g})"))
        trial.set_user_attr(attrs.TRAIN, {
            "wall_time_s": round(result.wall_time_s, 3),
            "samples_per_s": result.samples_per_s and round(result.samples_per_s, 1),
            "peak_memory_mb": result.peak_memory_mb and round(result.peak_memory_mb, 1),
            # The trainer knows its device best (an isolated trial ran in another process).
            "device": result.extra.get("device") or device(),
            "versions": versions(),
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
        tuner = self.tuner
        while True:
            tuner.lock.acquire()
            try:
                history = History.from_study(study)
                if finished is not None:
                    tuner.display.trial_end(history[finished.number]
                                            if finished.number < len(history) else None, history)
                    self.reason = self._after_trial_reason(study, history, finished)
                    finished = None
                self.reason = self.reason or self._gate_reason(history)
            except BaseException:
                tuner.lock.release()
                raise
            others = [t for t in history.running() if not t.user_attrs.get(attrs.ASK_TELL)]
            if not (self.reason and self.reason.startswith("budget") and others
                    and is_heartbeat_enabled(study._storage)):
                break
            # The budget is taken, but by trials still running elsewhere: if one of their
            # workers died, its trial turns stale and is queued again, and this worker should
            # run it. Wait for them. (Trials of a person's own loop have no heartbeat: not them.)
            self.reason = None
            tuner.lock.release()
            tuner.display.waiting([t.number for t in others])
            time.sleep(study._storage.get_heartbeat_interval() or 10)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)
        if self.reason is not None:
            tuner.lock.release()
            if in_optimize:  # Optuna refuses stop() outside optimize()
                study.stop()
            return False
        tuner._gate_held = True
        return True

    def _after_trial_reason(self, study: optuna.Study, history: History,
                            frozen: optuna.trial.FrozenTrial) -> str | None:
        """The stopping rules that look at the trial that just ended."""
        if (self.target is not None and frozen.state == TrialState.COMPLETE
                and frozen.value is not None and frozen.value <= self.target):
            reason = f"target {self.target:g} reached by trial {frozen.number} ({frozen.value:.4g})"
            if not history.stop:
                study.set_user_attr(attrs.STOP, reason)  # tells the other workers
            return reason
        if history.stop:
            return f"stopped by another worker: {history.stop}"
        if self.patience and (stale := _trials_since_improvement(history, self.min_delta)) \
                >= self.patience:
            return (f"plateau: {stale} finished trials without an improvement of "
                    f"{self.min_delta:g} or more")
        if self.llm_budget_usd is not None and (spent := llm_spend(history)) \
                >= self.llm_budget_usd:
            return f"LLM spend ${spent:.4f} reached the budget of ${self.llm_budget_usd:g}"
        if self.llm_token_budget is not None and (tokens := llm_tokens(history)) \
                >= self.llm_token_budget:
            return f"LLM tokens {tokens:,} reached the budget of {self.llm_token_budget:,}"
        if self._failing_alike(frozen):
            error = frozen.user_attrs.get(attrs.ERROR, {})
            return (f"the last {_REPEATED_FAILURES} trials failed with the same error "
                    f"({error.get('message')}); this looks like a bug in the trainer")
        return None

    def _gate_reason(self, history: History) -> str | None:
        """The stopping rules of the whole study, checked before each new trial."""
        best = history.best_trial
        if history.stop:
            return f"stopped by another worker: {history.stop}"
        if self.target is not None and best is not None and best.value <= self.target:
            return f"target {self.target:g} reached by trial {best.number} ({best.value:.4g})"
        if history.budget_used() >= self.n_trials:
            return f"budget of {self.n_trials} trials used"
        if self.timeout is not None and history.wall_time_s() >= self.timeout:
            return f"time budget of {self.timeout:g} s used"
        return None

    def _failing_alike(self, frozen: optuna.trial.FrozenTrial) -> bool:
        error = frozen.user_attrs.get(attrs.ERROR) if frozen.state == TrialState.FAIL else None
        # Divergence, time-outs and OOM depend on the config; only other repeats look like bugs.
        if not error or error.get("kind") in ("diverged", "timeout", "oom"):
            self._last_errors.clear()
            return False
        self._last_errors.append(error.get("message", ""))
        tail = self._last_errors[-_REPEATED_FAILURES:]
        return len(tail) == _REPEATED_FAILURES and len(set(tail)) == 1


class _EarlyHeartbeat:
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


def llm_spend(history: History) -> float:
    """USD spent on the LLM over the whole study (trials with a known price)."""
    return sum((t.user_attrs.get(attrs.LLM) or {}).get("cost_usd") or 0.0 for t in history)


def llm_tokens(history: History) -> int:
    """Tokens sent to and received from the LLM over the whole study."""
    return sum((t.user_attrs.get(attrs.LLM) or {}).get("tokens_in", 0)
               + (t.user_attrs.get(attrs.LLM) or {}).get("tokens_out", 0) for t in history)


def _record_interrupt(study: optuna.Study, e: KeyboardInterrupt, lock: StudyLock) -> None:
    """Marks the trial this process was running as interrupted, and FAILs it if Optuna did not
    (an interrupt between Optuna creating the trial and running it leaves it RUNNING)."""
    trial_id = getattr(study.sampler, "last_trial_id", None)
    if trial_id is None:
        return
    storage = study._storage
    trial = storage.get_trial(trial_id)
    if trial.state == TrialState.RUNNING:
        storage.set_trial_user_attr(trial_id, attrs.ERROR,
                                    {"kind": "interrupted", "message": _signal_name(e)})
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
    elif trial.state == TrialState.FAIL and attrs.ERROR not in trial.user_attrs:
        # Optuna failed it already and a finished trial takes no more attributes: note the
        # cause on the study, where History finds it.
        with lock:  # other workers write this attr too
            interrupted = dict(study.user_attrs.get(attrs.INTERRUPTED) or {})
            interrupted[str(trial.number)] = _signal_name(e)
            study.set_user_attr(attrs.INTERRUPTED, interrupted)


def _signal_name(e: KeyboardInterrupt) -> str:
    return "SIGTERM" if isinstance(e, Terminated) else "Ctrl-C"


def _describe_error(e: BaseException) -> dict[str, str]:
    if isinstance(e, TrialFailed):  # its message says what happened; no type name needed
        return {"kind": e.kind, "message": str(e)[:500], "where": ""}
    elif isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        kind = "oom"
    else:
        kind = "exception"
    text = str(e).strip().splitlines()
    message = f"{type(e).__name__}: {text[0] if text else ''}"[:500]
    frames = traceback.extract_tb(e.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return {"kind": kind, "message": message, "where": where}


def _pruner(pruner: str | optuna.pruners.BasePruner) -> optuna.pruners.BasePruner:
    if not isinstance(pruner, str):
        return pruner
    if pruner == "median":
        # Judge a trial only after 5 complete trials and from its 2nd epoch: the first epoch of
        # a CTR model says little about where it ends.
        return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=2)
    if pruner == "none":
        return optuna.pruners.NopPruner()
    raise ConfigError(f"Unknown pruner {pruner!r}; expected one of {', '.join(PRUNERS)}."
                      f"{did_you_mean(pruner, PRUNERS)}")


