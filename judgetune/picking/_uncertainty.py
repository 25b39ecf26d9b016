"""Later rounds of picks, once labels exist: the items whose calibrated score is least pinned down.

A calibrator maps the default judge's score onto the human scale. Where few labeled items have a
similar score, or their labels scatter widely, its map there is uncertain; the gate's paired interval
is wide for the same reason. The uncertainty at score ``s`` is estimated as

    var(s) = sigma2(s) / (n_eff(s) + 1)

with ``n_eff(s)`` the kernel-weighted number of labeled items near ``s`` (Gaussian kernel, Silverman's
bandwidth on the pool's scores) and ``sigma2(s)`` the kernel-weighted variance of their residuals
around an isotonic fit (shrunk towards the overall residual variance). Picks are greedy: the item of
largest ``var``, times ``GROUP_BONUS`` when its group has no labeled or picked item yet, is taken and
counts as labeled near its score from then on (its residual is unknown: it adds to ``n_eff`` only),
so one batch spreads over the regions that need labels.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

__all__ = ["GROUP_BONUS", "narrow", "uncertainty"]

GROUP_BONUS = 1.5  # a group without a label yet: its items count this much more (the gate resamples groups)
PRIOR_WEIGHT = 2.0  # pseudo-items of the overall residual variance in each local estimate


def bandwidth(scores: np.ndarray) -> float:
    """Silverman's rule of thumb; a tiny positive width for constant scores."""
    spread = min(np.std(scores), (np.quantile(scores, 0.75) - np.quantile(scores, 0.25)) / 1.34) \
        if len(scores) > 1 else 0.0
    spread = spread if spread > 0 else float(np.std(scores))
    return float(0.9 * spread * len(scores) ** -0.2) if spread > 0 else 1e-6


def residuals(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Labels minus an isotonic (increasing) fit of label on score; minus the mean when that is flat."""
    from sklearn.isotonic import IsotonicRegression

    if len(set(scores.tolist())) < 2:
        return labels - labels.mean()
    fit = IsotonicRegression(out_of_bounds="clip").fit(scores, labels)
    return labels - fit.predict(scores)


def uncertainty(at: np.ndarray, labeled: np.ndarray, resid: np.ndarray, extra: np.ndarray, h: float) -> np.ndarray:
    """``var(s)`` at each score of ``at``: labeled scores with their residuals, plus ``extra`` scores
    picked in this batch (labels unknown yet: they add to ``n_eff`` only)."""
    overall = float(np.mean(resid ** 2)) if len(resid) else 1.0
    k = np.exp(-0.5 * ((at[:, None] - labeled[None, :]) / h) ** 2) if len(labeled) else np.zeros((len(at), 0))
    sigma2 = (k @ resid ** 2 + PRIOR_WEIGHT * overall) / (k.sum(axis=1) + PRIOR_WEIGHT)
    n_eff = k.sum(axis=1)
    if len(extra):
        n_eff = n_eff + np.exp(-0.5 * ((at[:, None] - extra[None, :]) / h) ** 2).sum(axis=1)
    return sigma2 / (n_eff + 1.0)


def narrow(pool_scores: Sequence[float], pool_groups: Sequence[str], labeled_scores: Sequence[float],
           labels: Sequence[float], labeled_groups: Sequence[str], n: int, *, seed: int = 0) -> list[int]:
    """Indices into the pool of ``n`` items that most narrow the calibrator's uncertainty (see the module)."""
    if n > len(pool_scores):
        raise ValueError(f"cannot pick {n} of {len(pool_scores)} items")
    at = np.asarray(pool_scores, dtype=float)
    known = np.asarray(labeled_scores, dtype=float)
    resid = residuals(known, np.asarray(labels, dtype=float))
    h = bandwidth(np.concatenate([at, known]))
    rng = random.Random(seed)
    noise = np.asarray([rng.random() * 1e-9 for _ in at])  # seeded ties
    seen = set(labeled_groups)
    picked: list[int] = []
    free = np.ones(len(at), dtype=bool)
    for _ in range(n):
        var = uncertainty(at, known, resid, at[picked], h)
        bonus = np.asarray([GROUP_BONUS if g not in seen else 1.0 for g in pool_groups])
        value = np.where(free, var * bonus + noise, -np.inf)
        best = int(np.argmax(value))
        picked.append(best)
        free[best] = False
        seen.add(pool_groups[best])
    return picked
