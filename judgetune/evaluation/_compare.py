"""Compare frozen judges (or prompt variants) on the same items: metrics with bootstrap intervals and
a paired significance test per pair (Wilcoxon signed-rank on the items' absolute errors)."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
from scipy.stats import wilcoxon

from judgetune.datasets import Example
from judgetune.evaluation._evaluate import agreement


def paired_test(a: list[float | None], b: list[float | None], gold: list[float]) -> dict[str, Any]:
    """Absolute errors of two judges on the items both scored: mean difference (a - b) and the
    two-sided Wilcoxon signed-rank p-value (None when every difference is zero or too few items)."""
    pairs = [(abs(x - g), abs(y - g)) for x, y, g in zip(a, b, gold) if x is not None and y is not None]
    if not pairs:
        return {"items": 0, "mae_difference": None, "p_value": None}
    ea, eb = np.asarray(pairs).T
    diff = ea - eb
    p = None
    if len(diff) >= 6 and np.any(diff != 0):
        p = float(wilcoxon(ea, eb, zero_method="wilcox").pvalue)
    return {"items": len(pairs), "mae_difference": float(diff.mean()), "p_value": p}


def compare_scores(scores: dict[str, list[float | None]], examples: list[Example], *,
                   label_range: tuple[float, float], n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    gold = [e.judgment for e in examples]
    rows = [{"name": name, **agreement(s, examples, label_range, n_resamples=n_resamples, seed=seed)}
            for name, s in scores.items()]
    pairs = [{"a": a, "b": b, **paired_test(scores[a], scores[b], gold)} for a, b in combinations(scores, 2)]
    return {"rows": rows, "pairs": pairs}
