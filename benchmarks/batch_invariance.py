"""Does an item's score from the embedded model depend on the items decoded beside it?

The in-process engine (llama.cpp) decodes the label reads of several items side by side in one batch
(``JudgeLM.batch_size`` sequences). Floating-point sums in a batched matrix product may be ordered
differently from a batch of one, so an item's logits can move with its micro-batch's composition.
This scores the same items with a rubric judge (no answer cache) alone, in one batch, in a shuffled
batch and in the same batch again, and reports how far the raw scores move, beside what the move
does to the agreement with the human labels.

    nice -n 10 python benchmarks/batch_invariance.py --items 24 --out benchmarks/results/batch_invariance.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)

from judgetune import datasets  # noqa: E402
from judgetune.judges import make_judge  # noqa: E402
from judgetune.lm import load_lm  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="sts2012-msrpar")
    parser.add_argument("--items", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--other-threads", type=int, help="also score alone with this many threads and compare")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    examples, label_range = datasets.load_data(args.data)
    test = [e for e in examples if e.meta.get("split") == "test"] or examples
    items = random.Random(args.seed).sample(test, args.items)
    lm = load_lm("local:smollm2", use_cache=False, n_threads=args.threads)
    judge = make_judge("rubric", lm, train=[], label_range=label_range, params={"k": 0}, seed=args.seed)
    start = time.perf_counter()
    alone = [judge.judge_all([e])[0].score for e in items]
    lm._batcher.batches.clear()
    batched = [v.score for v in judge.judge_all(items)]
    batch_sizes = sorted(set(lm._batcher.batches))  # how many items each decode actually scored together
    again = [v.score for v in judge.judge_all(items)]
    order = list(range(len(items)))
    random.Random(args.seed + 1).shuffle(order)
    shuffled_scores = [v.score for v in judge.judge_all([items[i] for i in order])]
    shuffled = [0.0] * len(items)
    for k, i in enumerate(order):
        shuffled[i] = shuffled_scores[k]
    seconds = time.perf_counter() - start
    labels = [e.label for e in items]
    lm.close()
    other = None
    if args.other_threads:
        other_lm = load_lm("local:smollm2", use_cache=False, n_threads=args.other_threads)
        other_judge = make_judge("rubric", other_lm, train=[], label_range=label_range, params={"k": 0}, seed=args.seed)
        other = [other_judge.judge_all([e])[0].score for e in items]
        other_lm.close()

    def diff(a, b) -> dict:
        d = np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
        return {"items_differing": int((d > 0).sum()), "max_abs": float(d.max()), "mean_abs": float(d.mean())}

    rows = [{"comparison": "batch vs alone", **diff(batched, alone)},
            {"comparison": "shuffled batch vs alone", **diff(shuffled, alone)},
            {"comparison": "batch vs the same batch again", **diff(batched, again)},
            {"comparison": "shuffled batch vs batch", **diff(shuffled, batched)}]
    if other is not None:
        rows.append({"comparison": f"alone, {args.other_threads} threads vs {args.threads}", **diff(other, alone)})
    spearman = {name: float(stats.spearmanr(s, labels).statistic)
                for name, s in (("alone", alone), ("batch", batched), ("shuffled", shuffled))}
    payload = {"meta": _results.meta(sys.argv),
               "judge": "rubric k=0 (scoring_mode logprobs, expected value of the label distribution)",
               "data": args.data, "items": len(items), "threads": args.threads, "batch_size": lm.batch_size,
               "batch_sizes_seen": batch_sizes,
               "rows": rows, "spearman_with_labels": spearman, "seconds": seconds}
    text = json.dumps(payload, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
