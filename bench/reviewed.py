"""The engine with a model beside it: `bench/engine.py`'s strategies `model:EXPERT` and
`model+cal:EXPERT`, the product's default with a key (`--strategy auto` is `review` over the
default sampler, with the model's zero-shot opening) on the engine's families, the model an
expert of known quality (`bench/experts.py`, served on loopback HTTP).

    python bench/engine.py --strategies tp:auto,model:misleading,model:oracle:1% --budget 30 \
        --seeds 20 --results bench/results/engine-models.jsonl

`model-once:EXPERT` is a variant of the trust rule, not the product's: no floor, and a slope that
puts a model at no share after one loss (the cost of the one trial a bad opening spends).
`model+cal:EXPERT` starts its record from the expert's `tune calibrate` verdict
(`bench/knowledge.py`'s, kept in `bench/results/calibration-experts.json`); `model:EXPERT` runs
without one, as a user who never calibrated does.

An expert knows a problem's configs ranked by their noise-free loss: HPOBench's table, a
classic or CTR problem's kept pool, a synthetic problem's `RANKED` configs drawn at random (the
problem built afresh for it, so its noise draws are the run's own).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

RANKED = 4096


def ranked_configs(p: Any, seed: int) -> list[dict[str, Any]]:
    """`p`'s configs best first, as an expert knows them."""
    from families import problem
    from knowledge import ranked

    from tunepilot import Categorical, Int

    if p.family == "hpobench":
        return ranked(f"hpobench-{p.name}")[0]
    if p.family in ("classic", "ctr"):
        return ranked(p.name)[0]
    fresh = problem(p.family, p.name, seed, p.default is not None)
    rng = np.random.default_rng([seed, 11])
    drawn = []
    for _ in range(RANKED):
        config: dict[str, Any] = {}
        for name, param in fresh.space.params.items():
            if isinstance(param, Categorical):
                config[name] = param.choices[int(rng.integers(len(param.choices)))]
                continue
            lo, hi = float(param.low), float(param.high)
            u = rng.uniform()
            x = (math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))) if param.log
                 else lo + u * (hi - lo))
            config[name] = int(round(x)) if isinstance(param, Int) else x
        config = fresh.space.snap(config)
        drawn.append((fresh.loss(config)[1], config))
    drawn.sort(key=lambda pair: pair[0])
    return [c for _, c in drawn]


def tuner_kw(strategy: str) -> tuple[str, dict[str, Any]]:
    """`model:EXPERT`, `model+cal:EXPERT` or `model-once:EXPERT` -> (the expert's kind, the
    `Tuner`'s settings)."""
    mode, _, kind = strategy.partition(":")
    if mode not in ("model", "model+cal", "model-once") or not kind:
        raise ValueError(f"unknown strategy {strategy!r}; expected model:EXPERT, "
                         "model+cal:EXPERT or model-once:EXPERT")
    calibration: Any = False
    if mode == "model+cal":
        from knowledge import expert_calibration

        calibration = expert_calibration(kind)
    return kind, {"strategy": "review", "calibration": calibration}


def with_expert(strategy: str, p: Any, seed: int,
                run: Any) -> tuple[Any, Mapping[str, Any]]:
    """Runs `run(llm=..., **tuner settings)` with the strategy's expert serving `p`; what it
    returns, and the expert's requests."""
    from experts import Expert

    from tunepilot.memory import trust

    kind, kw = tuner_kw(strategy)
    shares = trust.FLOOR, trust.SLOPE
    if strategy.startswith("model-once:"):  # a variant: one loss and the model is out
        trust.FLOOR, trust.SLOPE = 0.0, 1.8
    try:
        with Expert(kind, ranked_configs(p, seed), seed) as expert:
            out = run(llm=expert.chat_model(), **kw)
            return out, {"requests": expert.requests}
    finally:
        trust.FLOOR, trust.SLOPE = shares
