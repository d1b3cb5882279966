"""Names of what tunepilot stores on Optuna trials and studies (user attrs), in one place.

Only `memory/` uses these names: `records` writes them, `history` reads them.

Everything is JSON, so any Optuna storage (SQLite, PostgreSQL, MySQL, journal file) keeps it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import optuna


def whole(study: optuna.Study) -> optuna.Study:
    """The study itself where Optuna's Hyperband pruner hands samplers a view of one bracket's
    trials (a `_BracketStudy`, which has no user attrs): tunepilot's records are the whole
    study's. Any other study is returned as it is."""
    inner: Any = getattr(study, "_study", None)
    return inner if inner is not None else study

# Per trial.
PROPOSER = "proposer"  # who proposed the config: a Proposer
FALLBACK_REASON = "fallback_reason"  # why the suggester did not propose this trial
ERROR = "error"  # {"kind": ..., "message": ...} for a FAIL trial
TRAIN = "train"  # {"wall_time_s", "samples_per_s", "peak_memory_mb"} of a finished trial
# The config a suggester proposed, written (under the study lock) before Optuna stores the
# params, so other workers see it as running from that instant.
PROPOSED = "proposed"
WARM_START_FROM = "warm_start_from"  # on an enqueued trial: the study whose best config it is
FIXED = "fixed"  # the fixed settings (epochs, seed...) the trial ran with
FLAT_RATIONALE = "rationale"  # the LLM's rationale as a plain string, for optuna-dashboard
FLAT_NOTES = "agent_notes"  # the notes it wrote with this trial, likewise
ASK_TELL = "ask_tell"  # True on a trial run by a person's own loop (Tuner.suggest / report)
# The `review` strategy: {"verdict": "accepted" | "override", "sampler": "TPE", "candidate":
# {...}}: the sampler's candidate the LLM saw, and what it said of it.
REVIEW = "review"
LLM_SKIPPED = "llm_skipped"  # why the LLM was not asked on its turn (its share of wall time)
OPENING_TRIAL = "opening"  # on a trial of the LLM's zero-shot opening: its place in it, from 1
# {"kind": "GP", "s": 0.41}: which sampler drew the trial's config and its own seconds doing it
SAMPLER = "sampler"

Proposer = Literal["llm", "fallback", "optuna", "enqueued", "human"]

# What the LLM said and cost: {"model", "tokens_in", "tokens_out", "cost_usd", "latency_s",
# "attempts", "errors", "rationale", "notes"}.
LLM = "llm"
RATIONALE = "rationale"  # in LLM: its one-sentence reason for the config
NOTES_UPDATE = "notes"  # in LLM: the notes it wrote when proposing this trial

# Per study.
# What the last run set out to reach: {"target", "timeout", "n_trials"} (`Tuner.run`); the
# default search weighs a config's cost where it names a target or a time budget.
GOAL = "tunepilot:goal"
SETTINGS = "tunepilot:settings"  # the run's config (no secrets) so `tune worker` / resume reuse it
STOP = "tunepilot:stop"  # set by the worker that reached the target; every worker stops on it
LAST_STOP = "tunepilot:last_stop"  # why the last run ended, for the report
INTERRUPTED = "tunepilot:interrupted"  # {trial number: "Ctrl-C" | "SIGTERM"} for FAILed trials
NOTES = "tunepilot:notes"  # {"text", "trial"}: the agent's current notes
HINTS = "tunepilot:hints"  # [{"text", "after_trial"}]: what the person told the agent
CHANGES = "tunepilot:changes"  # [{"after_trial", "changes": [...]}]: accepted identity changes
# The LLM's zero-shot opening of a new study: {"asked": k, "taken": n, "model", "error"} (error:
# why it gave no valid answer, None when it did).
OPENING = "tunepilot:opening"
# What `tune calibrate` measured of the study's model when the study first ran with it
# (`memory.calibrations.Calibration`): the model's record starts from it.
CALIBRATION = "tunepilot:calibration"
# The seed of an unseeded study's start-up design (one Latin hypercube for the whole study).
DESIGN_SEED = "tunepilot:design_seed"
WARM_START = "tunepilot:warm_start"  # {"study", "configs": [...], "notes"} from a finished study
