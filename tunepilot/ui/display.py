"""What a person sees of a search on a terminal and in its log.

Each is an `Observer` of the run loop: `PlainDisplay` prints one line per trial (logs, CI,
pipes); `LiveDisplay` keeps a small live panel on a terminal and prints a line per trial above
it, so the output stays readable however long the search runs; `FileLog` is the study's log.
Text from a model or a trainer is printed as text, never as rich markup.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunepilot.agent.observer import Observer
from tunepilot.memory.text import clip, format_params, loss, plural
from tunepilot.ui.clock import framework_lines

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from tunepilot.agent.results import TuneResult
    from tunepilot.memory import History, TrialRecord


def trial_line(record: TrialRecord, history: History) -> str:
    best = history.best_trial
    value = loss(record.value) if record.value is not None else (
        loss(record.curve[-1]) if record.curve else "-")
    mark = "*" if best is not None and best.number == record.number else " "
    state = state_label(record)
    stopped = stopped_early(record)
    tail = f"  {stopped}" if stopped else ""
    if record.error:
        tail = (f"  {record.error.get('kind')}: {clip(record.error.get('message', ''), 80)}"
                f"{record.where}")
    duration = seconds(record)
    best_txt = f"best {loss(best.value)} (#{best.number})" if best else "best -"
    who = record.proposer or "?"
    if who == "fallback":
        who = f"fallback: {short_cause(record.fallback_reason)}"
    elif record.llm_skipped:
        who = f"{who}: over the LLM's time share"
    return (f"trial {record.number:>3} {mark} {state:<10} {value:>8}   {best_txt:<18} "
            f"[{who}] {duration}  {format_params(record.params, digits=3)}{tail}")


def state_label(record: TrialRecord) -> str:
    """The trial's state; a pruned one's with the epoch it was pruned after (`pruned@2`)."""
    return f"pruned@{len(record.curve)}" if record.state == "pruned" else record.state


def stopped_early(record: TrialRecord) -> str | None:
    """'stopped at epoch 2, best epoch 1' for a trial its epoch patience or the target ended."""
    stop = record.train.stopped_early if record.train is not None else None
    if not stop:
        return None
    return (f"stopped at epoch {stop['epoch']}: the target reached" if stop.get("target")
            else f"stopped at epoch {stop['epoch']}, best epoch {stop['best_epoch']}")


def short_cause(reason: str | None) -> str:
    """Why the sampler took the LLM's turn, in a few words for the trial's line ("not JSON",
    "lr=50 out of range", "unreachable"); the log and `tune show` keep the whole reason."""
    text = reason or ""
    for start, words in (("LLM sitting out", "sitting out"), ("LLM switched off", "LLM off"),
                         ("LLM off", "LLM off"), ("LLM unreachable", "unreachable"),
                         ("LLM too slow", "too slow")):
        if text.startswith(start):
            return words
    text = text.split("; last: ", 1)[-1]
    if "not a JSON object" in text:
        return "not JSON"
    if text.startswith("the answer must be"):
        return "not {config, rationale}"
    if found := re.search(r"repeats trial #(\d+)", text):
        return f"repeats #{found[1]}"
    if found := re.match(r"'(\w+)': (\S+) is outside", text):
        return f"{found[1]}={found[2][:12]} out of range"
    if found := re.match(r"'(\w+)': (\S+)", text):
        return f"{found[1]}={found[2][:12]} invalid"
    if found := re.match(r"'(\w+)' is missing", text):
        return f"{found[1]} missing"
    return " ".join(text.split()[:4])[:32]


def seconds(record: TrialRecord) -> str:
    """The trial's own time (the trainer's), what the cost model expected of it where one chose
    it, and the LLM's turn where it took a second or more: `  0.4s (~0.5s expected) +25.0s
    LLM`; the whole trial's time where the trainer measured none."""
    expected = (record.sampler or {}).get("expected_s")
    said = f" (~{expected:.1f}s expected)" if expected is not None else ""
    train = record.train.wall_time_s if record.train is not None else None
    if train is None:
        return f"{record.duration_s:5.1f}s{said}" if record.duration_s is not None else ""
    llm = record.llm.latency_s if record.llm is not None else None
    return f"{train:5.1f}s{said}" + (f" +{llm:.1f}s LLM" if llm is not None and llm >= 1.0
                                     else "")


def why_line(record: TrialRecord) -> str | None:
    """The LLM's part in a trial, for the line under it: what it did (accepted or overrode the
    sampler's candidate, proposed, fell back, sat out) and its reason when it gave one in words."""
    from tunepilot.memory import readable

    if record.llm is None or record.proposer == "fallback":  # an outage is said once, as a notice
        return None
    if record.review is not None:
        sampler, verdict = record.review.sampler, record.review.verdict
        if verdict == "refused":
            return (f"LLM tried to override {sampler}'s candidate, refused ("
                    f"{record.review.refusal}): the candidate ran")
        what = (f"LLM accepted {sampler}'s candidate" if verdict == "accepted" else
                f"LLM overrode {sampler}'s candidate "
                f"({format_params(record.review.candidate, list(record.params), digits=3)})")
    else:
        what = "LLM proposed it"
    # A rationale that is not a sentence is not shown here (the log keeps it as written).
    return f"{what}: {record.rationale}" if readable(record.rationale) else what


def summary_lines(result: TuneResult) -> list[str]:
    """What a finished run says: why it stopped, the trials, the best config."""
    history = result.history
    states = {s: sum(t.state == s for t in history) for s in ("complete", "pruned", "fail")}
    lines = [f"\nstopped: {result.stop_reason}",
             f"trials: {result.n_finished} finished in study {result.study_name} "
             f"({result.n_new} new): {states['complete']} complete, {states['pruned']} pruned, "
             f"{states['fail']} failed"]
    if result.best_params is not None:
        lines += [f"best: trial {result.best_number}, validation loss {loss(result.best_value)}",
                  f"  {format_params(result.best_params, digits=3)}"]
    else:
        lines.append("best: no trial completed yet")
    lines += [line for line in (_llm_line(history), record_line(history)) if line]
    return lines + framework_lines(history)


def record_line(history: History) -> str | None:
    """The LLM's track record (`tunepilot.memory.trust`), or None before it proposed."""
    from tunepilot.memory import trust

    if any(t.review for t in history):
        return trust.record(history).line(share=True, of="overrides")
    hybrid = (history.settings.get("config") or {}).get("strategy") == "hybrid"
    return trust.record(history).line(share=hybrid, of="trials")


def _llm_line(history: History) -> str | None:
    """How the LLM spent its turns, counted from the records: asked, accepted / overrode, fell
    back (unreachable, or no valid answer), sat out (its breaker), skipped past its time share."""
    asked = [t for t in history if t.llm and t.llm.asked]
    sat_out = sum(1 for t in history if t.llm and not t.llm.asked)
    skipped = sum(1 for t in history if t.llm_skipped)
    if not asked and not skipped and not sat_out:
        return None
    waited, wall = history.llm_seconds(), history.wall_time_s()
    share = f", {waited / wall:.0%} of the wall time" if wall > 0 else ""
    line = (f"LLM: asked on {plural(len(asked), 'trial')} "
            f"({waited:.0f} s{share})")
    reviews = [t.review for t in asked if t.review]
    if reviews:
        over = sum(1 for r in reviews if r.verdict == "override")
        refused = sum(1 for r in reviews if r.verdict == "refused")
        accepted = len(reviews) - over - refused
        line += (f"; accepted {plural(accepted, 'candidate')}, overrode {over}"
                 + (f", {plural(refused, 'override')} refused" if refused else ""))
    fell_back = [t for t in asked if t.proposer == "fallback"]
    invalid = sum(1 for t in fell_back if t.llm and t.llm.answered_invalid)
    if len(fell_back) > invalid:
        line += f"; {len(fell_back) - invalid} fell back to the sampler (unreachable)"
    if invalid:
        line += f"; {invalid} fell back to the sampler (no valid answer)"
    if sat_out:
        line += (f"; sat out {plural(sat_out, 'turn')} after failures in a row (no request; "
                 "the sampler took them)")
    if skipped:
        line += (f"; {plural(skipped, 'turn')} went to the sampler past its "
                 "share of the wall time "
                 "(llm_time_share)")
    return line


def trials_table(history: History, study: str, limit: int = 30) -> Table:
    """The trials as a table, best first, with who proposed each and why (`tune show`).
    Every cell is a `Text`: a rationale or an error holding "[/bold]" prints as it is."""
    from rich.table import Table
    from rich.text import Text

    order = {"complete": 0, "pruned": 1, "running": 2, "waiting": 3, "fail": 4}
    rows = sorted(history, key=lambda t: (order.get(t.state, 5),
                                          t.value if t.value is not None else float("inf"),
                                          t.number))
    table = Table(title=Text(f"study {study}: {len(history)} trials"))
    for col in ("#", "state", "val loss", "by", "time", "config", "note"):
        table.add_column(col, overflow="fold")
    for t in rows[:limit]:
        value = t.value if t.value is not None else (t.curve[-1] if t.curve else None)
        note = "; ".join(n for n in (t.why.removesuffix(t.where), stopped_early(t)) if n)
        cells = (str(t.number), state_label(t), loss(value) if value is not None else "-",
                 t.proposer or "?", seconds(t).strip() or "-",
                 format_params(t.params, digits=3),
                 clip(note, 60) + t.where)  # the place of an error whole: it is what to open
        table.add_row(*(Text(c) for c in cells))
    return table


def pace_line(record: TrialRecord, left: int) -> str | None:
    """After the run's first trial: how long the rest may take at its pace, so a slow machine
    says so at once rather than after the night."""
    if record.duration_s is None or left < 2:
        return None
    total = record.duration_s * left
    eta = f"{total / 60:.0f} min" if total >= 90 else f"{total:.0f} s"
    return (f"pace: trial {record.number} took {record.duration_s:.1f} s; the {left} trials "
            f"left would take about {eta} at this pace (--timeout bounds the wall time)")


def done_words(history: History) -> str:
    """The study's finished trials as a run resumes them: "2 trials done" ("" for none)."""
    done = len(history.finished())
    return f"{plural(done, 'trial')} done" if done else ""


class PlainDisplay(Observer):
    """One line per trial, for logs and pipes."""

    def __init__(self, console: Console | None = None, prefix: str = ""):
        from rich.console import Console

        self.console = console or Console(highlight=False, soft_wrap=True)
        self.prefix = prefix  # e.g. "[w2] ": which worker printed the line
        self._said_skip = False
        self._waiting_for: list[int] | None = None
        self._paced = False
        self._budget = 0

    def start(self, study: str, n_trials: int, history: History) -> None:
        self._budget = n_trials
        done = done_words(history)
        resumed = f" (resuming: {done})" if done else ""
        self.console.print(f"{self.prefix}study {study}: up to {n_trials} trials{resumed}",
                           markup=False)

    def trial_end(self, record: TrialRecord | None, history: History) -> None:
        if record is not None:
            self.console.print(self.prefix + trial_line(record, history), markup=False)
            why = why_line(record) or self._skipped_once(record)
            if why:
                self.console.print(f"{self.prefix}      {clip(why, 160)}", markup=False)
            # What the study's budget has left, counted as the loop counts it (a killed
            # trial's queued retry takes its place, not a slot of its own).
            left = self._budget - history.budget_used()
            pace = None if self._paced else pace_line(record, left)
            if pace:
                self._paced = True
                self.console.print(f"{self.prefix}{pace}", markup=False)

    def _skipped_once(self, record: TrialRecord) -> str | None:
        """The first time the sampler takes the LLM's turn for its time share (the summary
        counts them all; the log has each)."""
        if not record.llm_skipped or self._said_skip:
            return None
        self._said_skip = True
        return ("the sampler takes the LLM's turns while a turn would take the LLM past its "
                "share of the wall time (--llm-time-share); said once, counted in the summary")

    def say(self, text: str) -> None:
        self.console.print(f"{self.prefix}{text}", markup=False)

    def notice(self, text: str) -> None:
        self.console.print(f"{self.prefix}! {text}", markup=False)

    def waiting(self, running: list[int]) -> None:
        if running != self._waiting_for:  # once per change, not per poll
            self._waiting_for = running
            self.console.print(f"{self.prefix}budget taken; waiting for running trials "
                               f"{', '.join(f'#{n}' for n in running)} (if one's worker "
                               "dies, its trial runs again here)",
                               markup=False)


class LiveDisplay(PlainDisplay):
    """A live status line (trial n of N, best so far, current epoch) under the trial lines."""

    def __init__(self, console: Console | None = None):
        super().__init__(console)
        from rich.live import Live

        self._live = Live(console=self.console, refresh_per_second=4, transient=True)
        self._n_trials = 0
        self._done = 0
        self._best = "-"
        self._current = ""
        self._started = 0.0

    def start(self, study: str, n_trials: int, history: History) -> None:
        super().start(study, n_trials, history)
        self._n_trials = n_trials
        self._done = len(history.finished())
        best = history.best_trial
        self._best = f"{loss(best.value)} (#{best.number})" if best else "-"
        self._live.start()
        self._refresh()

    def trial_start(self, number: int, config: Mapping[str, Any], proposer: str | None) -> None:
        self._started = time.monotonic()
        self._current = f"trial {number} [{proposer or '?'}] {format_params(config, digits=3)}"
        self._refresh()

    def epoch(self, number: int, epoch: int, val_loss: float) -> None:
        elapsed = time.monotonic() - self._started
        self._current = (f"trial {number}: epoch {epoch}, val loss {loss(val_loss)}, "
                         f"{elapsed:.1f}s")
        self._refresh()

    def trial_end(self, record: TrialRecord | None, history: History) -> None:
        self._done = len(history.finished())
        best = history.best_trial
        self._best = f"{loss(best.value)} (#{best.number})" if best else "-"
        self._current = ""
        if record is not None:
            self._live.console.print(trial_line(record, history), markup=False)
            why = why_line(record) or self._skipped_once(record)
            if why:
                self._live.console.print(f"      {clip(why, 160)}", markup=False)
        self._refresh()

    def finish(self, result: TuneResult) -> None:
        self._live.stop()

    def _refresh(self) -> None:
        from rich.text import Text

        line = f"[{self._done}/{self._n_trials}] best {self._best}"
        if self._current:
            line += f"  |  {self._current}"
        self._live.update(Text(line, style="bold cyan", overflow="ellipsis", no_wrap=True))


class FileLog(Observer):
    """The study's log file: who proposed each trial and why, its result or error."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _write(self, line: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with self.path.open("a", encoding="utf-8") as f:
            f.write(f"{stamp} {line}\n")

    def start(self, study: str, n_trials: int, history: History) -> None:
        self._write(f"run starts: study {study}, up to {n_trials} trials; "
                    f"{done_words(history) or 'none done'}")

    def say(self, text: str) -> None:
        self._write(text)

    def notice(self, text: str) -> None:
        self._write(f"! {text}")

    def trial_end(self, record: TrialRecord | None, history: History) -> None:
        if record is None:
            return
        self._write(trial_line(record, history))
        what = why_line(record)
        if what:
            self._write(f"    {what}")
        elif record.fallback_reason:
            self._write(f"    fell back to the sampler: {record.fallback_reason}")
        elif record.llm_skipped:
            self._write(f"    {record.llm_skipped}")
        # Everything a model wrote stays in the log, readable or not.
        if record.rationale:
            self._write(f"    rationale as written: {record.rationale}")

    def finish(self, result: TuneResult) -> None:
        best = (f"best trial {result.best_number} ({result.best_value:.5f})"
                if result.best_value is not None else "no trial completed")
        self._write(f"run ends: {result.stop_reason}; {best}")


def console_display(console: Console | None = None) -> Observer:
    """A live panel on a terminal, plain lines otherwise."""
    from rich.console import Console

    console = console or Console(highlight=False, soft_wrap=True)
    return LiveDisplay(console) if console.is_terminal else PlainDisplay(console)
