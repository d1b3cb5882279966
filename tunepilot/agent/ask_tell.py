"""`Tuner`'s ask-and-tell half, for a person's own training loop: `suggest()` a config, train
it, `report()` its epochs and its loss; `enqueue()` a config to try, `hint()` the agent."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from tunepilot.agent.results import Proposal
from tunepilot.errors import ConfigError, TuneError
from tunepilot.memory import History, records
from tunepilot.space import SearchSpace


class AskTell:
    """Mixed into `Tuner`, which provides the study, the space and the open trials."""

    space: SearchSpace
    read_only: bool
    _open: dict[int, optuna.Trial]
    _asking: bool

    @property
    def study(self) -> optuna.Study:
        raise NotImplementedError

    def suggest(self) -> Proposal:
        """The next config for your own training loop: a dict (fixed settings included) that
        also says which trial it is, who proposed it and why. Report back with `report()`.

        Example:
            >>> config = tuner.suggest()  # doctest: +SKIP
            >>> for epoch in range(1, 4):  # doctest: +SKIP
            ...     if tuner.report(config, val_loss=train_one_epoch(config), epoch=epoch):
            ...         break  # pruned: stop training this config
            >>> tuner.report(config, val_loss=best_loss)  # doctest: +SKIP
        """
        self._writable("suggest")
        study = self.study
        self._asking = True
        try:
            with warnings.catch_warnings():
                # Optuna warns that heartbeats need optimize(); ask/tell trials have none.
                warnings.simplefilter("ignore", UserWarning)
                trial = study.ask()
        finally:
            self._asking = False
        config = self.space.sample(trial)
        self._open[trial.number] = trial
        storage, trial_id = study._storage, trial._trial_id
        return Proposal(config, number=trial.number,
                        proposer=History.proposer_of(storage, trial_id),
                        rationale=History.rationale_of(storage, trial_id))

    def report(self, config: Mapping[str, Any], val_loss: float | None = None, *,
               epoch: int | None = None, error: str | BaseException | None = None) -> bool:
        """Reports on a config from `suggest()`. With `epoch`: one epoch's validation loss (the
        pruner may stop the trial); without: the trial's final (best) loss; `error`: it failed.
        A loss that is NaN or infinite fails the trial as diverged.

        Returns True when the trial is over (recorded, pruned or failed): stop training it.
        """
        self._writable("report")
        trial = self._find_open(config)
        study = self.study
        if error is not None or val_loss is None or not math.isfinite(val_loss):
            kind = "exception" if error is not None else "diverged"
            message = str(error) if error is not None else f"validation loss {val_loss}"
            records.error(study._storage, trial._trial_id,
                          {"kind": kind, "message": message[:500]})
            study.tell(trial, state=TrialState.FAIL)
        elif epoch is not None:
            trial.report(val_loss, epoch)
            if not trial.should_prune():
                return False
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, val_loss)
        del self._open[trial.number]
        return True

    def enqueue(self, config: Mapping[str, Any]) -> None:
        """Queues a config you want tried; the next trial runs it (proposer "human"). Parameters
        left out are sampled as usual; values outside the space are refused."""
        self._writable("enqueue")
        records.enqueue(self.study, self.space.checked(config, "enqueue"), "human")

    def _find_open(self, config: Mapping[str, Any]) -> optuna.Trial:
        number = config.number if isinstance(config, Proposal) else None
        if number is None:
            key = {k: config.get(k) for k in self.space.params}
            matches = [n for n, t in self._open.items() if t.params == key]
            number = matches[0] if len(matches) == 1 else None
        if number not in self._open:
            raise ConfigError(
                "report(): this config is not an open trial of this tuner (never suggested, or "
                "already reported). Pass the object suggest() returned; open trials: "
                f"{sorted(self._open) or 'none'}.")
        return self._open[number]

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise TuneError(
                f"{what}(): this Tuner was opened read-only with Tuner.load. To add trials, make "
                "a Tuner(trainer, space, storage=..., study=...) on the same study, or start "
                "`tune worker`.")

    def hint(self, text: str) -> None:
        """Tells the agent something; it sees the hint in every prompt from the next trial on."""
        self._writable("hint")
        records.hint(self.study, text)
