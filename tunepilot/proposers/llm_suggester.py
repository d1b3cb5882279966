"""The LLM suggester: prompt from the history, structured answer, validation, retries.

One trial's proposal:
1. Render the system and per-trial prompts (task, space, compact history, notes, hints).
2. Ask the chat model for JSON matching the space's schema (the provider's JSON-schema mode
   where it has one; a tolerant extraction of the first JSON object otherwise).
3. Validate and snap the config into the space; refuse repeats of tried or running configs.
   An invalid answer is retried with the error shown to the model.
4. Transport errors (timeouts, 429 with Retry-After, 5xx, connection refused) are retried
   with backoff by tenacity.
After the last failed attempt `SuggestionFailed` hands the trial to the fallback sampler; the
attempts, errors, tokens, cost and latency are recorded on the trial either way.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import tenacity

from tunepilot.llm.health import Health
from tunepilot.llm.models import cost_usd
from tunepilot.llm.transport import describe_error as _describe
from tunepilot.llm.transport import is_transient, timed_out, wait_for
from tunepilot.memory import History, readable
from tunepilot.memory.compact import compact
from tunepilot.memory.insights import insights
from tunepilot.memory.parts import INVALID_ANSWER
from tunepilot.memory.repeats import REPEAT_TOLERANCE, same_config
from tunepilot.memory.text import format_params, trial_line
from tunepilot.prompts import render
from tunepilot.proposers.answers import answer_schema, parse_answer
from tunepilot.proposers.sampler_state import GOOD_GROUP
from tunepilot.proposers.suggest import Candidate, Suggestion, SuggestionFailed
from tunepilot.space import SearchSpace

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage


_UNSUPPORTED = re.compile(r"response_format|json_schema|tool|function|not supported|unsupported",
                          re.IGNORECASE)


class TransportError(Exception):
    """The model could not be reached or did not answer in time (after retries)."""


@dataclass(frozen=True)
class Opening:
    """The model's first configs for a new study, from one turn (`LLMSuggester.opening`)."""

    configs: list[dict[str, Any]]
    rationale: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


T = TypeVar("T")


