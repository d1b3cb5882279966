"""What can be done with a stored study, from Python as from `tune`: create it for workers,
join it from its stored settings, run local workers on it, read its best config, re-run a trial.

The CLI is a face over these functions; a notebook calls them directly.

Example:
    >>> import tunepilot as tp
    >>> tuner, cfg, notes = tp.join("postgresql://me@db/tune", "ctr-night")  # doctest: +SKIP
    >>> tp.run(tuner, cfg)  # what `tune worker` does  # doctest: +SKIP
    >>> trial, config = tp.best("postgresql://me@db/tune", "ctr-night")  # doctest: +SKIP
    >>> tp.rerun("postgresql://me@db/tune", "ctr-night", trial.number)  # doctest: +SKIP
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from tunepilot.agent.build import build_trainer, from_config, storage_options
from tunepilot.agent.observer import Observer
from tunepilot.agent.results import TuneResult
from tunepilot.agent.tuner import Tuner
from tunepilot.config import TuneConfig
from tunepilot.errors import ConfigError, Terminated, describe
from tunepilot.memory import History, TrialRecord, load_study, redact
from tunepilot.memory.connections import engine_of
from tunepilot.memory.settings import stored as stored_settings
from tunepilot.memory.stops import Stop, StopKind
from tunepilot.memory.store import choose_study, open_existing
from tunepilot.proposers.suggest import Candidate
from tunepilot.runtime import devices, interrupts, pool
from tunepilot.space import SearchSpace
from tunepilot.trainers.base import TrainResult, check_finite

EXIT_BAD_INPUT = 2  # a worker's exit code for bad input (the CLI's too)


def check_shared(url: str, what: str) -> None:
    """SQLite allows one writing process; several workers need a shared storage."""
    if url.startswith("journal:") or url.endswith(".log"):
        raise ConfigError(
            f"{what} shares the study with other processes, and Optuna's journal file storage "
            f"({redact(url)}) has no heartbeat: a killed worker's trial would stay RUNNING, "
            "counted against the budget, and never be retried. Use a database server, which "
            "recovers it: --storage postgresql://USER@HOST:5432/DB or "
            "mysql+pymysql://USER@HOST:3306/DB (a PostgreSQL on this machine will do)."
        )
    if url.startswith("sqlite"):
        raise ConfigError(
            f"{what} shares the study with other processes, and SQLite ({redact(url)}) allows "
            "only one. Use a database server, on this machine or another: --storage "
            "postgresql://USER@HOST:5432/DB or mysql+pymysql://USER@HOST:3306/DB."
        )


def worker_command(cfg: TuneConfig) -> str:
    """The command that starts one more worker on `cfg`'s study (the password left out)."""
    return shlex.join(["tune", "worker", "--storage", redact(cfg.storage), "--study",
                       cfg.study_name()])


def run(tuner: Tuner, cfg: TuneConfig) -> TuneResult:
    """Runs `tuner` with `cfg`'s target and budgets; Ctrl-C and SIGTERM end it cleanly."""
    with interrupts.raising():
        return tuner.run(cfg.n_trials, target=cfg.target, timeout=cfg.timeout,
                         patience=cfg.patience, min_delta=cfg.min_delta,
                         llm_budget_usd=cfg.llm_budget, llm_token_budget=cfg.llm_token_budget)


def create(cfg: TuneConfig, display: Observer | None = None) -> tuple[Tuner, list[str]]:
    """Creates `cfg`'s study with everything workers need (space, task, strategy, target,
    budgets) and runs nothing; returns its tuner and the lines that say what was chosen."""
    check_shared(cfg.storage, "`tune create`")
    tuner, notes = from_config(cfg, display=display)
    tuner.study  # noqa: B018 (creates the study and stores its settings)
    return tuner, notes + tuner.take_first_lines()  # a warm start, if it found one


def join(storage: str, study: str | None = None, *, display: Observer | None = None,
         **overrides: Any) -> tuple[Tuner, TuneConfig, list[str]]:
    """A tuner on a study made by `tune run` / `tune create` / `create()`, rebuilt from its
    stored settings, as `tune worker` does. `overrides` replace stored settings that belong to
    this machine: ``llm``, ``llm_base_url``, ``llm_model_path``, ``isolate``."""
    check_shared(storage, "`tune worker`")
    # Opened once, as a study's settings mostly leave it (each opening of a server's storage
    # costs its schema's check); again only where the study's own settings differ. Its calls
    # share one connection.
    options = storage_options(TuneConfig.model_construct())  # the settings' defaults
    opened = open_existing(storage, worker=True, **options)
    try:
        name, said = choose_study(opened, study, url=storage)
        loaded = load_study(opened, name)
        settings = stored_settings(loaded).get("config")
    except BaseException:
        _close(opened)
        raise
    if settings is None:
        raise ConfigError(f"Study {loaded.study_name} was not made by `tune run` or `tune "
                          "create`, so its trainer and space are unknown; create it with "
                          "`tune create --storage URL ...` first.")
    _check_llm_endpoint(loaded.study_name, settings.get("llm_base_url"),
                        overrides.get("llm_base_url"), overrides.get("llm"))
    cfg = TuneConfig.model_validate({**settings, "storage": storage, "study": loaded.study_name,
                                     **{k: v for k, v in overrides.items() if v is not None}})
    same = storage_options(cfg) == options
    if not same:
        _close(opened)  # a worker keeps one connection at a time
    tuner, notes = from_config(cfg, display=display, worker=True,
                               storage=opened if same else None)
    return tuner, cfg, ([said] if said else []) + notes


