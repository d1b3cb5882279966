"""The LLM's health over a run: a circuit breaker, so an outage costs seconds, not the night.

- A turn whose request fails in transport (time-out, refused connection, 5xx after retries)
  falls back to the sampler. After `breaker_after` such turns in a row the model sits out its
  next turns (no request at all), then is probed with one request; each failed probe doubles
  the turns it sits out (up to `max_sit_out`). The first answer closes the breaker.
- A 401/403 (a wrong key) or a 404 (no such model) will not heal by waiting: the model is off
  for the rest of the run, said once.
- A turn that ends with no valid answer (every attempt not JSON, out of the space, a repeat)
  counts the same way: after `breaker_after` such turns in a row the model sits out, then is
  probed with one attempt, at doubling intervals, until it answers validly. A model that
  answers garbage all night costs a request every few turns, not three a trial.
- The first failure of an outage, and the recovery, are said once (`Failure.notice`), as they
  happen; every trial records its own cause.
"""

from __future__ import annotations

from dataclasses import dataclass

from tunepilot.llm.transport import timed_out


@dataclass(frozen=True)
class Failure:
    cause: str  # recorded on the trial as its fallback reason
    notice: str | None = None  # said once on the terminal, when the outage starts


class Health:
    def __init__(self, breaker_after: int = 3, max_sit_out: int = 16):
        self.breaker_after = breaker_after
        self.max_sit_out = max_sit_out
        self.turns = 0  # LLM turns so far in this run
        self.failures = 0  # turns in a row whose request failed in transport
        self.invalid = 0  # turns in a row that ended without a valid answer
        self.resume_at = 0  # the turn the model is asked again
        self.next_sit_out = 1
        self.off: str | None = None  # why the model is off for the run
        self.last: str | None = None
        self.announced = False

    @property
    def probing(self) -> bool:
        """This turn only checks whether the model is back: one request, no retries."""
        return self.failures >= self.breaker_after or self.invalid >= self.breaker_after

    def turn(self) -> str | None:
        """A new LLM turn; the reason to skip it without a request, or None to ask."""
        self.turns += 1
        if self.off is not None:
            return f"LLM off for this run: {self.off}"
        if self.turns < self.resume_at:
            what = "failed" if self.failures else "gave no valid answer"
            return (f"LLM sitting out: {max(self.failures, self.invalid)} turns in a row {what} "
                    f"(last: {self.last}); asked again at its turn {self.resume_at}")
        return None

    def failed(self, error: Exception) -> Failure:
        """The turn's request failed in transport (`error`, after retries)."""
        text = str(error).rstrip(". ")  # "Connection error." reads once, not "error.."
        status = getattr(error.__cause__, "status_code", None)
        if status in (401, 403, 404):
            what = "the API key was refused" if status != 404 else "the model does not exist"
            self.off = (f"{what} ({text}); check OPENAI_API_KEY (or your provider's key) and "
                        "--llm. Optuna proposes every trial")
            return Failure(f"LLM switched off for this run: {self.off}",
                           f"LLM switched off for this run: {self.off}")
        self.failures += 1
        self.last = text
        notice = None
        # A slow model is said as slow (each turn waits one time-out for it, and raising
        # llm_timeout is the fix), not as unreachable.
        what = ("LLM too slow: no answer within llm_timeout" if timed_out(error.__cause__)
                else f"LLM unreachable: {text}")
        if not self.announced:
            self.announced = True
            fix = (" (raise llm_timeout for a slow model)" if timed_out(error.__cause__)
                   else "")
            notice = (f"{what}{fix}. Optuna proposes until it answers again; the search goes "
                      "on")
        if self.failures < self.breaker_after:
            return Failure(what, notice)
        sit_out = self.next_sit_out
        self.resume_at = self.turns + sit_out + 1
        self.next_sit_out = min(2 * sit_out, self.max_sit_out)
        return Failure(f"{what}; {self.failures} turns in a row, so it sits out its next "
                       f"{sit_out}", notice)

    def answered(self) -> str | None:
        """The model answered (valid or not); what to say if that ends an outage."""
        back = self.announced and self.failures > 0
        self.failures = 0
        if self.invalid < self.breaker_after:
            self.resume_at, self.next_sit_out = 0, 1
        self.announced = False
        return "LLM answers again; it proposes from now on" if back else None

    def valid(self) -> None:
        """The turn ended with a valid answer."""
        self.invalid, self.resume_at, self.next_sit_out = 0, 0, 1

    def no_valid_answer(self, cause: str, last: str) -> str:
        """The turn ended with no valid answer (`cause`, `last`: the last answer's error); the
        cause to record, which says when the model sits out."""
        self.invalid += 1
        self.last = last
        if self.invalid < self.breaker_after:
            return cause
        sit_out = self.next_sit_out
        self.resume_at = self.turns + sit_out + 1
        self.next_sit_out = min(2 * sit_out, self.max_sit_out)
        return f"{cause}; {self.invalid} turns in a row, so it sits out its next {sit_out}"
