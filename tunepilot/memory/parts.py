"""The typed parts of a trial's record: what the LLM said and cost, the `review` strategy's
verdict, what the trainer measured; and whether a model's rationale reads as a sentence."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tunepilot.memory import attrs

INVALID_ANSWER = "invalid answer: "  # starts the error recorded for an answer that was not valid


@dataclass(frozen=True)
class LLMCall:
    """What the LLM said and cost on one trial (also when the trial fell back)."""

    model: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    latency_s: float | None = None
    attempts: int = 0
    errors: tuple[str, ...] = ()
    rationale: str | None = None  # its one-sentence reason for the config
    notes: str | None = None  # the notes it wrote when proposing this trial

    @classmethod
    def from_attr(cls, value: Any) -> LLMCall | None:
        if not isinstance(value, Mapping) or not value:
            return None
        return cls(model=value.get("model"), tokens_in=int(value.get("tokens_in") or 0),
                   tokens_out=int(value.get("tokens_out") or 0), cost_usd=value.get("cost_usd"),
                   latency_s=value.get("latency_s"), attempts=int(value.get("attempts") or 0),
                   errors=tuple(str(e) for e in value.get("errors") or ()),
                   rationale=value.get(attrs.RATIONALE), notes=value.get(attrs.NOTES_UPDATE))

    @property
    def asked(self) -> bool:
        """A request went out (a model sitting out its breaker's turns sends none)."""
        return self.attempts > 0

    @property
    def answered_invalid(self) -> bool:
        """The model answered, at least once, with an answer that was not valid."""
        return any(e.startswith(INVALID_ANSWER) for e in self.errors)


@dataclass(frozen=True)
class Review:
    """The `review` strategy's record: the sampler's candidate and the LLM's verdict on it."""

    verdict: str  # "accepted", "override", or "refused" (an override not taken: `why`)
    sampler: str  # whose candidate: "TPE", "CMA-ES"...
    candidate: Mapping[str, Any] = field(default_factory=dict)
    why: str | None = None  # why an override was refused; None: it gave no reason in words

    @classmethod
    def from_attr(cls, value: Any) -> Review | None:
        if not isinstance(value, Mapping) or "verdict" not in value:
            return None
        why = value.get("why")
        return cls(str(value["verdict"]), str(value.get("sampler") or "the sampler"),
                   dict(value.get("candidate") or {}), str(why) if why else None)

    @property
    def refusal(self) -> str:
        """Why the override was not taken, in words."""
        return self.why or "it gave no reason in words"


def readable(text: str | None) -> bool:
    """Whether a model's rationale reads as a sentence: at least three words of letters and
    twenty characters. A small model's "1.1.1," or "laser-over-bias-1.0" does not."""
    if not text:
        return False
    words = [w for w in text.split() if sum(c.isalpha() for c in w) >= 2]
    return len(words) >= 3 and len(text.strip()) >= 20


@dataclass(frozen=True)
class TrainInfo:
    """What the trainer measured on a finished trial."""

    wall_time_s: float | None = None
    samples_per_s: float | None = None
    peak_memory_mb: float | None = None
    device: str | None = None
    versions: Mapping[str, str] = field(default_factory=dict)
    # {"epoch", "best_epoch"}: the trial stopped once its loss had not improved for the epoch
    # patience (`--epoch-patience`), or, with "target": true, once an epoch reached the search's
    # target; None when it trained all its epochs
    stopped_early: Mapping[str, int] | None = None

    @classmethod
    def from_attr(cls, value: Any) -> TrainInfo | None:
        if not isinstance(value, Mapping):
            return None
        return cls(wall_time_s=value.get("wall_time_s"), samples_per_s=value.get("samples_per_s"),
                   peak_memory_mb=value.get("peak_memory_mb"), device=value.get("device"),
                   versions=dict(value.get("versions") or {}),
                   stopped_early=value.get("stopped_early"))
