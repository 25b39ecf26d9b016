"""How often the demo could prove a panel's gain: on the SmolLM2 likelihood MSRpar score matrix, draws of the
demo's sizes (56 labeled items to standardize the panel on, 80 test items), the panel of every candidate against
the default on the test items, the Spearman difference's 95% interval from `judgetune.stats.paired_difference` (the
interval `metrics.gain` reports for a shipped judge); the share of draws whose lower bound is above zero. No LM time
(the demo's gain_low).

    python benchmarks/demo_power.py [--draws 100] [--labels 56] [--test 80] [--seed 0]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from _matrix import load_matrix, panel_row

from judgetune.stats import correlation, paired_difference

MATRIX = Path(__file__).parent / "results" / "matrix-smollm2-likelihood-sts2012-msrpar.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--labels", type=int, default=56)
    parser.add_argument("--test", type=int, default=80)
    parser.add_argument("--resamples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    m = load_matrix(MATRIX)
    rng = np.random.default_rng(args.seed)
    lows = []
    for _ in range(args.draws):
        perm = rng.permutation(m["n"])
        lab, test = perm[:args.labels], perm[args.labels:args.labels + args.test]
        panel, default, gold = panel_row(m["scores"], lab)[test], m["scores"][0][test], m["gold"][test]
        diff = paired_difference(correlation, panel, default, gold, n_resamples=args.resamples,
                                 seed=int(rng.integers(2**31)))
        lows.append(diff["ci"][0])
    lows = np.array(lows)
    print(f"panel vs default on {args.test} test items ({args.labels} labels, {args.draws} draws): lower bound above "
          f"zero in {int((lows > 0).sum())} draws; median lower bound {np.median(lows):+.3f}")


if __name__ == "__main__":
    main()
