"""How trials and values read as text: one source for the prompt, the terminal, the log, the
notebook and the report."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunepilot.memory.history import TrialRecord


def clip(text: str, n: int) -> str:
    """`text` in at most `n` characters, cut at a word's end with " ..." where it is longer (a
    message cut mid-word reads as a different one)."""
    text = " ".join(str(text).split())
    if len(text) <= n:
        return text
    cut = text[: n - 3]
    space = cut.rfind(" ")
    return (cut[:space] if space > n // 2 else cut).rstrip(" ,;:") + " ..."


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 trial', '2 trials' (`words` where adding an s is wrong)."""
    return f"{n} {word if n == 1 else words or word + 's'}"


def fmt(v: Any, digits: int = 4) -> str:
    """A value as a person reads it: floats to `digits` significant digits."""
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def loss(v: float | None) -> str:
    """A loss to read and compare: 4 decimals, or 4 significant digits where 4 decimals would
    hide it (1.234e-05, not 0.0000); "-" for none."""
    if v is None:
        return "-"
    if v != 0 and math.isfinite(v) and (abs(v) < 0.01 or abs(v) >= 1e6):
        return f"{v:.4g}"
    return f"{v:.4f}"


def format_params(values: Mapping[str, Any], names: Iterable[str] | None = None,
                  digits: int = 4) -> str:
    """``lr=0.003 batch_size=512 ...``, in the order of `names` (default: the mapping's)."""
    keys = list(values) if names is None else [k for k in names if k in values]
    return " ".join(f"{k}={fmt(values[k], digits)}" for k in keys)


def outcome(t: TrialRecord) -> str:
    """``-> 0.4021``, ``-> pruned after epoch 2 at 0.4500``, ``-> FAILED (oom: ...)``."""
    if t.state == "complete" and t.value is not None:
        return f"-> {loss(t.value)}"
    if t.state == "pruned":
        last = f" at {loss(t.curve[-1])}" if t.curve else ""
        return f"-> pruned after epoch {len(t.curve)}{last}"
    if t.state == "fail":
        error = t.error or {}
        return f"-> FAILED ({error.get('kind', 'error')}: {clip(error.get('message', ''), 120)})"
    return f"-> {t.state}"


def trial_line(t: TrialRecord, names: Sequence[str] | None = None) -> str:
    """One trial in one line: number, proposer, config, outcome, curve shape, and what it cost
    (its own seconds and samples per second: batch size, precision and the framework change
    them as much as the loss)."""
    shape = curve_shape(t.curve, pruned=t.state == "pruned")
    proposer = f" [{t.proposer}]" if t.proposer else ""
    return (f"#{t.number}{proposer} {format_params(t.params, names)} {outcome(t)}"
            f"{f' ({shape})' if shape else ''}{cost_words(t)}")


def cost_words(t: TrialRecord) -> str:
    """"; 12.3 s, 45,000 samples/s": a finished trial's own time (the trainer's where it
    measured it) and throughput; "" for one not finished or with no time."""
    if t.state not in ("complete", "pruned", "fail"):
        return ""
    if not t.own_s:
        return ""
    rate = t.train.samples_per_s if t.train is not None else None
    return f"; {t.own_s:.1f} s" + (f", {rate:,.0f} samples/s" if rate else "")


def curve_shape(curve: Sequence[float], pruned: bool = False) -> str:
    """'still falling at the last epoch', 'best at epoch 2 of 4, then rising', 'diverged'...;
    a `pruned` trial's curve ends where the pruner stopped it, not at its last epoch."""
    if not curve:
        return ""
    if any(not math.isfinite(v) for v in curve):
        first = next(i for i, v in enumerate(curve, 1) if not math.isfinite(v))
        return f"diverged at epoch {first}"
    if len(curve) == 1:
        return f"1 epoch: {loss(curve[0])}"
    values = " ".join(f"{v:.3f}" for v in curve[:6]) + (" ..." if len(curve) > 6 else "")
    best = min(range(len(curve)), key=curve.__getitem__)
    spread = max(curve) - min(curve)
    if spread < 1e-3:
        return f"curve {values}: flat"
    if best == len(curve) - 1:
        return f"curve {values}: still falling {'when pruned' if pruned else 'at the last epoch'}"
    return f"curve {values}: best at epoch {best + 1} of {len(curve)}, then rising"
