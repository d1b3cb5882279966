"""`tune calibrate`'s verdicts on loopback experts of known quality (`bench/experts.py`), the
default calibration repeated with other seeds, and what it costs.

    python bench/calibration.py --repeats 20 --results bench/results/calibration-20.jsonl

Each repetition is the default calibration (4 tables x S seeds, 20 trials a search, published
and disguised, the expert beside the sampler alone) on seeds of its own (repetition r: seeds
rS to rS + S - 1). The experts serve every table by its space and, for the published tables
(one space), the data set the task text names; `memorizer` knows the published tables' best
configs and guesses on the disguised ones. It prints, per expert, how often each verdict
came, and the wall time, the requests and the tokens a calibration took (the dollars at
gpt-4o-mini's published prices, $0.15 and $0.60 per million input and output tokens).
`--delay 1`: each answer takes a second, as a model behind an API does (a file keeps the rows
of each delay apart).

    python bench/calibration.py --repeats 1 --experts oracle:1%,noisy:0.5 --delay 1
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from experts import Expert, served

from tunepilot.agent import calibrate as cal
from tunepilot.agent.calibration_tables import tables

EXPERTS = ("oracle:1%", "noisy:0.5", "misleading", "garbage", "memorizer")
EXPECTED = {"oracle:1%": "worth", "noisy:0.5": "worth", "misleading": "not worth",
            "garbage": "not worth", "memorizer": "recalls"}
PRICES = (0.15, 0.60)  # gpt-4o-mini, USD per million tokens in and out


def expert_for(kind: str, seeds: range, delay: float = 0.0) -> Expert:
    problems, published = served(tables(cal.DEFAULT_TABLES, seeds))
    return Expert(kind, [], seed=seeds.start, problems=problems, published=published,
                  delay=delay)


def one(kind: str, repeat: int, delay: float = 0.0) -> dict:
    seeds = range(cal.DEFAULT_SEEDS * repeat, cal.DEFAULT_SEEDS * (repeat + 1))
    start = time.perf_counter()
    with expert_for(kind, seeds, delay) as expert:
        report = cal.calibrate(expert.chat_model(), first_seed=seeds.start)
        requests = expert.requests
    mine = [r for r in report.runs if r.with_model]
    return {"expert": kind, "repeat": repeat, "verdict": report.verdict,
            "summary": report.summary, "seconds": round(time.perf_counter() - start, 1),
            "requests": requests, "tokens_in": sum(r.tokens_in for r in mine),
            "tokens_out": sum(r.tokens_out for r in mine), "delay": delay,
            "date": time.strftime("%Y-%m-%d %H:%M")}


def _word(verdict: str) -> str:
    from tunepilot.memory import calibrations as c

    if verdict.startswith(c.RECALLS.split(";")[0]):  # "...; level" or "...; behind" on disguised
        return "recalls"
    return "worth" if verdict == c.WORTH else "not worth"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--experts", default=",".join(EXPERTS))
    parser.add_argument("--results", type=Path)
    parser.add_argument("--delay", type=float, default=0.0,
                        help="seconds each answer takes (a model behind an API: 1)")
    args = parser.parse_args()
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    kept = []
    if args.results and args.results.exists():
        kept = [json.loads(line) for line in args.results.read_text().splitlines() if line]
    kept = [r for r in kept if r.get("delay", 0.0) == args.delay]
    have = {(r["expert"], r["repeat"]) for r in kept}
    for repeat in range(args.repeats):
        for kind in args.experts.split(","):
            if (kind, repeat) in have:
                continue
            row = one(kind, repeat, args.delay)
            kept.append(row)
            print(f"{kind} #{repeat}: {row['verdict']} ({row['seconds']} s)", flush=True)
            if args.results:
                with args.results.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    print("\n| expert | expected | verdicts | right | wall s (median) | requests | tokens | "
          "$ at gpt-4o-mini's prices (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in args.experts.split(","):
        rows = [r for r in kept if r["expert"] == kind]
        if not rows:
            continue
        counts = collections.Counter(r["verdict"] for r in rows)
        right = sum(1 for r in rows if _word(r["verdict"]) == EXPECTED[kind])
        tokens = statistics.median(r["tokens_in"] + r["tokens_out"] for r in rows)
        usd = statistics.median((r["tokens_in"] * PRICES[0] + r["tokens_out"] * PRICES[1]) / 1e6
                                for r in rows)
        print(f"| {kind} | {EXPECTED[kind]} | "
              + "; ".join(f"{v}: {n}" for v, n in counts.most_common())
              + f" | {right} of {len(rows)} | {statistics.median(r['seconds'] for r in rows):.0f}"
              f" | {statistics.median(r['requests'] for r in rows):.0f} | {tokens:,.0f} | "
              f"{usd:.4f} |")


if __name__ == "__main__":
    main()
