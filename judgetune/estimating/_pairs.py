"""B minus A for a pair of systems: paired by input (PPI++ on the per-input differences) when both answered the
same inputs once each and the same inputs carry both their labels; over overlapping rows for comparisons
(one random sample of all comparisons); else unpaired. With it, the labels that would tell the difference
from zero at 80% power, given the judge's residual variance."""

from __future__ import annotations

from typing import Any

import numpy as np

from judgetune import stats
from judgetune.estimating._sides import Side

__all__ = ["POWER", "aligned", "pair_record"]

POWER = 0.8
Bounds = tuple[float, float] | None


def aligned(a: Side, b: Side) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows of A and of B in one order of inputs, when both answered the same inputs once each and the same
    inputs are labeled for both (at least 2); else None."""
    ka, kb = a.inputs, b.inputs
    if len(ka) != len(kb) or (ka < 0).any() or (kb < 0).any():
        return None
    oa, ob = np.argsort(ka, kind="stable"), np.argsort(kb, kind="stable")
    if not np.array_equal(ka[oa], kb[ob]) or np.any(ka[oa][1:] == ka[oa][:-1]):
        return None
    rows_a, rows_b = np.flatnonzero(a.inside), np.flatnonzero(b.inside)
    order_b = np.empty_like(rows_b)
    order_b[oa] = rows_b[ob]  # B's row answering the input of A's i-th row
    if not np.array_equal(a.labeled[rows_a], b.labeled[order_b]) or a.labeled[rows_a].sum() < 2:
        return None
    return rows_a, order_b


def _paired(a: Side, b: Side, rows: tuple[np.ndarray, np.ndarray], alpha: float, bounds: Bounds,
            lam: float | None) -> tuple:
    rows_a, rows_b = rows
    lab = a.labeled[rows_a]
    args = (a.y[rows_a][lab], b.y[rows_b][lab], a.f[rows_a][lab], b.f[rows_b][lab], a.f[rows_a][~lab],
            b.f[rows_b][~lab])
    ppi = stats.difference_paired(*args, alpha=alpha, lam=lam, scale=bounds)
    labels = stats.difference_paired(*args, alpha=alpha, method="labels", scale=bounds)
    return labels, ppi, [(ppi.residual_var, len(rows_a))]


def _overlap(a: Side, b: Side, alpha: float, bounds: Bounds, lam: float | None) -> tuple:
    args = (a.y, a.f, a.inside, b.y, b.f, b.inside, a.labeled)
    ppi = stats.overlap_difference(*args, alpha=alpha, lam=lam, scale=bounds)[2]
    labels = stats.overlap_difference(*args, alpha=alpha, method="labels", scale=bounds)[2]
    return labels, ppi, [(ppi.residual_var, len(a.y))]


def _unpaired(a: Side, b: Side, alpha: float, bounds: Bounds) -> tuple:
    ppi = stats.difference_unpaired(a.ppi, b.ppi, alpha=alpha, scale=bounds)
    terms = [(a.ppi.residual_var, int(a.inside.sum())), (b.ppi.residual_var, int(b.inside.sum()))]
    return stats.difference_unpaired(a.labels, b.labels, alpha=alpha, scale=bounds), ppi, terms


def pair_record(a: Side, b: Side, pairwise: bool, alpha: float, bounds: Bounds = None,
                lam: float | None = None) -> dict[str, Any]:
    """The record of B minus A (``labels_needed``: per input when paired, per system when unpaired, comparisons in
    all for pairwise rows); ``bounds`` and ``lam`` as ``fit``'s."""
    record: dict[str, Any] = {"a": a.name, "b": b.name,
                              "judge_difference": float(b.f[b.inside].mean() - a.f[a.inside].mean())}
    empty = dict.fromkeys(("pairing", "difference", "low", "high", "p_value", "labels_difference", "labels_low",
                           "labels_high", "labels_p_value", "labels_worth", "labels_needed", "labels_needed_per"))
    if a.ppi is None or b.ppi is None:
        return {**record, **empty, "note": "unvalidated: a system with fewer than 2 labeled rows"}
    rows = None if pairwise else aligned(a, b)
    if pairwise:
        (labels, ppi, terms), pairing, per = _overlap(a, b, alpha, bounds, lam), "comparisons", "comparison"
    elif rows is not None:
        (labels, ppi, terms), pairing, per = _paired(a, b, rows, alpha, bounds, lam), "paired", "input"
    else:
        (labels, ppi, terms), pairing, per = _unpaired(a, b, alpha, bounds), "unpaired", "system"
    needed = stats.labels_needed(ppi.value, terms, alpha=alpha, power=POWER)
    return {**record, "pairing": pairing, "difference": ppi.value, "low": ppi.low, "high": ppi.high,
            "p_value": ppi.p_value(), "labels_difference": labels.value, "labels_low": labels.low,
            "labels_high": labels.high, "labels_p_value": labels.p_value(), "labels_worth": stats.worth_of(labels, ppi),
            "labels_needed": needed, "labels_needed_per": per, "note": None}
