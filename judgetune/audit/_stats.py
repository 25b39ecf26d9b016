"""The statistics of one probe: a mean paired difference with a bootstrap interval clustered by group,
a sign-flip test against no effect, the minimum detectable effect at power 0.8, and the
Benjamini-Hochberg correction across probes.

The unit of resampling is the cluster (the item's group, or the item itself when ungrouped): items of
one question share their question's quirks, so they are not independent evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from judgetune.stats import resample_indices

ALPHA = 0.05
POWER = 0.8


@dataclass(frozen=True)
class Effect:
    """A probe's figure: ``effect`` (mean per-item difference) with its 95% interval ``[low, high]``,
    the two-sided ``p`` against no effect, the ``mde`` at this n and power 0.8 (None when the test cannot
    detect any effect: see :func:`minimum_detectable_effect`), ``n`` items in ``clusters`` groups."""

    effect: float
    low: float
    high: float
    p: float
    mde: float | None
    n: int
    clusters: int


def _cluster_values(diffs: np.ndarray, clusters: Sequence) -> np.ndarray:
    """Per cluster: its sum of differences divided by the mean cluster size, so their mean is the item mean."""
    keys = {c: i for i, c in enumerate(dict.fromkeys(clusters))}
    index = np.fromiter((keys[c] for c in clusters), dtype=int, count=len(diffs))
    sums = np.bincount(index, weights=diffs, minlength=len(keys))
    return sums / (len(diffs) / len(keys))


def minimum_detectable_effect(sd: float, n_clusters: int, *, alpha: float = ALPHA,
                              power: float = POWER) -> float | None:
    """The smallest true mean difference a two-sided test at ``alpha`` detects with probability ``power``:
    ``(z_{1-alpha/2} + z_{power}) * sd / sqrt(n_clusters)``, ``sd`` the spread of the cluster values
    (the normal approximation of a paired test). None when the sign-flip test cannot reach ``alpha`` at all:
    fewer than two clusters, or so few that its smallest p, 2 / 2^n_clusters, is ``alpha`` or more (at most 5
    clusters at 0.05), where no effect, however large, is ever detected."""
    if n_clusters < 2 or 2.0 / 2.0 ** n_clusters >= alpha:
        return None
    return float((sps.norm.ppf(1 - alpha / 2) + sps.norm.ppf(power)) * sd / np.sqrt(n_clusters))


def expanded_tail(n_clusters: int, *, alpha: float = ALPHA) -> float:
    """The tail probability of the expanded percentile interval (Hesterberg 2015, "What teachers should
    know about the bootstrap"): the percentile interval under-covers with few clusters (about 93% at
    20 for a nominal 95%), so its tails move to where ``z = sqrt(k / (k - 1)) * t_{1 - alpha/2, k-1}``."""
    if n_clusters < 2:
        return alpha / 2
    z = np.sqrt(n_clusters / (n_clusters - 1)) * sps.t.ppf(1 - alpha / 2, n_clusters - 1)
    return float(sps.norm.sf(z))


def paired_effect(diffs: Sequence[float], clusters: Sequence | None = None, *, n_resamples: int = 1000,
                  seed: int = 0) -> Effect:
    """The mean of per-item paired differences with its statistics (see :class:`Effect`).

    The interval is a percentile bootstrap resampling whole clusters, its tails expanded for few
    clusters (:func:`expanded_tail`); ``p`` a two-sided sign-flip
    permutation test of the cluster values (every sign pattern when there are at most
    ``max(n_resamples, 9999)`` of them, else that many random ones); the MDE uses the cluster values'
    standard deviation.

    Raises:
        ValueError: no differences, or clusters of another length.
    """
    d = np.asarray(diffs, dtype=float)
    if d.size == 0:
        raise ValueError("no paired differences: every pair failed or the probe had no item")
    groups = list(clusters) if clusters is not None else list(range(d.size))
    if len(groups) != d.size:
        raise ValueError(f"{d.size} differences but {len(groups)} cluster ids")
    effect = float(d.mean())
    values = _cluster_values(d, groups)
    k = values.size
    if np.allclose(d, 0.0, atol=1e-12):  # the judge did not move at all: nothing to resample or test
        return Effect(0.0, 0.0, 0.0, 1.0, minimum_detectable_effect(0.0, k), int(d.size), k)
    means = [float(d[idx].mean()) for idx in resample_indices(d.size, groups, n_resamples=n_resamples, seed=seed)]
    tail = expanded_tail(k) * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    if k < 2:
        p = 1.0
    else:
        test = sps.permutation_test((values,), np.mean, permutation_type="samples", alternative="two-sided",
                                    n_resamples=max(n_resamples, 9999), rng=np.random.default_rng(seed))
        p = float(test.pvalue)
    mde = minimum_detectable_effect(float(values.std(ddof=1)), k) if k > 1 else None
    return Effect(effect, float(low), float(high), min(1.0, p), mde, int(d.size), k)


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """The BH-adjusted q-values of ``p_values`` (the probes of one audit, corrected together)."""
    if len(p_values) == 0:
        return []
    return [float(q) for q in sps.false_discovery_control(np.asarray(p_values, dtype=float), method="bh")]
