"""Opening a study for a run: warm start from a finished study like it, the first trials (the
space's defaults, `start` configs, the LLM's zero-shot opening), the check that a study stays
one experiment, and Optuna's log lines while a display shows the same trials."""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import optuna

from tunepilot.errors import ConfigError
from tunepilot.memory import History, lookup, records, trust
from tunepilot.memory.identity import differences, identity
from tunepilot.memory.text import plural
from tunepilot.space import SearchSpace

if TYPE_CHECKING:
    from tunepilot.memory.lock import StudyLock
    from tunepilot.proposers.llm_suggester import LLMSuggester

MAX_OPENING = 5


def opening_size(n_trials: int) -> int:
    """How many configs the LLM's zero-shot opening asks for: a tenth of the budget, 1 to
    `MAX_OPENING` (LLAMBO's warm start used 5); none under 10 trials, where the model is asked
    on its turns anyway."""
    return 0 if n_trials < 10 else min(MAX_OPENING, n_trials // 10)


def warm_start(study: optuna.Study, storage: Any, settings: Mapping[str, Any],
               space: SearchSpace) -> str | None:
    """A new study starts from a finished one like it (the same trainer, data and parameters):
    its notes and best configs go into the prompt, and its best config is queued after the
    study's own first trials. What was taken, in a line (None: no study like it)."""
    found = lookup.warm_start(storage, study.study_name, dict(settings))
    if found is None:
        return None
    records.warm_start(study, {k: v for k, v in found.items() if k != "best_params"})
    config = {k: v for k, v in found["best_params"].items() if k in space.params}
    source = (f"warm start: from study {found['study']} (the same trainer, data and "
              "parameters): its notes and best configs are shown to the model")
    best = f"its best, trial {found.get('best_number')} ({found.get('best_value'):.4g})"
    if set(config) != set(space.params):
        return f"{source}; {best}, is not queued: it lacks parameters of this space"
    try:
        snapped = space.snap(config)
    except ValueError:
        return f"{source}; {best}, is not queued: it lies outside this space's bounds"
    trials = study.get_trials(deepcopy=False)
    for t in trials:  # the study's own first trials, queued already
        queued = t.system_attrs.get("fixed_params") or t.params
        if all(queued.get(k) == v for k, v in snapped.items()):
            return f"{source}; {best}, is already this study's trial {t.number}"
    number = len(trials)
    records.enqueue(study, snapped, "enqueued", warm_start_from=found["study"])
    return (f"{source}; {best}, runs as trial {number}. A study of its own from scratch: "
            "another --trainer, --data or space, or warm_start=False in Python")


def first_trials(study: optuna.Study, space: SearchSpace,
                 start: Sequence[Mapping[str, Any]]) -> None:
    """A new study's first trials: the space's declared defaults (what a person would try
    first: trial 0), then the `start` configs, each once; a warm start's config after them."""
    trials = study.get_trials(deepcopy=False)
    queued: list[Mapping[str, Any]] = [t.system_attrs.get("fixed_params") or t.params
                                       for t in trials]
    defaults = space.defaults()
    for i, config in enumerate(([defaults] if defaults else []) + list(start)):
        if any(dict(config) == dict(q) for q in queued):
            continue
        records.enqueue(study, config, "enqueued",
                        enqueued_as="default" if defaults and i == 0
                        else f"start {i + (0 if defaults else 1)}")
        queued.append(config)


def llm_opening(study: optuna.Study, space: SearchSpace, llm: LLMSuggester, k: int,
                lock: StudyLock, say: Callable[[str], None]) -> None:
    """A new study's zero-shot opening: one turn asks the model for its first `k` configs, in
    place of the sampler's first draws (judged as its trials: `memory.trust`). Its first config
    is queued after the defaults and `start` configs; the others are held and run one at a time
    while each before them beats the trials the model did not propose (`release`). Once per
    study: the first process to start a new study asks; others (workers joining) go on with the
    sampler meanwhile."""
    from tunepilot.proposers.suggest import SuggestionFailed

    calibration = History.from_study(study).calibration
    if calibration is not None and trust.TrackRecord(calibration=calibration).score < 0.5:
        with lock:
            if records.claim_opening(study, k, llm.model_name):
                records.opening(study, {"asked": 0, "model": llm.model_name, "taken": 0,
                                        "error": None, "skipped": calibration.verdict})
                say(f"LLM opening: none; {calibration.line()}, so the sampler's draws open "
                    "and the model reviews on the share its record earns")
        return
    with lock:  # claimed in one step across workers; the model is asked outside the lock
        if not records.claim_opening(study, k, llm.model_name):
            return
    queued = [dict(t.system_attrs.get("fixed_params") or {})
              for t in study.get_trials(deepcopy=False) if t.state.name == "WAITING"]
    try:
        answer = llm.opening(space, History.from_study(study), k, queued)
    except SuggestionFailed as e:
        records.opening(study, {"asked": k, "model": llm.model_name, "taken": 0,
                                "error": str(e)})
        say(f"LLM opening: none ({_short(str(e))}); the sampler starts alone")
        return
    configs = [dict(c) for c in answer.configs]
    records.enqueue_opening(study, configs[:1], answer.rationale, answer.meta)
    records.opening(study, {"asked": k, "model": llm.model_name, "taken": len(configs),
                            "error": None, "held": configs[1:],
                            "rationale": answer.rationale})
    if not configs:
        say("LLM opening: the model proposed none; the sampler starts alone")
        return
    rest = ("" if len(configs) == 1 else
            f"; its other {len(configs) - 1} run one at a time, each while the one before "
            "beats the median of the trials the model did not propose")
    say(f"LLM opening: {len(configs)} of {k} configs asked for, the first as trial "
        f"{len(queued)}{rest}" + (f" ({answer.rationale})" if answer.rationale else ""))


def release(study: optuna.Study, history: History, say: Callable[[str], None]) -> None:
    """The opening's next held config, queued once the one before it finished and beat the
    median of the finished trials the model did not propose (the declared defaults, the
    sampler's draws; a tie is not a win, as in `memory.trust`): a model that opens badly spends
    one trial, not its whole opening, beside an engine that loses each trial it gives away.
    Fewer than `MIN_PEERS` of them finished yet: the sampler takes the next turns, and the
    config is judged after them (beating one draw was luck: bench/README.md). A config that
    lost (or was pruned, or failed) ends the opening, said once. Call it holding the study's
    lock."""
    held = list(history.opening.get("held") or [])
    ran = [t for t in history if t.opening is not None]
    if not held or not ran or any(t.state not in ("complete", "pruned", "fail") for t in ran):
        return
    last = max(ran, key=lambda t: t.number)
    others = [t.value for t in history
              if t.proposer != "llm" and t.state == "complete" and t.value is not None]
    if last.state == "complete" and len(others) < trust.MIN_PEERS:
        return  # judged as `memory.trust` judges: against at least MIN_PEERS of them
    median = statistics.median(others) if others else math.inf
    record = dict(history.opening)
    if last.state == "complete" and last.value is not None and last.value < median:
        records.enqueue_opening(study, held[:1], record.get("rationale"),
                                {"llm": {"model": record.get("model")}},
                                first=(last.opening or 0) + 1)
        records.opening(study, {**record, "held": held[1:]})
        return
    records.opening(study, {**record, "held": [], "not_run": len(held)})
    how = (f"{last.value:.4g}, against their median {median:.4g}"
           if last.state == "complete" else last.state)
    say(f"LLM opening: its config {last.opening} (trial {last.number}: {how}) did not beat the "
        f"trials the model did not propose, so its other {plural(len(held), 'config')} are not "
        "run; the sampler takes their turns and the model reviews on the share its record earns")


def _short(text: str, n: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def check_identity(study: optuna.Study, settings: Mapping[str, Any], accept: bool) -> None:
    """One study, one experiment: a run with another trainer, data, space or fixed setting
    is refused, or, when the person says it is deliberate, recorded in the study."""
    before = identity(History.from_study(study).settings)
    changes = differences(before, identity(settings)) if before else []
    if not changes:
        return
    if not accept:
        listing = "\n  ".join(changes)
        raise ConfigError(
            f"Study {study.study_name} holds trials run with other settings, and their "
            f"losses would not be comparable with this run's:\n  {listing}\nStart a new "
            "study with --study NAME (it warm-starts from this one's best configs), or, if "
            "the change is deliberate and safe (a wider bound, say), pass --accept-changes "
            "(the change is recorded in the study).")
    records.change(study, changes)


@contextlib.contextmanager
def quiet_optuna(quiet: bool = True) -> Iterator[None]:
    """Optuna's INFO lines ("Trial 3 finished with value...") while our display shows the same
    trials: keep its warnings and errors only."""
    before = optuna.logging.get_verbosity()
    if quiet and before < optuna.logging.WARNING:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)
