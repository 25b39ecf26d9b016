"""Stage 7d, the candidates judged by the LM on the selection items, item by item as the gate asks: the search and
dev items by the judge built on the whole demo pool, each fold of the pool's confirming items by the judge built on
the pool's other folds (cross-fitted: no item is its own demo or in its own fit). The LM's answers are cached, so
an item a candidate already judged in the search costs nothing."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from judgetune.datasets import Example, fold_of
from judgetune.errors import JudgetuneError
from judgetune.stats import FOLDS
from judgetune.tuning._space import judge_for
from judgetune.tuning._spec import RunSpec
from judgetune.tuning._splits import Splits

__all__ = ["CandidateScorer"]
log = logging.getLogger(__name__)


class CandidateScorer:
    """``scorer(j, rows)``: candidate ``j``'s raw scores (NaN where it failed) on the selection items ``rows``
    (indices into ``splits.selection``). Judges are built once per candidate and fold."""

    def __init__(self, params: Sequence[dict[str, Any]], spec: RunSpec, splits: Splits, lm,
                 instructions: Sequence[str], settled: dict[str, Any]) -> None:
        self.params, self.spec, self.splits, self.lm = list(params), spec, splits, lm
        self.instructions, self.settled = list(instructions), settled
        self.items = splits.selection
        self.judges: dict[tuple[int, int], Any] = {}
        pool = splits.demo_pool
        index = {id(e): i for i, e in enumerate(pool)}
        folds = fold_of(len(pool), [e.group_key for e in pool], folds=FOLDS, seed=spec.seed) if len(pool) >= 2 else []
        start = len(splits.search)
        # each selection item's fold: -1 for the search and dev items (the judge on the whole pool)
        self.fold = np.full(len(self.items), -1, dtype=int)
        for i, e in enumerate(splits.confirming_pool):
            self.fold[start + i] = folds[index[id(e)]]

    def __call__(self, j: int, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=int)
        out = np.full(len(rows), np.nan)
        for f in sorted(set(self.fold[rows].tolist())):
            mine = np.flatnonzero(self.fold[rows] == f)
            out[mine] = self._judged(j, f, [self.items[rows[k]] for k in mine])
        return out

    def _judged(self, j: int, fold: int, items: list[Example]) -> list[float]:
        judge = self._judge(j, fold)
        if judge is None:
            return [np.nan] * len(items)
        return [v.score if v.parsed else np.nan for v in judge.judge_all(items)]

    def _judge(self, j: int, fold: int):
        """Candidate ``j``'s judge for the items of ``fold`` (-1: the whole demo pool), None when it cannot be built
        (a fold's pool too small to fit on: its items count as failed)."""
        if (j, fold) in self.judges:
            return self.judges[(j, fold)]
        pool = self.splits.demo_pool
        if fold >= 0:
            folds = fold_of(len(pool), [e.group_key for e in pool], folds=FOLDS, seed=self.spec.seed)
            pool = [e for e, k in zip(pool, folds) if k != fold]
        full = {**self.params[j], **self.splits.data_fixed, **self.settled}
        try:
            judge = judge_for(full, self.spec.judge, self.lm, seed=self.spec.seed, demo_pool=pool,
                              label_range=self.splits.label_range, instructions=self.instructions)
        except (JudgetuneError, ValueError) as err:
            log.warning("%s: a candidate could not be built on %d pool items (%s): its items count as failed",
                        self.spec.name, len(pool), err)
            judge = None
        self.judges[(j, fold)] = judge
        return judge
