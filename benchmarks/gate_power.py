"""Power and false ships of the product's own gate (``tuning._selection.choose``) on planted candidates.

Each draw makes a labeled file of ``--search`` search rows and N confirming rows: latent labels, the default judge
and ``--trials`` - 1 trials that see the labels through the same noise, and one trial that sees them better by
``--lift`` Spearman (0: every trial as good as the default, the null). The strongest ``--rescore`` trials on the
search rows (``default``: as many as ``RunSpec.rescore_for`` gives for N) become the candidates, as
``candidate_trials`` takes them, and ``choose`` decides under the default rule (nested gate; ``--screen off``: no
screen, tune's ``--no-screen``; ``every``: no early stopping at all). A row says how often the better trial
shipped, how often anything did, and the judgments the choice made (the search's included). With ``--out`` each
row is written as it finishes (``"complete": false`` until the last), and a rerun of the same command takes the
finished rows from that file and runs the rest.

    python benchmarks/gate_power.py [--rows 300 1000] [--rescore default 4] [--screen on off every] [--draws 60]
        [--lift 0.10 ...] [--json] [--out benchmarks/results/gate_power.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)
import numpy as np

from judgetune.stats import figures
from judgetune.tuning import RunSpec
from judgetune.tuning._racing import SCREEN_KEEP, SCREEN_SHARE
from judgetune.tuning._selection import Candidate, SelectionItems, choose

BASE = 0.5  # the default's weight on the latent label (unit noise): Pearson 0.447, Spearman about 0.43


def weight_for(lift: float) -> float:
    """The weight on the latent label that gives ``lift`` more Spearman than the default's (bivariate normal:
    Spearman = 6/pi asin(r/2))."""
    base = 6 / math.pi * math.asin(BASE / math.sqrt(1 + BASE ** 2) / 2)
    r = 2 * math.sin(math.pi * (base + lift) / 6)
    return r / math.sqrt(1 - r ** 2)


def one_draw(rng: np.random.Generator, spec: RunSpec, weight: float, search: int, confirming: int, trials: int,
             screen: bool, early_stop: bool = True) -> tuple[bool, bool, int]:
    n = search + confirming
    gold = rng.normal(size=n)
    default = BASE * gold + rng.normal(size=n)
    columns = BASE * gold + rng.normal(size=(trials - 1, n))
    columns[0] = weight * gold + rng.normal(size=n)
    on_search = figures(columns[:, :search], gold[:search])
    top = np.argsort(-on_search)[:spec.rescore_for(confirming)]
    candidates = [Candidate(0, {"c": -1}, (1.0, float(figures(default[None, :search], gold[:search])[0]))),
                  *(Candidate(int(j) + 1, {"c": int(j)}, (1.0, float(on_search[j]))) for j in top)]
    chosen, record = choose(spec, candidates, [default, *columns[top]], SelectionItems(gold, None, search, (-4.0, 4.0)),
                            calibrate=False, screen=screen, early_stop=early_stop)
    judged = record["racing"]["judgments"] if record["racing"] else len(candidates) * n  # every row: no racing record
    return candidates[chosen].params["c"] == 0, chosen != 0, int(judged)


def row_key(row: dict) -> tuple:
    return (row["confirming"], row["rescore_rule"], row["screen"], row["early_stop"], row["lift"], row["draws"])


def finished_rows(out: Path | None, head: dict) -> list[dict]:
    """The rows of a partial ``--out`` file written by the same settings (none for a complete or other file)."""
    if out is None or not out.exists():
        return []
    stored = json.loads(out.read_text(encoding="utf-8"))
    same = stored.get("complete") is False and all(stored.get(key) == value for key, value in head.items())
    return list(stored["rows"]) if same else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[300, 1000], help="confirming rows (N)")
    parser.add_argument("--rescore", nargs="+", default=["default", "4"],
                        help="candidates beside the default: a number, or 'default' (RunSpec.rescore_for the rows)")
    parser.add_argument("--screen", nargs="+", choices=("on", "off", "every"), default=["on"],
                        help="the gate's screen (on: the default rule; off: futility looks only; every: every "
                             "candidate judged on every row, no early stopping)")
    parser.add_argument("--draws", type=int, default=60)
    parser.add_argument("--lift", type=float, nargs="+", default=[0.10],
                        help="the better trial's Spearman over the default's (each, then the null)")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--search", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    head = {"rule": "nested (the default)", "trials": args.trials, "search_rows": args.search,
            "screen_share": SCREEN_SHARE, "screen_keep": SCREEN_KEEP, "seed": args.seed}
    rows = finished_rows(args.out, head)
    for confirming in args.rows:
        for rescore in args.rescore:
            for mode in args.screen:
                screen, early = mode == "on", mode != "every"
                spec = RunSpec(name="power", judge="embedding", data="planted.csv", n_trials=args.trials,
                               rescore=None if rescore == "default" else int(rescore))
                for lift in (*args.lift, 0.0):
                    key = (confirming, rescore, screen, early, lift, args.draws)
                    if any(row_key(row) == key for row in rows):
                        print(f"{confirming} rows, rescore {rescore}, screen {mode}, lift {lift:+.2f}: from {args.out}",
                              file=sys.stderr)
                        continue
                    rng, start = np.random.default_rng([args.seed, confirming]), time.time()
                    out = [one_draw(rng, spec, weight_for(lift), args.search, confirming, args.trials, screen, early)
                           for _ in range(args.draws)]
                    rows.append({"confirming": confirming, "rescore": spec.rescore_for(confirming),
                                 "rescore_rule": rescore, "screen": screen, "early_stop": early, "lift": lift,
                                 "draws": args.draws, "ships_better": float(np.mean([o[0] for o in out])),
                                 "ships_any": float(np.mean([o[1] for o in out])),
                                 "judgments": float(np.mean([o[2] for o in out])),
                                 "search_judgments": args.trials * args.search})
                    print(f"{confirming:>5} rows, rescore {spec.rescore_for(confirming):>2}, "
                          f"screen {mode:<5}, lift "
                          f"{lift:+.2f}: better {rows[-1]['ships_better']:.2f}, any {rows[-1]['ships_any']:.2f}, "
                          f"{rows[-1]['judgments']:.0f} judgments ({time.time() - start:.0f} s)", file=sys.stderr,
                          flush=True)
                    if args.out:
                        _results.write_result(args.out, {**head, "complete": False, "rows": rows},
                                              sys.argv)
    payload = {**head, "complete": True, "rows": rows}
    if args.out:
        _results.write_result(args.out, payload, sys.argv)
    if args.json:
        print(json.dumps(payload, indent=1))


if __name__ == "__main__":
    main()
