"""Whether the order of a choice's options favours a sampler's start: HEBO's first configs on
NAS-Bench-201 (six choices of five operations), with the options in the tables' own order (the
two worst operations, "none" and "avg_pool_3x3", at the ends) and with those two in the middle;
the share each option gets, and how many of the configs reach the table's top-1% loss.

    python bench/choice_order.py [--seeds 20] [--table cifar100]

HEBO's start design (`HEBO.quasi_sample`) rounds a Sobol number in [0, n - 1] to an option's
index, so the two end options get half the draws of the others; a table whose worst options
sit at the ends then hands it good configs. bench/clock.py draws the order per seed for that
reason (bench/log/2026-12-07.md).
"""

from __future__ import annotations

import argparse
import collections
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    import clock
    import torch
    from hebo.design_space.design_space import DesignSpace
    from hebo.optimizers.hebo import HEBO

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--table", default="cifar100", choices=clock.TABLES["nb201"])
    ap.add_argument("--first", type=int, default=10, help="configs of each start design")
    args = ap.parse_args()
    t = clock.table("nb201", args.table)
    ops = list(clock._OPS)
    middle = ["skip_connect", "nor_conv_1x1", "none", "avg_pool_3x3", "nor_conv_3x3"]
    share = float(np.mean([loss <= t.target for loss, _ in t.table.values()]))
    print(f"{args.table}: {share:.2%} of the table at the target; HEBO's first {args.first} "
          f"configs, seeds 0-{args.seeds - 1}")
    for label, order in (("the tables' order", ops), ("none, avg_pool in the middle", middle)):
        counts: collections.Counter[str] = collections.Counter()
        hits = n = 0
        for seed in range(args.seeds):
            np.random.seed(seed)
            torch.manual_seed(seed)
            space = DesignSpace().parse([{"name": f"Op{i}", "type": "cat", "categories": order}
                                         for i in range(6)])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                configs = HEBO(space, scramble_seed=seed).suggest(n_suggestions=args.first)
            for _, row in configs.iterrows():
                config = row.to_dict()
                counts.update(config.values())
                hits += t.lookup(config)[0] <= t.target
                n += 1
        shares = ", ".join(f"{op} {counts[op] / (6 * n):.3f}" for op in order)
        print(f"  {label}: {shares}; at the target {hits} of {n} (expected {share * n:.1f})")


if __name__ == "__main__":
    main()