def _close(storage: Any) -> None:
    if (engine := engine_of(storage)) is not None:
        engine.dispose()


def _check_llm_endpoint(study: str, stored: str | None, given: str | None,
                        llm: str | None = None) -> None:
    """An API key goes only to a server this process was told about: whoever can write the
    study's database must not be able to collect every worker's key with a URL of theirs.
    A worker told `--llm none` (Optuna alone) or `--llm local` (the embedded model) asks no
    server, so it sends its key nowhere."""
    if llm in ("none", "local"):
        return
    if stored and given is None and os.environ.get("OPENAI_API_KEY"):
        raise ConfigError(
            f"Study {study} names the LLM server {stored}, and this worker has OPENAI_API_KEY "
            "set, which it would send there. Pass --llm-base-url with that server's URL to "
            "confirm it, or --llm none (Optuna alone), or unset OPENAI_API_KEY (a server that "
            "needs no key).")


def run_workers(tuner: Tuner, cfg: TuneConfig, n: int | None = None, *,
                gpus_per_trial: int | None = None) -> TuneResult:
    """Runs `n` worker processes on this machine on `tuner`'s study (created now if new) and
    returns the study's summary once they are done. On a machine with GPUs each worker gets its
    own `gpus_per_trial` (default 1) and `n` None means one worker per such group. Ctrl-C or
    SIGTERM reaches each worker, which fails its running trial cleanly; the result then says it
    was interrupted."""
    check_shared(cfg.storage, "--n-workers")
    n, per_worker = devices.assign(n, gpus_per_trial, devices.gpus())
    before = len(History.from_study(tuner.study).finished())
    # The LLM server this process was told about, told to its workers (in the environment:
    # argv shows in ps), so they may send it their key.
    env = {"TUNEPILOT_LLM_BASE_URL": cfg.llm_base_url} if cfg.llm_base_url else {}
    ran = pool.run_workers(cfg.storage, cfg.study_name(), n, env=env, per_worker=per_worker)
    if EXIT_BAD_INPUT in ran.exit_codes and ran.interrupted is None:
        raise ConfigError(f"a worker stopped on bad input (exit codes {list(ran.exit_codes)}); "
                          "see its error above.")
    history = History.from_study(tuner.study)
    stop = history.last_stop or Stop(StopKind.WORKERS)
    if ran.interrupted is not None:
        stop = Stop.interrupted(sigterm=isinstance(ran.interrupted, Terminated))
    return tuner.summary(stop, n_new=len(history.finished()) - before)


def best(storage: str, study: str | None = None) -> tuple[TrialRecord, dict[str, Any]]:
    """The best trial of a study and the whole config it ran (fixed settings included)."""
    loaded = load_study(storage, study)
    history = History.from_study(loaded)
    trial = history.best_trial
    if trial is None:
        raise ConfigError(f"Study {loaded.study_name} has no completed trial yet; run `tune "
                          "run` (or wait for it) first.")
    return trial, history.config_of(trial)


@dataclass(frozen=True)
class Rerun:
    config: Mapping[str, Any]  # what ran: the trial's config with the fixed settings
    recorded: TrialRecord  # the trial as the study remembers it
    result: TrainResult | None  # what it gave now; None when it failed
    error: Mapping[str, str] | None = None  # why it failed now ({"kind", "message", "where"})

    @property
    def difference(self) -> float | None:
        """Now minus then, for a trial that completed both times."""
        if self.recorded.value is None or self.result is None:
            return None
        return self.result.best_val_loss - self.recorded.value


