"""Instructions a proposer LM writes for a rubric judge, and how many are usable (accepted by the pool:
not empty, not too long, not a repeat), on a catalog set's training items.

    python benchmarks/proposals.py --lm local:qwen1.5b --data sts2012-msrpar --n 9 [--out FILE]

One round as the tuner runs its first: each proposal is written from the criterion, a contrasting pair
of training items (one scored high, one low) and a writing hint. Reflection rounds (the current best
instruction and its misses) need a study's trials and are measured by tuning itself.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)
import optuna  # noqa: E402

from judgetune import datasets  # noqa: E402
from judgetune.lm import ResponseCache, load_lm  # noqa: E402
from judgetune.tuning import InstructionPool, ProposalTask, propose_round  # noqa: E402

CRITERION = "How close in meaning the two sentences are: the same facts and claims, whatever the wording."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", default="local:qwen1.5b")
    parser.add_argument("--data", default="sts2012-msrpar")
    parser.add_argument("--n", type=int, default=9, help="proposals asked for in all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    source = datasets.get_source(args.data)
    train = datasets.split_examples(datasets.load(args.data), seed=args.seed)["train"]
    low, high = source.scale.low, source.scale.high
    task = ProposalTask(CRITERION, ("reference", "answer"), f"a score from {low:g} (worst) to {high:g} (best)")
    lm = load_lm(args.lm, cache=ResponseCache(Path(os.environ.get("TMPDIR", "/tmp")) / f"proposals-{os.getpid()}"))
    pool = InstructionPool(optuna.create_study())
    start = time.perf_counter()
    record = propose_round(pool, lm, round=0, n=args.n, task=task, examples=train, seed=args.seed)
    seconds = time.perf_counter() - start
    lm.close()
    texts = {c.id: c.text for c in pool.candidates()}
    result = {"meta": _results.meta(sys.argv),
              "lm": args.lm, "data": args.data, "criterion": CRITERION, "asked": args.n,
              "usable": len(record["accepted"]), "usable_fraction": len(record["accepted"]) / args.n,
              "seconds_per_proposal": seconds / args.n, "accepted": [texts[i] for i in record["accepted"]],
              "refused": record["refused"]}
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
