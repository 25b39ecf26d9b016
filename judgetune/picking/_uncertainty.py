"""Later rounds of picks, once labels exist: the items whose calibrated score is least pinned down.

A calibrator maps the default judge's score onto the human scale. Where few labeled items have a
similar score, or their labels scatter widely, its map there is uncertain; the gate's paired interval
is wide for the same reason. The uncertainty at score ``s`` is estimated as

    var(s) = sigma2(s) / (n_eff(s) + 1)

with ``n_eff(s)`` the kernel-weighted number of labeled items near ``s`` (Gaussian kernel, Silverman's
bandwidth on the pool's scores) and ``sigma2(s)`` the kernel-weighted variance of their residuals
around an isotonic fit (shrunk towards the overall residual variance). A label at score ``s_i`` adds
``k(s_i, s_j)`` to ``n_eff`` at every pool score ``s_j``; the pick's value is the summed drop of
``var`` over the pool (up to ``MAX_TARGETS`` pool items, seeded): the uncertainty it removes where the
calibrator will be used, so a dense region of scores counts more than an empty tail. Picks are greedy:
the item of largest value, times ``GROUP_BONUS`` when its group has no labeled or picked item yet, is
taken and counts as labeled near its score from then on (its residual is unknown: it adds to
``n_eff`` only), so one batch spreads over the regions that need labels.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

__all__ = ["GROUP_BONUS", "narrow", "uncertainty"]

GROUP_BONUS = 1.5  # a group without a label yet: its items count this much more (the gate resamples groups)
PRIOR_WEIGHT = 2.0  # pseudo-items of the overall residual variance in each local estimate
MAX_TARGETS = 1000  # pool items the drop of uncertainty is summed over (a seeded sample of larger pools)


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


def _kernel(a: np.ndarray, b: np.ndarray, h: float) -> np.ndarray:
    return np.exp(-0.5 * ((a[:, None] - b[None, :]) / h) ** 2) if len(a) and len(b) else np.zeros((len(a), len(b)))


def local_spread(at: np.ndarray, labeled: np.ndarray, resid: np.ndarray, h: float) -> tuple[np.ndarray, np.ndarray]:
    """``(sigma2, n_eff)`` at each score of ``at`` from the labeled scores and their residuals."""
    overall = float(np.mean(resid ** 2)) if len(resid) else 0.0
    overall = overall if overall > 0 else 1.0  # labels on a clean line so far: no evidence the spread is small
    k = _kernel(at, labeled, h)
    return (k @ resid ** 2 + PRIOR_WEIGHT * overall) / (k.sum(axis=1) + PRIOR_WEIGHT), k.sum(axis=1)


def uncertainty(at: np.ndarray, labeled: np.ndarray, resid: np.ndarray, extra: np.ndarray, h: float) -> np.ndarray:
    """``var(s)`` at each score of ``at``: labeled scores with their residuals, plus ``extra`` scores
    picked in this batch (labels unknown yet: they add to ``n_eff`` only)."""
    sigma2, n_eff = local_spread(at, labeled, resid, h)
    return sigma2 / (n_eff + _kernel(at, extra, h).sum(axis=1) + 1.0)


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
    targets = at if len(at) <= MAX_TARGETS else at[sorted(rng.sample(range(len(at)), MAX_TARGETS))]
    sigma2, n_eff = local_spread(targets, known, resid, h)
    reach = _kernel(at, targets, h)  # what a label at each pool score adds to n_eff at each target
    for _ in range(n):
        base = n_eff + 1.0
        drop = (sigma2 / base)[None, :] - sigma2[None, :] / (base[None, :] + reach)
        bonus = np.asarray([GROUP_BONUS if g not in seen else 1.0 for g in pool_groups])
        value = np.where(free, drop.sum(axis=1) * bonus + noise, -np.inf)
        best = int(np.argmax(value))
        picked.append(best)
        free[best] = False
        seen.add(pool_groups[best])
        n_eff = n_eff + reach[best]
    return picked