class LLMSuggester:
    """Proposes configs with a langchain chat model.

    Example:
        >>> from langchain_openai import ChatOpenAI
        >>> llm = LLMSuggester(ChatOpenAI(model="gpt-4o-mini"), model_name="gpt-4o-mini",
        ...                    task="Train a CNN on CIFAR-10", n_trials=30)  # doctest: +SKIP
    """

    def __init__(self, model: BaseChatModel, *, model_name: str, task: str, n_trials: int,
                 metric: str = "validation loss", target: float | None = None,
                 attempts: int = 3, transport_attempts: int = 4, max_wait_s: float = 30.0,
                 prices: Mapping[str, tuple[float, float]] | None = None,
                 structured: bool = True, history_k: int = 5, notes: bool = True,
                 first_turn_s: float = 0.0):
        self.model = model
        self.model_name = model_name
        self.task = task
        self.n_trials = n_trials
        self.metric = metric
        self.target = target
        self.attempts = attempts
        self.transport_attempts = transport_attempts
        self.max_wait_s = max_wait_s
        self.prices = prices
        self.history_k = history_k  # best and recent trials shown; a small model wants fewer
        self.notes = notes  # ask for notes; a tiny model's notes are noise that costs tokens
        # What a first turn is expected to cost before one is measured (0: unknown), for the
        # cap on the LLM's share of the search's time.
        self.first_turn_s = first_turn_s
        # Structured-output methods to try in turn: llama.cpp's server refuses json_schema with
        # a 500 but takes function calling and json_mode. A method that answered once stays.
        self._methods: list[str | None] = (["json_schema", "function_calling", "json_mode"]
                                           if structured else []) + [None]
        self._method_worked = False
        self._runnables: dict[tuple[str, str | None, bool, int], Any] = {}
        self.health = Health()
        self.notice: Callable[[str], None] | None = None  # says an outage once, as it starts
        self._insights: tuple[History, SearchSpace, Any] | None = None  # the last ones read

    def __call__(self, space: SearchSpace, history: History) -> Suggestion:
        def proposal(answer: Mapping[str, Any], meta: dict[str, Any]) -> Suggestion:
            config = space.snap(answer["config"])
            _check_new(config, space, history)
            return Suggestion(config, "llm", rationale=_one_line(answer.get("rationale")),
                              notes=_notes(answer.get("notes")), meta=meta)

        return self._converse(space, lambda feedback: self.prompt(space, history, feedback),
                              proposal, review=False, curves=has_curves(history))

    def review(self, space: SearchSpace, history: History, candidate: Candidate, *,
               overrides_left: int) -> Suggestion:
        """The `review` strategy's turn: the model accepts the sampler's `candidate` (the
        suggestion keeps the sampler as proposer) or overrides it with a config of its own."""
        def verdict(answer: Mapping[str, Any], meta: dict[str, Any]) -> Suggestion:
            rationale = _one_line(answer.get("rationale"))
            decision = str(answer.get("decision") or "").strip().lower()
            config = (space.snap(answer["config"]) if decision in ("override", "")
                      and isinstance(answer.get("config"), Mapping) else None)
            if config is None or _same(config, candidate.params, space):
                return Suggestion(dict(candidate.params), "optuna", rationale=rationale,
                                  meta=meta, review=candidate.record("accepted"))
            if not readable(rationale):
                # An override must say why the candidate is worse; one that cannot is not
                # taken (a small model's overrides with "1.1.1," as their reason did worse
                # than the candidates they replaced). The candidate runs, and the record says so.
                return Suggestion(dict(candidate.params), "optuna", rationale=rationale,
                                  meta=meta, review=candidate.record("refused", config))
            _check_new(config, space, history)
            return Suggestion(config, "llm", rationale=rationale, notes=_notes(answer.get("notes")),
                              meta=meta, review=candidate.record("override"))

        return self._converse(
            space, lambda feedback: self.prompt(space, history, feedback, candidate=candidate,
                                                overrides_left=overrides_left),
            verdict, review=True, curves=has_curves(history))

    def opening(self, space: SearchSpace, history: History, k: int,
                queued: Sequence[Mapping[str, Any]] = ()) -> Opening:
        """A new study's zero-shot opening: one turn asks for the first `k` configs, each in
        the space, none equal to another, to a finished trial or to a `queued` one (the space's
        defaults). At most `k` are kept; none is an answer too (the model knows nothing here:
        the sampler draws as usual). Raises `SuggestionFailed` like a proposal turn."""
        def configs(answer: Mapping[str, Any], meta: dict[str, Any]) -> Opening:
            raw = answer.get("configs")
            if not isinstance(raw, list) or not all(isinstance(c, Mapping) for c in raw):
                raise ValueError('"configs" must be a list of configurations, found '
                                 f"{json.dumps(raw)[:200]}")
            taken: list[dict[str, Any]] = []
            for i, c in enumerate(raw[:k]):
                config = space.snap(c)
                _check_new(config, space, history)
                for other in [*queued, *taken]:
                    if _same(config, other, space):
                        raise ValueError(f"configuration {i + 1} repeats another one "
                                         f"({format_params(config, list(space.params))}); "
                                         "make them differ")
                taken.append(config)
            return Opening(taken, _one_line(answer.get("rationale")), meta)

        return self._converse(
            space, lambda feedback: self.prompt(space, history, feedback, opening=k,
                                                queued=queued),
            configs, review=False, curves=False, opening=k)

    def _converse(self, space: SearchSpace, prompt: Callable[[str | None], str],
                  read: Callable[[Mapping[str, Any], dict[str, Any]], T], *,
                  review: bool, curves: bool = True, opening: int = 0) -> T:
        """Asks until `read` accepts an answer (an invalid one goes back with its error)."""
        from langchain_core.messages import HumanMessage, SystemMessage

        start = time.perf_counter()
        meta: dict[str, Any] = {"model": self.model_name, "tokens_in": 0, "tokens_out": 0,
                                "attempts": 0, "errors": []}
        sitting_out = self.health.turn()
        if sitting_out is not None:  # no request at all: costs nothing
            raise SuggestionFailed(sitting_out, self._close(meta, start))
        feedback, last = None, None
        system = self.system_prompt(review, curves, opening)
        for _ in range(1 if self.health.probing else self.attempts):
            meta["attempts"] += 1
            try:
                message = self._invoke(space, [SystemMessage(system),
                                               HumanMessage(prompt(feedback))], meta, review,
                                       opening)
            except TransportError as e:
                meta["errors"].append(str(e))
                if self._next_method(e):
                    continue
                reason = self.health.failed(e)
                if reason.notice and self.notice is not None:
                    self.notice(reason.notice)
                raise SuggestionFailed(reason.cause, self._close(meta, start)) from None
            self._method_worked = True
            if (back := self.health.answered()) and self.notice is not None:
                self.notice(back)
            try:
                answer = parse_answer(message, "configs" if opening else
                                      "decision" if review else "config")
                # `read` fills in meta's latency when it returns: close it first
                suggestion = read(answer, self._close(dict(meta), start))
            except Exception as e:  # whatever the answer broke: an invalid one
                feedback = last = str(e) or type(e).__name__
                meta["errors"].append(f"{INVALID_ANSWER}{feedback}"[:300])
                continue
            self.health.valid()
            return suggestion
        last = last or (meta["errors"][-1] if meta["errors"] else "no answer")
        cause = self.health.no_valid_answer(
            f"no valid answer in {meta['attempts']} attempts; last: {last}"[:400], last[:200])
        raise SuggestionFailed(cause, self._close(meta, start))

    def system_prompt(self, review: bool, curves: bool = True, opening: int = 0) -> str:
        """The system prompt: the rules of a `review` or a proposal turn, or of an `opening`
        of that many configs; the rules for reading learning curves only where the trials
        report curves (`curves`)."""
        return render("system.j2", metric=self.metric, review=review, notes=self.notes,
                      curves=curves, opening=opening)

    def prompt(self, space: SearchSpace, history: History, feedback: str | None = None, *,
               candidate: Candidate | None = None, overrides_left: int = 0, opening: int = 0,
               queued: Sequence[Mapping[str, Any]] = ()) -> str:
        """The per-trial prompt (also used by bench/agent.py to measure its size)."""
        params = list(space.params)
        warm = history.warm_start
        # Once per history: a rejected answer's retry renders the prompt again.
        memo = self._insights
        if memo is None or memo[0] is not history or memo[1] is not space:
            memo = self._insights = (history, space, insights(history, space, history.study))
        found = memo[2]
        return render(
            "trial.j2",
            task=self.task,
            metric=self.metric,
            target=self.target,
            trial_number=len(history),  # the next trial's number: they count from #0
            n_trials=self.n_trials,
            space=[(name, p.describe()) for name, p in space.params.items()],
            fixed=", ".join(f"{k}={v}" for k, v in space.fixed.items()),
            history=compact(history, params, best_k=self.history_k, recent_k=self.history_k,
                            failures_k=max(1, self.history_k - 1)),
            warm_start=warm or None,
            notes=history.notes,
            hints=list(history.hints),
            feedback=feedback,
            # Each fact once: TPE's good group, shown with its candidate, is the best trials'
            # span as the sampler reads it.
            insights=found.lines(ranges=candidate is None or not any(
                line.startswith(GOOD_GROUP) for line in candidate.state)),
            opening=opening,
            queued=[format_params(c, params) for c in queued],
            candidate=None if candidate is None else {
                "sampler": candidate.sampler,
                "config": format_params(candidate.params, params),
                "state": list(candidate.state),
                "overrides_left": overrides_left},
        )

    def _invoke(self, space: SearchSpace, messages: list[BaseMessage],
                meta: dict[str, Any], review: bool = False, opening: int = 0) -> Any:
        """The model's answer: a message, or {"raw", "parsed", "parsing_error"} from a
        structured-output runnable."""
        runnable = self._runnable(space, review, opening)

        def on_retry(state: tenacity.RetryCallState) -> None:
            meta["errors"].append(_describe(state.outcome.exception() if state.outcome
                                            else None))

        retrying = tenacity.Retrying(
            # A time-out is not asked again within the turn: a slow model answers no faster
            # the second time, and three waits made one turn cost three time-outs.
            retry=tenacity.retry_if_exception(lambda e: is_transient(e) and not timed_out(e)),
            # A probe of a model that was failing asks once: an outage costs seconds a turn.
            stop=tenacity.stop_after_attempt(1 if self.health.probing else self.transport_attempts),
            wait=wait_for(self.max_wait_s),
            before_sleep=on_retry,
            reraise=True,
        )
        try:
            result = retrying(runnable.invoke, messages)
        except Exception as e:
            # Whatever the provider's client raised (400, 401, a proxy's error page...), the
            # search goes on: the trial falls back, and the next one asks the model again.
            raise TransportError(_describe(e)) from e
        message = result["raw"] if isinstance(result, dict) else result
        usage = getattr(message, "usage_metadata", None) or {}
        meta["tokens_in"] += int(usage.get("input_tokens", 0))
        meta["tokens_out"] += int(usage.get("output_tokens", 0))
        return result

    def _runnable(self, space: SearchSpace, review: bool = False, opening: int = 0) -> Any:
        method = self._methods[0]
        key = (space.model_dump_json(), method, review, opening)
        if key not in self._runnables:
            runnable: Any = self.model
            if method is not None:
                try:
                    runnable = self.model.with_structured_output(
                        answer_schema(space, notes=self.notes, review=review, opening=opening),
                        method=method,
                        include_raw=True)
                except (NotImplementedError, TypeError, ValueError):
                    runnable = self.model  # no such mode here: tolerant extraction
            self._runnables[key] = runnable
        return self._runnables[key]

    def _next_method(self, error: TransportError) -> bool:
        """After a refusal of the request's form (400, 422, 501, or a server error that names
        the structured-output feature, as llama.cpp's 500 does), never of the server's health
        (other 5xx, time-outs), try the next structured-output method; True if there is one."""
        status = getattr(error.__cause__, "status_code", None)
        names_feature = status == 500 and _UNSUPPORTED.search(str(error.__cause__ or error)) \
            is not None
        if (self._method_worked or len(self._methods) < 2
                or not (status in (400, 422, 501) or names_feature)):
            return False
        self._methods.pop(0)
        return True

    def _close(self, meta: dict[str, Any], start: float) -> dict[str, Any]:
        meta["latency_s"] = round(time.perf_counter() - start, 3)
        meta["cost_usd"] = cost_usd(self.model_name, meta["tokens_in"], meta["tokens_out"],
                                    self.prices)
        return {"llm": meta}


def has_curves(history: History) -> bool:
    """Whether the trials report learning curves (more than one epoch each)."""
    return any(len(t.curve) > 1 for t in history)


def _check_new(config: Mapping[str, Any], space: SearchSpace, history: History) -> None:
    t = history.with_config(config, space)
    if t is not None:
        state = (f"repeats trial #{t.number}, running now" if t.state == "running"
                 else f"repeats trial #{t.number}")
        shown = trial_line(t, list(space.params))
        raise ValueError(f"this configuration {state} (every value equal, or within "
                         f"{REPEAT_TOLERANCE:.0%} of its range: {shown}); propose one that "
                         "differs more")



def _same(a: Mapping[str, Any], b: Mapping[str, Any], space: SearchSpace) -> bool:
    """The same config within the tolerance of a repeat (an "override" that changes nothing
    that matters is an acceptance)."""
    return same_config(dict(b), dict(a), space, REPEAT_TOLERANCE)


def _one_line(text: Any) -> str | None:
    if not text:
        return None
    return " ".join(str(text).split())[:300]


def _notes(text: Any) -> str | None:
    if not text or not str(text).strip():
        return None
    return str(text).strip()[:600]
