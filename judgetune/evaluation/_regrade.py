"""Regrading with a new judge version: two frozen judges' scores of the same items, paired. Labels are
optional (an eval log or an output file has none); with them, the paired difference in error too."""

from __future__ import annotations

from typing import Any

import numpy as np

from judgetune.datasets import Example
from judgetune.stats import correlation, mae, paired_difference

__all__ = ["regrade_scores"]


def _mean(pred: np.ndarray, _gold: np.ndarray) -> float:
    return float(pred.mean())


def _mae(pred: np.ndarray, gold: np.ndarray) -> float:
    return mae(pred, gold)


def regrade_scores(old: list[float | None], new: list[float | None], examples: list[Example], *,
                   n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The change from the ``old`` judge's calibrated scores to the ``new`` one's on the same ``examples``.

    Items either judge failed on are counted (``failed_old``, ``failed_new``) and left out of every figure.
    On the items both scored: the mean score of each, ``mean_difference`` (new - old) with a 95% paired
    bootstrap interval (both judges' scores drawn on the same resampled items, whole groups when items
    have a group), ``mean_absolute_change``, ``changed`` (items whose score moved) and the Spearman
    correlation of the two versions. When every such item has a human label: each version's MAE and
    ``mae_difference`` (new - old; negative means the new judge errs less) with its paired interval.
    """
    if not len(old) == len(new) == len(examples):
        raise ValueError(f"regrade_scores needs scores of the same items ({len(old)}, {len(new)}, {len(examples)})")
    both = [i for i, (a, b) in enumerate(zip(old, new)) if a is not None and b is not None]
    result: dict[str, Any] = {"items": len(examples), "scored_by_both": len(both),
                              "failed_old": sum(s is None for s in old), "failed_new": sum(s is None for s in new)}
    if not both:
        return result
    a = np.array([old[i] for i in both], dtype=float)
    b = np.array([new[i] for i in both], dtype=float)
    kept = [examples[i] for i in both]
    groups = [e.group_key for e in kept] if any(e.group is not None for e in kept) else None
    shift = paired_difference(_mean, b, a, np.zeros(len(both)), groups, n_resamples=n_resamples, seed=seed)
    result.update({"mean_old": float(a.mean()), "mean_new": float(b.mean()), "mean_difference": shift["difference"],
                   "mean_difference_ci": shift["ci"], "mean_absolute_change": float(np.abs(b - a).mean()),
                   "changed": int(np.sum(~np.isclose(a, b, rtol=0.0, atol=1e-12))),
                   "spearman": correlation(b, a) if len(both) > 1 else None})
    gold = [e.judgment for e in kept]
    if all(g is not None for g in gold):
        error = paired_difference(_mae, b, a, gold, groups, n_resamples=n_resamples, seed=seed)
        result.update({"mae_old": mae(a, gold), "mae_new": mae(b, gold), "mae_difference": error["difference"],
                       "mae_difference_ci": error["ci"]})
    return result