def rerun(storage: str, study: str | None, number: int, *,
          on_start: Callable[[Mapping[str, Any], TrialRecord], None] | None = None,
          on_epoch: Callable[[int, float], None] | None = None) -> Rerun:
    """Runs trial `number` of a study again with its recorded config and seed (`tune rerun`);
    `on_start(config, recorded)` is told what is about to run, `on_epoch(epoch, val_loss)`
    sees each epoch. A trainer that raises gives a `Rerun` with its `error`, as a trial of a
    search records it: a failed trial run again to see its error is the command's use too."""
    loaded = load_study(storage, study)
    history = History.from_study(loaded)
    record = next((t for t in history if t.number == number), None)
    if record is None or not record.params:
        raise ConfigError(f"Study {loaded.study_name} has no trial {number} with a config; "
                          "`tune show` lists its trials.")
    if "config" not in history.settings:
        raise ConfigError(f"Study {loaded.study_name} was not created by `tune run`, so its "
                          "trainer is unknown; rerun the config from Python instead.")
    cfg = TuneConfig.model_validate({**history.settings["config"], "storage": "sqlite://"})
    trainer, _ = build_trainer(cfg)

    def report(epoch: int, val_loss: float) -> None:
        check_finite(epoch, val_loss)
        if on_epoch is not None:
            on_epoch(epoch, val_loss)

    config = history.config_of(record)
    if on_start is not None:
        on_start(config, record)
    try:
        return Rerun(config, record, trainer(config, report))
    except Exception as e:  # the trainer's own error (KeyboardInterrupt passes)
        return Rerun(config, record, None, describe(e))


def resume_command(argv: list[str], result: TuneResult, n_trials: int) -> str:
    """The `tune` command that continues this study (with a bigger budget if it was used up),
    from the arguments of the one that ran it."""
    args = [_redact_arg(a) for a in argv]  # never print a password back
    if result.stop.kind is StopKind.BUDGET or result.target_reached:
        args = _drop_option(args, "--n-trials") + ["--n-trials", str(max(n_trials, 1) * 2)]
    if "--study" not in " ".join(args):
        args += ["--study", result.study_name]
    return shlex.join(["tune", *args])


def _redact_arg(arg: str) -> str:
    if "://" not in arg:
        return arg
    name, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
    return f"{name}={redact(value)}" if eq else redact(arg)


def _drop_option(args: list[str], name: str) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + "="):
            out.append(a)
    return out


def next_prompt(storage: str, study: str | None = None) -> str:
    """The system prompt and the next trial's prompt, exactly as the LLM of a study made by
    `tune run` / `tune create` would read them now (`tune prompt`)."""
    from tunepilot.agent.build import _task_description
    from tunepilot.proposers.llm_suggester import LLMSuggester, has_curves
    from tunepilot.space import SearchSpace

    loaded = load_study(storage, study)
    history = History.from_study(loaded)
    stored, space = history.settings.get("config"), history.settings.get("space")
    if stored is None or space is None:
        raise ConfigError(f"Study {loaded.study_name} was not made by `tune run` or `tune "
                          "create`, so its task and space are unknown: there is no prompt to "
                          "show.")
    cfg = TuneConfig.model_validate({**stored, "storage": storage,
                                     "study": loaded.study_name})
    # No model: only its prompts are read, it is never asked.
    llm = LLMSuggester(None, model_name="-",  # type: ignore[arg-type]
                       task=cfg.task or _task_description(cfg, []), n_trials=cfg.n_trials,
                       target=cfg.target, metric=cfg.metric)
    review = cfg.strategy in ("auto", "review")
    space_obj = SearchSpace.model_validate(space)
    system = llm.system_prompt(review, has_curves(history))
    if not review:
        return f"# system\n{system}\n\n# the next trial's prompt\n{llm.prompt(space_obj, history)}"
    from tunepilot.proposers.review import Reviewer

    left = Reviewer(llm, cfg.max_override_share).overrides_left(history)
    turn = ("" if left > 0 else
            "\n(the model's share of overrides is used up now: the next trial goes to the "
            "sampler without asking; this is what it reads at its next turn)")
    candidate = next_candidate(loaded, cfg, space_obj)
    return (f"# system\n{system}\n\n# the next trial's prompt (`review`: the sampler's "
            f"candidate drawn as the run would draw it){turn}\n"
            f"{llm.prompt(space_obj, history, candidate=candidate, overrides_left=max(left, 1))}")


def next_candidate(study: optuna.Study, cfg: TuneConfig, space: SearchSpace) -> Candidate:
    """The sampler's candidate for the study's next trial, as a run would draw it (the same
    sampler and seed), drawn on an in-memory copy of the study: the study itself is only
    read."""
    from optuna.storages import InMemoryStorage

    from tunepilot.agent.opening import quiet_optuna
    from tunepilot.proposers import samplers

    memory = InMemoryStorage()
    with quiet_optuna():  # no "A new study created in memory" before the prompt
        optuna.copy_study(from_study_name=study.study_name, from_storage=study._storage,
                          to_storage=memory)
    number = len(study.get_trials(deepcopy=False))
    sampler = samplers.per_trial_sampler(cfg.sampler, study.study_name, cfg.seed, space)(number)
    copy = optuna.load_study(study_name=study.study_name, storage=memory, sampler=sampler)
    trial = copy.ask(fixed_distributions=space.distributions())
    params = dict(trial.params)
    search_space = sampler.infer_relative_search_space(copy, copy.trials[-1])
    return Candidate(params, samplers.label(sampler), lambda: samplers.describe(
        sampler, copy, space, search_space, params))
