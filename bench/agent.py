"""The LLM agent's own cost per trial, apart from the model: prompt size and overhead.

For a study of 10, 100, 1,000 and 10,000 finished trials (on SQLite, as a real run keeps them),
prints the per-trial prompt's size in characters and tokens (tiktoken's cl100k_base; ~4
characters per token when tiktoken is missing), "what the whole history says" section included
(PED-ANOVA importance, best-20% ranges, alerts), and the time the agent adds to a trial:
reading the history from the storage, building the prompt, validating and snapping the answer,
and writing the trial's records. The model itself is a fake that answers at once, so its
latency is excluded.

    python bench/agent.py
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import optuna
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from tunepilot import Categorical, Float, SearchSpace
from tunepilot.memory import History, open_study
from tunepilot.memory.insights import _IMPORTANCE, insights
from tunepilot.proposers.llm_suggester import LLMSuggester
from tunepilot.proposers.samplers import optuna_sampler
from tunepilot.proposers.suggest import AgentSampler

SPACE = SearchSpace.of(lr=Float(1e-5, 1e-1, log=True),
                       batch_size=Categorical([256, 512, 1024, 2048, 4096]),
                       precision=Categorical(["32-true", "bf16-mixed"]), dropout=Float(0.0, 0.5),
                       epochs=3)


def tokens(text: str) -> tuple[int, str]:
    try:
        import tiktoken

        return len(tiktoken.get_encoding("cl100k_base").encode(text)), "tiktoken cl100k_base"
    except Exception:
        return len(text) // 4, "characters / 4"


def fill(study: optuna.Study, n: int) -> None:
    """Adds finished trials with 3-epoch curves, some pruned and failed, until the study holds n
    (written whole with `add_trials`: asking and telling 10,000 trials took most of an hour)."""
    from optuna.trial import TrialState, create_trial

    rng = random.Random(len(study.trials))
    dists = SPACE.distributions()
    batch = []
    for number in range(len(study.trials), n):
        config = {"lr": 10 ** rng.uniform(-5, -1), "dropout": rng.uniform(0.0, 0.45),
                  "batch_size": rng.choice([256, 512, 1024, 2048, 4096]),
                  "precision": rng.choice(["32-true", "bf16-mixed"])}
        loss = 0.4 + abs(config["dropout"] - 0.2) + abs(config["lr"] - 3e-3) * 10
        curve = {epoch: loss + 0.1 / epoch for epoch in (1, 2, 3)}
        if number % 10 == 7:
            error = {"kind": "diverged", "message": "loss is nan at epoch 2"}
            batch.append(create_trial(state=TrialState.FAIL, params=config, distributions=dists,
                                      intermediate_values=curve, user_attrs={"error": error}))
        elif number % 5 == 3:
            batch.append(create_trial(state=TrialState.PRUNED, params=config,
                                      distributions=dists, intermediate_values=curve))
        else:
            batch.append(create_trial(value=loss, params=config, distributions=dists,
                                      intermediate_values=curve))
    study.add_trials(batch)


def main() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # A new config each time: a repeat would be refused and measure the fallback path instead.
    # The filled trials have dropout below 0.45; the answers 0.47 or 0.5 (past the 1% of its
    # range within which two values are one), with lr a factor 1.2 apart.
    answers = [json.dumps({"config": {"lr": 1.1e-5 * 1.2 ** (i // 20), "batch_size": batch,
                                      "precision": precision, "dropout": dropout},
                           "rationale": "near the best"})
               for i in range(50 * 20)
               for batch, precision, dropout in [([256, 512, 1024, 2048, 4096][i % 5],
                                                  ["32-true", "bf16-mixed"][i // 5 % 2],
                                                  [0.47, 0.5][i // 10 % 2])]]
    llm = LLMSuggester(FakeListChatModel(responses=answers), model_name="fake", task=(
        "Train a click-through-rate model with PyTorch Lightning on synthetic data"),
        n_trials=2000, structured=False)
    with tempfile.TemporaryDirectory() as tmp:
        study = open_study(f"sqlite:///{tmp}/bench.db", "bench")
        print(f"{'trials':>7} {'prompt chars':>13} {'prompt tokens':>14} {'agent ms':>9} "
              f"{'history read ms':>16} {'whole ask ms':>13} {'insights cold ms':>17}")
        for n in (10, 100, 1000, 10_000):
            fill(study, n)
            history = History.from_study(study)
            _IMPORTANCE.clear()  # a cold computation: what a trial pays when importance is due
            t0 = time.perf_counter()
            insights(history, SPACE, study)
            cold = time.perf_counter() - t0
            prompt = llm.prompt(SPACE, history)  # the study's insights included
            n_tokens, how = tokens(prompt)
            sampler = AgentSampler(SPACE, llm, optuna_sampler("tpe", 0))
            agent_times: list[float] = []
            sample_relative = sampler.sample_relative

            def timed(*args, _inner=sample_relative, _out=agent_times):
                t0 = time.perf_counter()
                result = _inner(*args)
                _out.append(time.perf_counter() - t0)
                return result

            sampler.sample_relative = timed
            study.sampler = sampler
            totals, reads = [], []
            for _ in range(15):
                t0 = time.perf_counter()
                History.from_study(study)
                reads.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                trial = study.ask()  # AgentSampler: history, prompt, (fake) model, validation,
                for name, p in SPACE.params.items():  # records written to the storage
                    p.suggest(trial, name)
                totals.append(time.perf_counter() - t0)
                attrs = study._storage.get_trial_user_attrs(trial._trial_id)
                assert attrs["proposer"] == "llm", attrs
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            print(f"{n:>7} {len(prompt):>13,} {n_tokens:>14,} "
                  f"{1e3 * statistics.median(agent_times):>9.1f} "
                  f"{1e3 * statistics.median(reads):>16.1f} "
                  f"{1e3 * statistics.median(totals):>13.1f} {1e3 * cold:>17.1f}")
        print(f"\nThe prompt at {n:,} trials:\n{prompt}")
        print(f"(tokens by {how}. agent: the AgentSampler's work per trial: history read, "
              "insights (importance recomputed when the complete trials grew by a tenth), prompt, "
              "the fake model's instant answer, validation, and its records (one transaction); "
              "whole ask: plus Optuna creating the trial and storing each parameter. Medians of "
              "15 trials.)")


if __name__ == "__main__":
    main()
