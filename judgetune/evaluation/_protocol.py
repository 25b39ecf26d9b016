"""LINKAGE's evaluation protocol (the reference draw lives with the judges: ``judges.draw_references``)
and cross-fitted evaluation by question.

``cross_fit`` fits a judge on the questions of k-1 folds and scores the held-out fold, so every
question is scored by a judge that never saw it, its references or its answers.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from judgetune.datasets import Example
from judgetune.judges import PROTOCOLS, Judge, ProtocolDraw, Verdict, apply_protocol, draw_references

__all__ = ["PROTOCOLS", "ProtocolDraw", "apply_protocol", "cross_fit", "draw_references", "question_folds"]


def question_folds(groups: Sequence[str], k: int, *, seed: int = 0) -> list[list[str]]:
    """The distinct groups dealt into ``k`` folds in a seeded order.

    Not scikit-learn's ``GroupKFold(shuffle=True)``: that one balances folds by item count, which moves
    every cross-fitted figure published from these folds (docs/metrics.md); dealing groups keeps them."""
    keys = sorted(set(groups))
    if len(keys) < k:
        raise ValueError(f"{len(keys)} questions cannot fill {k} folds")
    random.Random(seed).shuffle(keys)
    return [keys[i::k] for i in range(k)]


def cross_fit(make_judge: Callable[[Sequence[Example]], Judge], examples: Sequence[Example], *, folds: int = 5,
              seed: int = 0) -> list[Verdict]:
    """A Verdict per example from a judge fitted without its question: ``make_judge(train)`` must
    return a judge fitted on ``train`` alone; it then judges the held-out fold's examples."""
    verdicts: list[Verdict | None] = [None] * len(examples)
    for held_out in question_folds([e.group_key for e in examples], folds, seed=seed):
        held = set(held_out)
        train = [e for e in examples if e.group_key not in held]
        test_index = [i for i, e in enumerate(examples) if e.group_key in held]
        judge = make_judge(train)
        for i, verdict in zip(test_index, judge.judge_all([examples[i] for i in test_index])):
            verdicts[i] = verdict
    return verdicts  # type: ignore[return-value]
