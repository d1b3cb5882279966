"""The strategies: which suggester proposes which trial, for a chat model and a strategy name.

- ``optuna``: no suggester (Optuna's sampler proposes every trial; see `build`);
- ``llm``: the LLM suggester proposes every trial (the sampler only when it fails);
- ``review`` (what ``auto`` means with a model, but for the embedded demonstration model that
  ``--llm auto`` falls back to without a key: Optuna alone, as its reviews measured no gain):
  the sampler draws a candidate every trial; the LLM sees it with the sampler's state and
  accepts or overrides it, on the share of trials its record earns (see `review`);
- ``hybrid``: the LLM on the first trials, then on the share of trials its record earns (as
  `review`'s overrides), the sampler the rest, both reading one history.

A model or strategy the person named (`--llm local`, `--strategy llm`, a chat model object) is
asked on every one of its turns. Where both were left to `auto`, or where the person sets
`llm_time_share`, past that share of the search's wall time spent waiting for the model the
sampler takes the turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunepilot.errors import ConfigError, one_of

if TYPE_CHECKING:
    from tunepilot.proposers.suggest import Suggester

# The names the config and the CLI accept (auto: `agent` says what it means). This module is
# read by `tune --help`: what builds a strategy is imported when one is built.
STRATEGIES = ("auto", "optuna", "review", "llm", "hybrid")


def agent(llm: Any, strategy: str = "auto", *, task: str, n_trials: int = 20,
          target: float | None = None, optuna_line: str = "auto sampler",
          llm_time_share: float | None = None, max_override_share: float | None = None,
          metric: str = "validation loss") -> tuple[Suggester | None, Any, str]:
    """The suggester for an LLM and a strategy ("auto", "review", "hybrid", "llm", or
    "optuna": none), the LLM suggester inside it (None without a model), and a line saying what
    was chosen and why. The one way a strategy is built: `Tuner(llm=..., strategy=...)` calls
    it, for a notebook and for `tune run` alike.

    `llm`: a spec ("openai:gpt-4o-mini", "local", "auto", "none"), `LLMSettings`, or a
    langchain chat model.
    """
    from tunepilot.llm.models import Choice, LLMSettings, choose
    from tunepilot.memory import redact, trust

    if strategy == "optuna":
        return None, None, f"strategy: optuna ({optuna_line}): Optuna proposes every trial"
    strategies = tuple(s for s in STRATEGIES if s != "optuna")
    if strategy not in strategies:
        raise ConfigError(f"Unknown strategy {strategy!r} with an LLM; expected "
                          f"{one_of(strategies)} (or no llm= for Optuna alone).")
    if isinstance(llm, str):
        llm = LLMSettings(llm)
    # What the person named is asked on its turns; the time share caps what `auto` chose.
    named = strategy != "auto" or not isinstance(llm, LLMSettings) or \
        llm.spec.strip() != "auto"
    if isinstance(llm, LLMSettings):
        settings = llm
        choice = choose(llm)
    else:  # a chat model object
        settings = LLMSettings()
        name = getattr(llm, "model_name", None) or getattr(llm, "model", None) or type(llm).__name__
        choice = Choice(llm, str(name), f"the chat model given ({type(llm).__name__})")
    if choice.model is None:
        if strategy != "auto":
            raise ConfigError(
                f"Strategy {strategy!r} needs an LLM, but {choice.reason}. Pass --llm "
                "openai:MODEL (with OPENAI_API_KEY set, or --llm-base-url URL of an "
                "OpenAI-compatible server), or use --strategy optuna."
            )
        return None, None, f"strategy: optuna ({optuna_line}); {choice.reason}"
    # The shipped 135M model, not a GGUF file of the user's (--llm-model-path).
    embedded = choice.name == "local" and not settings.model_path
    if strategy == "auto" and embedded and settings.spec.strip() == "auto":
        # Its reviews measured level with no model, at seconds of CPU a turn
        # (bench/README.md#the-embedded-model). A default that buys nothing with
        # the user's time is not taken; naming it (--llm local) or a strategy (--strategy
        # review) still asks it.
        return None, None, (
            f"strategy: optuna ({optuna_line}): Optuna proposes every trial. --llm auto found "
            "no OPENAI_API_KEY, only the embedded demonstration model (SmolLM2-135M), whose "
            "reviews measured no gain over Optuna alone (bench/README.md#the-embedded-model), "
            "so it is not asked; "
            "--strategy review asks it anyway. For an LLM worth its turns: OPENAI_API_KEY, "
            "--llm-base-url URL, or --llm-model-path FILE.gguf")
    # Imported once a model is asked (a worker with Optuna alone loads none of it).
    from tunepilot.proposers.llm_suggester import LLMSuggester
    from tunepilot.proposers.review import (
        EMBEDDED_FIRST_TURN_S,
        LLM_TIME_SHARE,
        WINDOW,
        Reviewer,
        earned_turns,
        paced,
    )

    strategy = "review" if strategy == "auto" else strategy
    # The embedded model runs on the CPU that trains (every prompt token costs a trial's time;
    # bench/README.md#the-embedded-model) and its notes are noise: it gets a shorter prompt, no
    # notes, fewer attempts and fewer turns.
    small = embedded
    capped = llm_time_share is not None or not named
    if llm_time_share is None:
        llm_time_share = 1.0 if named else LLM_TIME_SHARE
    llm_suggester = LLMSuggester(choice.model, model_name=choice.name, task=task,
                                 metric=metric,
                                 n_trials=n_trials, target=target, prices=settings.prices,
                                 attempts=min(settings.attempts, 2) if small
                                 else settings.attempts,
                                 history_k=3 if small else 5, notes=not small,
                                 first_turn_s=EMBEDDED_FIRST_TURN_S if small else 0.0)
    where = f" at {redact(settings.base_url)}" if settings.base_url else ""
    pace = (f"; the sampler takes its turns past {llm_time_share:.0%} of the wall time"
            if llm_time_share < 1.0 else "" if capped else
            "; asked on all its turns, as named (--llm-time-share caps its share of the time)")
    if strategy == "review":
        share = (f"up to {max_override_share:.0%} of them" if max_override_share is not None
                 else f"the share its record earns ({trust.EVEN_SHARE:.0%} to start, "
                 f"{trust.FLOOR:.0%} to {trust.CEILING:.0%} of any {WINDOW} trials)")
        # What review with an earned share does:
        # bench/README.md#what-a-models-knowledge-buys-and-its-trust
        return (Reviewer(llm_suggester, max_override_share, llm_time_share), llm_suggester,
                f"strategy: review (Optuna's {optuna_line} proposes every trial; {choice.name}"
                f"{where} reviews each candidate and may override {share}{pace}); "
                f"{choice.reason}")
    if strategy == "llm":
        return paced(llm_suggester, llm_time_share), llm_suggester, (
            f"strategy: llm ({choice.name}{where} proposes every trial; {optuna_line} if it "
            f"fails{pace}); {choice.reason}")
    # hybrid's turns, as review's overrides, follow the model's record: the fixed rule (trials
    # 1, 2, then every 4th) gave a model that loses a quarter of the trials all night.
    startup = 2
    share = (f"{max_override_share:.0%} of the trials after" if max_override_share is not None
             else f"then the share of trials its record earns ({trust.EVEN_SHARE:.0%} to start, "
             f"{trust.FLOOR:.0%} to {trust.CEILING:.0%} of any {WINDOW} trials)")
    return earned_turns(paced(llm_suggester, llm_time_share), startup=startup,
                        share=max_override_share), llm_suggester, (
        f"strategy: hybrid ({choice.name}{where} proposes the first {startup} trials, {share}; "
        f"Optuna's {optuna_line} the rest{pace}); {choice.reason}")
