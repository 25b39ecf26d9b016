"""Differences between systems on the human scale, from a judge's scores and a random subset of labels: paired
by input, unpaired, or over overlapping sets of rows (win rates from pairwise comparisons); and the labels a
difference needs to be told from zero.

- Paired (both systems answered the same inputs, and the same inputs carry labels for both): PPI++ on the
  per-input differences, ``label_B - label_A`` against ``judge_B - judge_A``.
- Unpaired (independent samples per system): the difference of the two estimates, their variances added.
- Overlapping rows under one simple random sample of all rows (a comparison of A and B counts for both):
  each system's estimate over its own rows, and the variance of their difference from the linearized
  contribution of every labeled row, ``z = 1[in B] r_B / N_B - 1[in A] r_A / N_A`` with ``r`` the HC2-adjusted
  residuals (see ``adjusted_residuals``), ``Var = N^2 (1 - n/N) Var(z) / n``: a row shared by A and B counts
  once, with its effect on both.

A win value is a comparison's outcome for one side: 1 a win, 0.5 a tie, 0 a loss; the judge's is its
preference for that side rescaled onto [0, 1].

The targets are the ``finite`` ones of ``judgetune.stats._ppi``: means over the given rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from scipy import special as _special

from judgetune.stats._ppi import (
    Estimate,
    Numbers,
    _interval,
    adjusted_residuals,
    labels_mean,
    ppi_mean,
    z_value,
)

__all__ = ["difference_paired", "difference_unpaired", "judged_wins", "labels_needed", "overlap_difference",
           "welch_df", "win_values"]


def difference_paired(labels_a: Numbers, labels_b: Numbers, judged_a: Numbers, judged_b: Numbers,
                      unlabeled_a: Numbers, unlabeled_b: Numbers, *, alpha: float = 0.05,
                      method: str = "ppi++", lam: float | None = None,
                      scale: tuple[float, float] | None = None) -> Estimate:
    """B minus A over the inputs both answered: labels and judge scores of the labeled inputs, in the same input
    order for both; the judge's scores on the other inputs, in the same order for both. ``method``: ``ppi++``
    (PPI++ on the differences, ``lam`` as ``ppi_mean``'s) or ``labels`` (the labeled differences alone);
    ``scale``: the labels' bounds (a difference lies within ``+-(high - low)``)."""
    d = np.asarray(labels_b, dtype=float) - np.asarray(labels_a, dtype=float)
    bounds = None if scale is None else (scale[0] - scale[1], scale[1] - scale[0])
    if method == "labels":
        return labels_mean(d, rows=len(d) + len(unlabeled_a), alpha=alpha, scale=bounds)
    if method != "ppi++":
        raise ValueError(f"method: expected 'ppi++' or 'labels', got {method!r}")
    judged = np.asarray(judged_b, dtype=float) - np.asarray(judged_a, dtype=float)
    unlabeled = np.asarray(unlabeled_b, dtype=float) - np.asarray(unlabeled_a, dtype=float)
    return ppi_mean(d, judged, unlabeled, alpha=alpha, lam=lam, scale=bounds)


def welch_df(a: Estimate, b: Estimate) -> float | None:
    """Welch and Satterthwaite's degrees of freedom of a difference of two estimates (None: normal)."""
    if a.df is None or b.df is None:
        return None
    va, vb = a.se ** 2, b.se ** 2
    if va + vb == 0:
        return float(min(a.df, b.df))
    return float((va + vb) ** 2 / (va ** 2 / a.df + vb ** 2 / b.df))


def difference_unpaired(a: Estimate, b: Estimate, *, alpha: float = 0.05,
                        scale: tuple[float, float] | None = None) -> Estimate:
    """B minus A from two estimates on independent samples. Its ``residual_var`` is the sum of theirs (the
    variance of one label of each); ``lam`` is not defined (nan); ``scale``: the labels' bounds (the difference
    is clipped to ``+-(high - low)``). Two score intervals combine by MOVER (Newcombe's interval for a difference
    of proportions, Zou and Donner's for any two): each end of the difference from the ends of the two intervals
    on its side, so an estimate at the scale's end (plug-in se 0) still brings its interval's width; the se is the
    distance to the end toward 0 over z, so the p-value agrees with the interval."""
    spread = None if scale is None else (scale[0] - scale[1], scale[1] - scale[0])
    fields = {"labeled": a.labeled + b.labeled, "rows": a.rows + b.rows, "lam": math.nan,
              "residual_var": a.residual_var + b.residual_var}
    if a.score_factor is None or b.score_factor is None:
        return _interval(b.value - a.value, math.hypot(a.se, b.se), alpha, df=welch_df(a, b), scale=spread, **fields)
    d = b.value - a.value
    low = d - math.hypot(b.value - b.low, a.high - a.value)
    high = d + math.hypot(b.high - b.value, a.value - a.low)
    se = (d - low if d >= 0 else high - d) / z_value(alpha)
    if spread is not None:
        low, high = max(low, spread[0]), min(high, spread[1])
    return Estimate(value=d, se=se, low=low, high=high, **fields)


def _domain(y: np.ndarray, f: np.ndarray, inside: np.ndarray, labeled: np.ndarray, lam: float | None,
            alpha: float, scale: tuple[float, float] | None) -> Estimate:
    """One system's estimate over its own rows (``lam`` 0: labels only; None: power-tuned)."""
    mine = inside & labeled
    if lam == 0:
        return labels_mean(y[mine], rows=int(inside.sum()), alpha=alpha, scale=scale)
    return ppi_mean(y[mine], f[mine], f[inside & ~labeled], alpha=alpha, lam=lam, scale=scale)


def _contribution(y: np.ndarray, f: np.ndarray, inside: np.ndarray, rows: np.ndarray, est: Estimate,
                  tuned: bool) -> np.ndarray:
    """Each labeled row's linearized contribution to the system's error (0 outside its rows): its residual,
    HC2-adjusted when the weight on the judge was tuned, over the system's row count."""
    out = np.zeros(len(rows))
    mine = inside[rows]
    y_mine, f_mine = y[rows][mine], f[rows][mine]
    if tuned:
        out[mine] = adjusted_residuals(y_mine, f_mine, est.lam)
    else:
        resid = y_mine - est.lam * f_mine
        out[mine] = resid - resid.mean()
    return out / inside.sum()


def overlap_difference(y_a: Numbers, f_a: Numbers, in_a: Sequence[bool], y_b: Numbers, f_b: Numbers,
                       in_b: Sequence[bool], labeled: Sequence[bool], *, alpha: float = 0.05,
                       method: str = "ppi++", lam: float | None = None,
                       scale: tuple[float, float] | None = None) -> tuple[Estimate, Estimate, Estimate]:
    """``(A, B, B - A)`` over the N rows of a file whose labeled rows are one simple random sample of all: per
    row the outcome for A and for B (``y``, anything where unlabeled), the judge's (``f``), whether the row is
    A's or B's (``in``), and whether it is labeled. ``method``: ``ppi++`` (``lam`` as ``ppi_mean``'s) or
    ``labels``; ``scale``: the outcomes' bounds (win values: 0-1), for a score interval on the difference's bounds
    (see ``judgetune.stats._ppi``).

    Raises:
        ValueError: fewer than 2 labeled rows for A or B, or mismatched lengths.
    """
    arrays = [np.asarray(v, dtype=float) for v in (y_a, f_a, y_b, f_b)]
    masks = [np.asarray(v, dtype=bool) for v in (in_a, in_b, labeled)]
    if len({len(v) for v in [*arrays, *masks]}) != 1:
        raise ValueError("overlap_difference: expected arrays of one length, one value per row")
    (ya, fa, yb, fb), (ia, ib, lab) = arrays, masks
    weight = 0.0 if method == "labels" else lam
    a, b = _domain(ya, fa, ia, lab, weight, alpha, scale), _domain(yb, fb, ib, lab, weight, alpha, scale)
    rows = np.flatnonzero(lab)
    n, total = len(rows), len(lab)
    tuned = [weight is None and est.lam > 0 for est in (a, b)]
    z = _contribution(yb, fb, ib, rows, b, tuned[1]) - _contribution(ya, fa, ia, rows, a, tuned[0])
    var = total ** 2 * float(np.var(z, ddof=1)) / n
    alone_var = var
    if method != "labels":
        alone = [_domain(y, f, inside, lab, 0.0, alpha, None) for y, f, inside in ((ya, fa, ia), (yb, fb, ib))]
        z0 = _contribution(yb, fb, ib, rows, alone[1], False) - _contribution(ya, fa, ia, rows, alone[0], False)
        alone_var = total ** 2 * float(np.var(z0, ddof=1)) / n
        if scale is None:  # as residual_floor: at most n labels' worth per label
            var = max(var, alone_var / n)
    keep = max(0.0, 1 - n / total)
    fields = {"rows": int((ia | ib).sum()), "lam": math.nan}
    if scale is not None:  # MOVER from the two systems' score intervals, widened by what their shared rows add
        diff = difference_unpaired(a, b, alpha=alpha, scale=scale)
        plugin = a.se ** 2 + b.se ** 2  # the two systems' variances as if their rows were apart
        widen = math.sqrt(max(1.0, keep * var / plugin)) if plugin > 0 else 1.0
        d = diff.value
        spread = (scale[0] - scale[1], scale[1] - scale[0])
        low, high = max(d - widen * (d - diff.low), spread[0]), min(d + widen * (diff.high - d), spread[1])
        return a, b, replace(diff, low=low, high=high, se=diff.se * widen, labeled=int((lab & (ia | ib)).sum()),
                             residual_var=n * var, **fields)
    diff = _interval(b.value - a.value, math.sqrt(keep * var), alpha, labeled=int((lab & (ia | ib)).sum()),
                     residual_var=n * var, df=welch_df(a, b), **fields)
    return a, b, diff


def win_values(preferences: Numbers, sides: Numbers) -> np.ndarray:
    """The human outcome of each comparison for one side: 1 won, 0.5 tie, 0 lost. ``preferences``: positive
    when answer_b is better; ``sides``: +1 where the side is answer_b, -1 where it is answer."""
    signed = np.sign(np.asarray(preferences, dtype=float) * np.asarray(sides, dtype=float))
    return (signed + 1) / 2


def judged_wins(scores: Numbers, sides: Numbers, low: float, high: float) -> np.ndarray:
    """The judge's preference for one side rescaled from the scale [low, high] onto [0, 1] (the scale's middle,
    a tie, is 0.5)."""
    if not low < high:
        raise ValueError(f"expected low below high, got {low} and {high}")
    signed = np.asarray(scores, dtype=float) * np.asarray(sides, dtype=float) - (low + high) / 2
    return np.clip(0.5 + signed / (high - low), 0.0, 1.0)


def labels_needed(difference: float, terms: Sequence[tuple[float, int]], *, alpha: float = 0.05,
                  power: float = 0.8) -> int | None:
    """The labels n (per system, per input or in all: as the terms count them) at which a two-sided test at
    ``alpha`` tells ``difference`` from 0 with probability ``power``, when the estimate's variance is
    ``sum(var_k * (1/n - 1/N_k))`` for ``terms`` ``(var_k, N_k)``: per label variances and the rows each
    sample is drawn from. None when the difference is 0 or a variance unknown; at least 2."""
    if difference == 0 or not math.isfinite(difference) or any(not math.isfinite(v) for v, _ in terms):
        return None
    k = (z_value(alpha) + float(_special.ndtri(power))) ** 2
    total = sum(v for v, _ in terms)
    if total <= 0:
        return 2
    n = total / (difference ** 2 / k + sum(v / rows for v, rows in terms))
    return max(2, math.ceil(n - 1e-9))
