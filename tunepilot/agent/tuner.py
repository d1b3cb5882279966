"""`Tuner`: the one search loop behind the CLI, notebooks and workers.

Each trial: the sampler (Optuna's, or `AgentSampler` around a suggester) proposes a config, the
trainer trains it and reports every epoch (pruning happens there), and the result goes to the
study's storage. The storage is the only state: a new `Tuner` on the same study resumes it.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import optuna
from optuna.storages._heartbeat import is_heartbeat_enabled

from tunepilot.agent import observer, opening
from tunepilot.agent.ask_tell import AskTell
from tunepilot.agent.loop import EarlyHeartbeat, Gate, Loop, Rules, record_interrupt
from tunepilot.agent.observer import Observer
from tunepilot.agent.results import Proposal, TuneResult
from tunepilot.errors import ConfigError, Terminated, TuneError
from tunepilot.memory import DEFAULT_STORAGE, History, load_study, open_storage, open_study, records
from tunepilot.memory.calibrations import Calibration
from tunepilot.memory.lock import OneProcessRun, StudyLock
from tunepilot.memory.outage import heard_by
from tunepilot.memory.recovery import recover, stale_trial_listener
from tunepilot.memory.stops import Stop
from tunepilot.memory.store import open_existing
from tunepilot.proposers import pruners, samplers
from tunepilot.proposers.cost import clock_line
from tunepilot.proposers.samplers import per_trial_sampler, sampler_line
from tunepilot.proposers.suggest import AgentSampler, Suggester
from tunepilot.runtime import interrupts
from tunepilot.space import SearchSpace
from tunepilot.trainers.base import Trainer

__all__ = ["Proposal", "TuneResult", "Tuner"]

PerTrial = Callable[[int], optuna.samplers.BaseSampler]  # trial number -> the sampler drawing it

class Tuner(AskTell):
    """Tunes `trainer` over `space`, remembering every trial in an Optuna study.

    Example:
        >>> from tunepilot import Tuner, SearchSpace, Float, trainers
        >>> def quadratic(config, report):
        ...     return (config["x"] - 2.0) ** 2
        >>> tuner = Tuner(trainers.callable(quadratic), SearchSpace.of(x=Float(-5, 5)),
        ...               storage="sqlite:///:memory:", study="demo", display=None)
        >>> tuner.run(n_trials=30, target=0.01).best_value <= 0.01
        True
    """

    def __init__(
        self,
        trainer: Trainer | None = None,
        space: SearchSpace | None = None,
        *,
        llm: str | Any | None = None,
        strategy: str = "auto",
        task: str | None = None,
        metric: str = "validation loss",
        llm_time_share: float | None = None,
        max_override_share: float | None = None,
        storage: str | optuna.storages.BaseStorage = DEFAULT_STORAGE,
        study: str = "tunepilot",
        suggester: Suggester | None = None,
        sampler: str | optuna.samplers.BaseSampler | PerTrial = "auto",
        pruner: str | optuna.pruners.BasePruner = "auto",
        seed: int | None = 0,
        settings: Mapping[str, Any] | None = None,
        display: Observer | str | None = "auto",
        warm_start: bool = True,
        accept_changes: bool = False,
        start: Sequence[Mapping[str, Any]] = (),
        epoch_patience: int | None = None,
        opening: int | None = None,
        calibration: bool | Calibration = True,
    ):
        """
        Args:
            trainer: `train(config, report) -> loss` (see `tunepilot.trainers`); may be None
                when you run the training yourself with `suggest()` / `report()`.
            space: what to tune.
            llm: the agent's chat model: a spec ("openai:gpt-4o-mini", "local", "auto",
                "none") or a langchain chat model. None: Optuna alone (or `suggester`).
            strategy: with an LLM, "review" (Optuna proposes, the LLM reviews each candidate
                and overrides the share its track record earns, or `max_override_share` of
                them where set; "auto" means this),
                "hybrid" (they take turns: the LLM the first two, then the share of trials
                its record earns, or `max_override_share`) or "llm" (the LLM proposes every
                trial). Past
                `llm_time_share` of the wall time spent waiting for the LLM, Optuna takes its
                turn (default: no cap for a model or strategy named, 0.2 under "auto").
            task: one or two sentences for the LLM about what is trained.
            metric: what the trainer returns, in words, for the LLM ("1 - validation
                accuracy"); the study minimizes it.
            sampler: a name ("auto", "tpe", "cmaes", "gp", "random": seeded by `seed`, the
                study's name and the trial), an Optuna sampler, or trial number -> sampler.
            start: configs (whole or partial) a new study runs first, after the space's
                `default` values (trial 0); what a config leaves out, the sampler draws.
            epoch_patience: a trial whose validation loss has not improved for this many
                epochs stops, kept with its best epoch (0: every trial trains all its epochs;
                None: a third of its `epochs`, 1 to 3, or 2 when the config has no `epochs`).
                An epoch at or under the run's `target` ends its trial too (the search is
                over).
            opening: with an LLM, how many configs one turn asks it for on a new study, run
                first in place of the sampler's first draws and judged like its other trials
                (None: a tenth of the run's budget, at most 5, none under 10 trials; 0: no
                opening).
            display: "auto" (live in Jupyter, lines on a terminal), an `Observer`, or None.
            calibration: the model's record starts from what `tune calibrate` kept of it on
                this machine, if anything (True); from none (False, as `tune calibrate` runs
                it); or from the `Calibration` given.
        """
        if space is None or not space.params:
            raise ConfigError(
                "The search space has no parameters to tune. Declare some, e.g. "
                "SearchSpace.of(lr=Float(1e-5, 1e-1, log=True)), or in tune.toml: "
                '[space] lr = { type = "float", low = 1e-5, high = 1e-1, log = true }. '
                "`tune init --trainer SPEC` writes a commented tune.toml to start from."
            )
        if llm is not None and suggester is not None:
            raise ConfigError("Pass llm= (tunepilot's agent) or suggester= (your own), not both.")
        self.trainer = trainer
        self.space = space
        self.study_name = study
        self.llm_agent: Any = None  # the LLM suggester, told each run's budget and target
        self.strategy_note = ""  # what was chosen and why, in a line
        if llm is not None:
            from tunepilot.proposers.strategies import agent

            suggester, self.llm_agent, self.strategy_note = agent(
                llm, strategy, task=task or "Train the user's model; lower loss is better.",
                llm_time_share=llm_time_share, max_override_share=max_override_share,
                metric=metric, optuna_line=(f"{sampler} sampler, seed {seed}"
                                            if isinstance(sampler, str) else "its sampler"))
        self.suggester = suggester
        self.sampler = sampler
        self._calibration: Calibration | None = None
        calibration_line = ""
        if self.llm_agent is not None and isinstance(calibration, Calibration):
            self._calibration = calibration
            calibration_line = f"{calibration.line()}; its record starts from it"
        elif self.llm_agent is not None and calibration:
            from tunepilot.memory.calibrations import kept_for
            from tunepilot.prompts import version

            self._calibration, calibration_line = kept_for(
                self.llm_agent.model_name, getattr(self.llm_agent.model, "openai_api_base", None),
                version())
        # Said as a run starts (`take_first_lines`: a caller that prints them itself).
        self.first_lines = [line for line in (self.strategy_note, calibration_line,
                                              sampler_line(sampler, space)
                                              if isinstance(sampler, str) else "") if line]
        epochs = space.fixed.get("epochs")
        self.pruner = pruners.make_pruner(pruner, epochs if isinstance(epochs, int) else None)
        self.seed = seed
        self.settings = dict(settings or {})
        if display == "auto":
            display = observer.auto_display()
        self.display = display if isinstance(display, Observer) else Observer()
        self.warm_start = warm_start
        self.start = [space.checked(c, f"start config {i + 1}") for i, c in enumerate(start)]
        self.accept_changes = accept_changes
        self.epoch_patience = epoch_patience
        if opening is not None and opening < 0:
            raise ConfigError(f"opening must be 0 or more configs, found {opening}")
        self.opening = opening
        self.read_only = False
        self._study: optuna.Study | None = None
        self._open: dict[int, optuna.Trial] = {}  # trials of suggest() not yet reported
        self._asking = False
        # Opened once all is checked: a mistyped sampler leaves no empty tunepilot.db behind.
        self.storage = open_storage(storage) if isinstance(storage, str) else storage
        self.lock = StudyLock(self.storage, study)
        self._gate = Gate(self.lock)  # held from the run's "yes" until Optuna numbers the trial
        self._early_beat = EarlyHeartbeat(self.storage)

    def take_first_lines(self) -> list[str]:
        """The lines a run starts with (strategy, sampler, and why), for a caller that prints
        them itself: the run then does not say them again."""
        lines, self.first_lines = self.first_lines, []
        return lines

    @classmethod
    def load(cls, storage: str | optuna.storages.BaseStorage = DEFAULT_STORAGE,
             study: str | None = None) -> Tuner:
        """Opens an existing study read-only: its history, notes and plots, read afresh on
        every call, while a `tune run`, workers or another notebook go on writing to it.

        Example:
            >>> t = Tuner.load("sqlite:///tunepilot.db", "lightning-synthetic")  # doctest: +SKIP
            >>> t.history().tail()  # doctest: +SKIP
        """
        if isinstance(storage, str):
            storage = open_existing(storage)  # a reader creates no table, beats for no trial
        loaded = load_study(storage, study)
        saved = History.from_study(loaded).settings.get("space")
        if saved:
            space = SearchSpace.model_validate(saved)
        else:  # a study made by plain Optuna: its parameters, as distributions say
            space = SearchSpace.from_distributions(
                {k: v for t in loaded.get_trials(deepcopy=False) for k, v in
                 t.distributions.items()})
            if not space.params:
                raise ConfigError(f"Study {loaded.study_name} has no trials and was not made by "
                                  "tunepilot: there is nothing to show yet.")
        tuner = cls(None, space, storage=storage, study=loaded.study_name, display=None)
        tuner.read_only = True
        tuner._study = loaded
        return tuner

    def _created(self, trial: optuna.trial.FrozenTrial) -> None:
        # Optuna has created (numbered) the trial the gate admitted: other workers may count.
        self._gate.open()
        if self._asking:
            # A person's own loop: no heartbeat (nothing beats while they train), so no worker
            # ever takes the trial for dead.
            records.ask_tell(self.study._storage, trial._trial_id)
            return
        # Optuna's heartbeat starts once the config is chosen, which can take an LLM a minute;
        # a worker killed before then would leave a trial RUNNING forever. Beat from now on.
        self._early_beat.start(trial._trial_id)
        interrupts.hold()  # until the objective: Optuna starts the trial's heartbeat thread

    @property
    def study(self) -> optuna.Study:
        """The Optuna study, created on first use or resumed if it exists."""
        if self._study is None:
            with opening.quiet_optuna():
                study = open_study(self.storage, self.study_name, pruner=self.pruner)
            done = len(study.get_trials(deepcopy=False))
            fallback, per_trial, redraw = None, None, None
            if isinstance(self.sampler, str):
                per_trial = per_trial_sampler(self.sampler, self.study_name, self.seed,
                                              self.space)
                if (cheap := samplers.get(self.sampler).redraw) is not None:
                    redraw = per_trial_sampler(cheap, self.study_name, self.seed, self.space)
            elif not isinstance(self.sampler, optuna.samplers.BaseSampler):
                per_trial = self.sampler  # trial number -> sampler
            else:
                fallback = self.sampler
            study.sampler = AgentSampler(self.space, self.suggester, fallback,
                                         fallback_for_trial=per_trial,
                                         redraw_for_trial=redraw, lock=self.lock,
                                         on_created=self._created)
            if done == 0 and self.warm_start:  # a new study, opened by its creator
                opening.first_trials(study, self.space, self.start)
                if self.settings and (said := opening.warm_start(
                        study, self.storage, self.settings, self.space)):
                    self.first_lines.append(said)
            if self.settings:
                if done:
                    opening.check_identity(study, self.settings, self.accept_changes)
                records.settings(study, self.settings)
            if self.llm_agent is not None:
                stored = History.from_study(study).calibration
                if stored is None and self._calibration is not None:
                    records.calibration(study, self._calibration.to_record())
                elif stored is not None and stored != self._calibration:
                    self.first_lines.append(f"the study started from the {stored.line()}; its "
                                            "record goes on from that")
            self._study = study
        return self._study

    def history(self) -> Any:
        """The study's trials as a pandas DataFrame (read now: other writers' trials included)."""
        return History.from_study(self.study).to_frame()

    def insights(self) -> Any:
        """What the whole history says: parameter importance, where the best 20% lie, alerts."""
        from tunepilot.memory.insights import insights

        return insights(History.from_study(self.study), self.space, self.study)

    @property
    def notes(self) -> str:
        """What the agent has concluded so far (it rewrites its notes as it goes)."""
        return History.from_study(self.study).notes

    def plot(self, kind: str = "history") -> Any:
        """A matplotlib figure of the study: "history", "importance", "curves" or "parallel".
        Jupyter shows it inline; `fig.savefig("x.png")` writes it."""
        if observer.Faces.plot is None:
            raise TuneError("Tuner.plot needs tunepilot's faces: `import tunepilot` (or "
                            "tunepilot.ui) first.")
        return observer.Faces.plot(self.study, kind)

    def run(self, n_trials: int = 20, *, target: float | None = None,
            timeout: float | None = None, patience: int | None = None, min_delta: float = 0.0,
            llm_budget_usd: float | None = None,
            llm_token_budget: int | None = None) -> TuneResult:
        """Runs trials until `target` is reached, the study holds `n_trials` finished trials,
        the study's trials have used `timeout` seconds, `patience` finished trials bring no
        improvement of at least `min_delta`, or the study's LLM spend reaches `llm_budget_usd`
        or `llm_token_budget` tokens.
        Ctrl-C fails the running trial and returns."""
        self._writable("run")
        if self.trainer is None:
            raise ConfigError("run() needs a trainer: Tuner(trainer, space, ...). Without one, "
                              "train yourself with suggest() and report().")
        one_process = OneProcessRun(self.storage, self.study_name)
        one_process.acquire()
        # Another worker's trial found dead here is said on its terminal and in its log.
        stale = stale_trial_listener(self.storage)
        if stale is not None:
            stale.listeners.append(self.display.notice)
        try:  # holding it, a trial RUNNING from before is a dead process's: say so, run again
            # The study as the run finds it ("resuming: 2 trials done"), before the trials a
            # dead process left are failed here (each said in a line of its own). A database
            # server that goes away and comes back is said where the run is watched.
            with heard_by(self.storage, self.display.notice), interrupts.raising():
                found = History.from_study(self.study)
                dead = recover(self.study, self._open) if one_process.path else []
                return self._run(n_trials, target, timeout, patience, min_delta,
                                 llm_budget_usd, llm_token_budget, dead, found)
        finally:
            one_process.release()
            if stale is not None:
                stale.listeners.remove(self.display.notice)

    def _run(self, n_trials: int, target: float | None, timeout: float | None,
             patience: int | None, min_delta: float, llm_budget_usd: float | None,
             llm_token_budget: int | None, dead: list[str], found: History) -> TuneResult:
        rules = Rules(n_trials, target, timeout, patience, min_delta, llm_budget_usd,
                      llm_token_budget)
        if self.llm_agent is not None:  # the prompt states the run's budget and goal
            self.llm_agent.n_trials, self.llm_agent.target = n_trials, target
            self.llm_agent.notice = self.display.notice
        study = self.study
        records.goal(study, {"target": target, "timeout": timeout, "n_trials": n_trials})
        if is_heartbeat_enabled(study._storage):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)  # a crashed run's trial, if stale
        history = History.from_study(study)
        self.display.start(self.study_name, n_trials, found)
        clock = [clock_line(target, timeout) if self.sampler == "auto" else None,
                 pruners.for_goal(self.pruner, target, timeout)]
        for line in [*self.first_lines, *filter(None, clock)]:
            self.display.say(line)
        for line in dead:
            self.display.notice(line)
        if (reached := rules.target_stop(history, already=True)) is not None:
            return self._finish(reached, 0)
        if history.stop and not history.running():
            # A new run with a new goal starts clean (not while other workers are running).
            records.stop(study, None)
        if len(history.finished()) >= n_trials and not history.running():
            return self._finish(Stop.budget(n_trials, already=True), 0)
        spent = history.wall_time_s()
        time_left = None if timeout is None else timeout - spent
        if timeout is not None and time_left is not None and time_left <= 0:
            return self._finish(Stop.timeout(timeout, spent=spent), 0)

        assert self.trainer is not None  # run() refuses to start without one
        loop = Loop(rules, trainer=self.trainer, space=self.space, display=self.display,
                    gate=self._gate, early_beat=self._early_beat,
                    epoch_patience=self.epoch_patience)
        start = time.monotonic()
        try:
            if self.llm_agent is not None and self.opening != 0:
                k = self.opening if self.opening is not None else opening.opening_size(n_trials)
                if k:
                    opening.llm_opening(study, self.space, self.llm_agent, k, self.lock,
                                        self.display.say)
            if loop.admit(study, in_optimize=False):
                # No n_trials here: the gate counts the trials of every worker.
                with opening.quiet_optuna(type(self.display) is not Observer):
                    study.optimize(interrupts.objective(loop.objective), timeout=time_left,
                                   callbacks=[loop.after_trial], catch=(Exception,))
        except KeyboardInterrupt as e:
            interrupts.handled()
            loop.stop = Stop.interrupted(sigterm=isinstance(e, Terminated))
            said = record_interrupt(study, e, self.lock)
            if said is not None:
                loop.n_new += 1  # it ran here: "(1 new)"
                self.display.notice(said)
        finally:
            self._early_beat.stop()
            self._gate.open()
        if loop.fatal is not None:
            raise loop.fatal
        timed_out = time_left is not None and time.monotonic() - start >= time_left
        stop = loop.stop or (Stop.timeout(timeout) if timed_out and timeout is not None else
                             Stop.budget(n_trials))
        return self._finish(stop, loop.n_new)

    def _finish(self, stop: Stop, n_new: int) -> TuneResult:
        records.last_stop(self.study, stop)
        self.display.finish(result := self.summary(stop, n_new))
        return result

    def summary(self, stop: Stop, n_new: int = 0) -> TuneResult:
        """The study as it stands, as a `TuneResult` that says it stopped by `stop`."""
        return TuneResult.of(self.study_name, History.from_study(self.study), self.space.fixed,
                             stop, n_new)
