"""Honest selection: trial MAE through the calibrator kind that will ship (cross-fitted), and the
Pareto front re-scored on dev before one candidate is picked.

A trial's MAE is measured on out-of-fold predictions: the raw scores of each fold are mapped by a
calibrator fitted on the other folds, for every kind ``fit_calibrator`` chooses from, and the kind
with the lowest error counts (the same folds and rule as ``fit_calibrator``, so the figure is the
cross-validated MAE of the calibrator the frozen judge would get on these items).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.model_selection import KFold

from judgetune.calibration import IsotonicCalibrator, LinearCalibrator

CALIBRATOR_KINDS = {"isotonic": IsotonicCalibrator, "linear": LinearCalibrator}


def cross_fitted(raw: Sequence[float], gold: Sequence[float], *, label_range: tuple[float, float], folds: int = 5,
                 seed: int = 0) -> tuple[np.ndarray, str]:
    """Out-of-fold calibrated predictions of the calibrator kind with the lowest cross-validated MAE, and that kind.

    Raises:
        ValueError: fewer than 4 pairs.
    """
    x, y = np.asarray(raw, dtype=float), np.asarray(gold, dtype=float)
    if len(x) != len(y) or len(x) < 4:
        raise ValueError(f"need at least 4 (raw, human) pairs of equal length, got {len(x)}")
    best: tuple[float, str, np.ndarray] | None = None
    for kind, make in CALIBRATOR_KINDS.items():
        pred = np.empty(len(x))
        for train, test in KFold(n_splits=min(folds, len(x)), shuffle=True, random_state=seed).split(x):
            pred[test] = make(label_range).fit(x[train], y[train]).predict(x[test])
        mae = float(np.mean(np.abs(pred - y)))
        if best is None or mae < best[0]:
            best = (mae, kind, pred)
    return best[2], best[1]


def front_candidates(front: Sequence[Any], rule: str, limit: int) -> list[Any]:
    """Up to ``limit`` trials of the front, best first by the pick rule on their search figures."""
    if rule == "spearman":
        ordered = sorted(front, key=lambda t: (-t.values[1], t.values[0], t.number))
    else:
        ordered = sorted(front, key=lambda t: (t.values[0], -t.values[1], t.number))
    return ordered[:limit]


def pick_by_dev(rows: list[dict[str, Any]], rule: str) -> dict[str, Any]:
    """The row with the best dev figure by ``rule`` (ties: the better search figure, then the lower trial number)."""
    def key(row: dict[str, Any]) -> tuple:
        dev, search = row["dev"], row["search"]
        if rule == "spearman":
            return (-dev["spearman"], dev["mae"], -search["spearman"], row["number"])
        return (dev["mae"], -dev["spearman"], search["mae"], row["number"])

    return min(rows, key=key)
