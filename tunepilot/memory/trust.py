"""The LLM's track record in a study, and the share of turns it has earned.

Read from the study's trials alone, so it survives a resume and every worker reads the same.

The rule (tests/test_trust.py):

- Judged: each trial the LLM proposed (an override of the sampler's candidate, or a proposal of
  its own), once finished; and each turn that ended with no valid answer from it.
- A complete trial *wins* when its loss is under the median loss of the sampler's own trials
  nearest to it in trial number (up to `PEERS`, before or after it; complete or pruned, a
  pruned one counting as worse than any complete one), that is, when it beat the sampler's
  typical trial of the same stage of the search. A tie is not a win: on a plateau (a classifier
  that predicts the majority class over most of the space) the worst configs tie with the
  median, and a model that proposed them earned most of the turns (bench/README.md). It waits
  to be judged until `MIN_PEERS` sampler trials have finished.
- A pruned or failed LLM trial loses (the pruner found it below the median at its step, or it
  crashed or diverged), and so does a turn with no valid answer. An outage of the model's
  server is not the model's judgement and does not count.
- The zero-shot opening (the first configs of a new study, from one turn) is judged trial by
  trial like any LLM trial: against the sampler's first trials, the draws it replaced. An
  opening turn with no valid answer loses once, as a proposal turn does.
- Score: (wins + 1) / (judged + 2), so a model with no record starts at 1/2. A model that
  `tune calibrate` measured starts from that record instead (`calibrations.Calibration.prior`:
  its wins on disguised tables, worth a few judged trials; none where it did not beat the
  sampler, so it starts at the floor).
- Share of the turns (in `review`, of the candidates it may override): `EVEN_SHARE` at a score
  of 1/2 (the published sweet spot of 30%), moving with the score by `SLOPE`, between `FLOOR`
  (a probe now and then, so a model that gets better is noticed) and `CEILING` (a model that
  keeps winning is given most turns). Two losses put a fresh model at the floor; 6 wins of 7
  give it 65%; ten wins in a row, the ceiling.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tunepilot.memory.calibrations import Calibration
from tunepilot.memory.history import History, TrialRecord

PEERS = 10
MIN_PEERS = 3
FLOOR, EVEN_SHARE, CEILING, SLOPE = 0.05, 0.3, 0.8, 1.25
_SAMPLER = ("optuna", "fallback")
_INVALID = "no valid answer"


@dataclass(frozen=True)
class Judged:
    number: int
    won: bool
    why: str  # "beat the median of #3 #5 #6 (0.41)", "pruned", "failed", "no valid answer"


@dataclass(frozen=True)
class TrackRecord:
    judged: tuple[Judged, ...] = ()
    pending: int = 0  # LLM trials finished or running, not judged yet
    calibration: Calibration | None = None  # where the record starts from, if calibrated

    @property
    def wins(self) -> int:
        return sum(1 for j in self.judged if j.won)

    @property
    def invalid(self) -> int:
        return sum(1 for j in self.judged if j.why == _INVALID)

    @property
    def score(self) -> float:
        """(wins + 1) / (judged + 2), the calibration's record counted as judged trials."""
        prior_wins, prior_judged = self.calibration.prior() if self.calibration else (0.0, 0.0)
        return (self.wins + prior_wins + 1) / (len(self.judged) + prior_judged + 2)

    @property
    def share(self) -> float:
        """The share of turns the record has earned, in [FLOOR, CEILING]."""
        return min(CEILING, max(FLOOR, EVEN_SHARE + SLOPE * (self.score - 0.5)))

    def line(self, share: bool = True, of: str = "overrides") -> str | None:
        """The record for a person, or None before the LLM proposed anything; `share`: with
        the share it earns `of` the overrides (`review`) or of the trials (`hybrid`)."""
        trials = len(self.judged) - self.invalid
        if not self.judged and not self.pending:
            if self.calibration is None:
                return None
            return (f"LLM record: none yet; {self.calibration.line()}"
                    + (f"; it starts with {self.share:.0%} of the {of}" if share else ""))
        parts = [f"LLM record: {trials} of its trials judged, {self.wins} beat the sampler's "
                 "typical trial"]
        if self.calibration is not None:
            parts.append(f"calibrated ({self.calibration.date}): "
                         f"{self.calibration.verdict}")
        if self.invalid:
            parts.append(f"{self.invalid} turn{'s' if self.invalid != 1 else ''} with no valid "
                         "answer")
        if self.pending:
            parts.append(f"{self.pending} not judged yet")
        text = "; ".join(parts)
        return text + (f"; its record earns it {self.share:.0%} of the {of}" if share else "")


def record(history: History) -> TrackRecord:
    """The LLM's track record in `history` (see the module's docstring for the rule)."""
    peers = [t for t in history if t.proposer in _SAMPLER and t.state in ("complete", "pruned")]
    numbers = [t.number for t in peers]
    judged: list[Judged] = []
    pending = 0
    if (history.opening.get("error") or "").startswith(_INVALID):
        judged.append(Judged(-1, False, _INVALID))
    for t in history:
        if t.proposer == "fallback" and (t.fallback_reason or "").startswith(_INVALID):
            judged.append(Judged(t.number, False, _INVALID))
        elif t.proposer == "llm":
            verdict = _judge(t, peers, numbers)
            if verdict is None:
                pending += 1
            else:
                judged.append(verdict)
    return TrackRecord(tuple(judged), pending, history.calibration)


def _nearest(peers: Sequence[TrialRecord], numbers: Sequence[int],
             number: int) -> list[TrialRecord]:
    """Up to PEERS of `peers` (in number order; `numbers` theirs) nearest to trial `number`,
    the earlier first on a tie."""
    right = bisect.bisect_left(numbers, number)
    left = right - 1
    right += right < len(peers) and peers[right].number == number
    near: list[TrialRecord] = []
    while len(near) < PEERS and (left >= 0 or right < len(peers)):
        if right >= len(peers) or (left >= 0 and
                                    number - peers[left].number <= peers[right].number - number):
            near.append(peers[left])
            left -= 1
        else:
            near.append(peers[right])
            right += 1
    return near


def _judge(t: TrialRecord, peers: Sequence[TrialRecord],
           numbers: Sequence[int]) -> Judged | None:
    if t.state == "fail":
        return Judged(t.number, False, "failed")
    if t.state == "pruned":
        return Judged(t.number, False, "pruned")
    if t.state != "complete" or t.value is None:
        return None
    near = _nearest(peers, numbers, t.number)
    if len(near) < MIN_PEERS:
        return None
    values = [p.value if p.state == "complete" and p.value is not None else math.inf
              for p in near]
    median = statistics.median(values)
    return Judged(t.number, t.value < median,
                  f"{'beat' if t.value < median else 'lost to'} the median ({median:.4g}) of "
                  + " ".join(f"#{p.number}" for p in sorted(near, key=lambda p: p.number)))
