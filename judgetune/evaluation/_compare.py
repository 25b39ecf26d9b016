"""Compare frozen judges (or prompt variants) on the same items: metrics with bootstrap intervals, and per pair
the paired differences of their Spearman and MAE with 95% intervals (resamples that draw the same items, whole
questions, for both) and a Wilcoxon signed-rank test on the items' absolute errors."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
from scipy.stats import wilcoxon

from judgetune.datasets import Example, groups_of
from judgetune.evaluation._evaluate import agreement
from judgetune.stats import correlation, difference_record, mae, paired_difference


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


def paired_figures(a: list[float | None], b: list[float | None], examples: list[Example], *, n_resamples: int,
                   seed: int) -> dict[str, Any]:
    """Spearman and MAE of ``a`` minus ``b`` on the items both scored, each with its paired 95% interval."""
    both = [(x, y, e) for x, y, e in zip(a, b, examples) if x is not None and y is not None]
    if len(both) < 3:
        return {"spearman_difference": None, "mae_difference_ci": None}
    xa, xb = [x for x, _, _ in both], [y for _, y, _ in both]
    gold, groups = [e.judgment for _, _, e in both], groups_of([e for _, _, e in both])
    rho = paired_difference(correlation, xa, xb, gold, groups, n_resamples=n_resamples, seed=seed)
    err = paired_difference(mae, xa, xb, gold, groups, n_resamples=n_resamples, seed=seed)
    return {"spearman_difference": difference_record(rho), "mae_difference_ci": difference_record(err)}


def compare_scores(scores: dict[str, list[float | None]], examples: list[Example], *,
                   label_range: tuple[float, float], n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    gold = [e.judgment for e in examples]
    rows = [{"name": name, **agreement(s, examples, label_range, n_resamples=n_resamples, seed=seed)}
            for name, s in scores.items()]
    pairs = [{"a": a, "b": b, **paired_test(scores[a], scores[b], gold),
              **paired_figures(scores[a], scores[b], examples, n_resamples=n_resamples, seed=seed)}
             for a, b in combinations(scores, 2)]
    return {"rows": rows, "pairs": pairs}
