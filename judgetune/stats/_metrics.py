"""Meta-evaluation: how well a judge's scores agree with human labels.

Conventions: ``pred`` and ``gold`` are equal-length sequences of numbers; ``groups`` (optional)
names the query of each item. A metric that is undefined on its input (a constant vector, a group
of one) returns ``None`` or skips the group and counts it: no NaN ever reaches a summary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats
from sklearn.metrics import ndcg_score

DEFAULT_BRACKETS = (0.0, 2.0, 4.0, 5.0)
CORRELATIONS = ("spearman", "kendall", "pearson")


def _arrays(pred: Sequence[float], gold: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    p, g = np.asarray(pred, dtype=float), np.asarray(gold, dtype=float)
    if p.shape != g.shape or p.ndim != 1:
        raise ValueError(f"pred and gold must be 1-d of equal length, got {p.shape} and {g.shape}")
    if not (np.isfinite(p).all() and np.isfinite(g).all()):
        raise ValueError("pred and gold must be finite: score failures must be removed and counted, not passed on")
    return p, g


def rescale(values: Sequence[float], source: tuple[float, float], target: tuple[float, float]) -> np.ndarray:
    """Map values linearly from the range ``source`` onto ``target``."""
    (a, b), (c, d) = source, target
    if a == b:
        raise ValueError(f"source range {source} is empty")
    return c + (np.asarray(values, dtype=float) - a) * (d - c) / (b - a)


def mae(pred: Sequence[float], gold: Sequence[float], *, pred_range: tuple[float, float] | None = None,
        gold_range: tuple[float, float] | None = None) -> float:
    """Mean absolute error after mapping ``pred`` from ``pred_range`` onto ``gold_range`` (both or neither).

    >>> mae([0.0, 1.0], [0.0, 5.0], pred_range=(0, 1), gold_range=(0, 5))
    0.0
    """
    p, g = _arrays(pred, gold)
    if (pred_range is None) != (gold_range is None):
        raise ValueError("give both pred_range and gold_range, or neither")
    if pred_range is not None:
        p = rescale(p, pred_range, gold_range)
    return float(np.mean(np.abs(p - g)))


def bracket_of(values: Sequence[float], edges: Sequence[float] = DEFAULT_BRACKETS) -> np.ndarray:
    """Index of the bracket ``[edges[i], edges[i+1])`` holding each value; the last bracket is closed."""
    v, e = np.asarray(values, dtype=float), np.asarray(edges, dtype=float)
    if e.ndim != 1 or len(e) < 2 or np.any(np.diff(e) <= 0):
        raise ValueError(f"bracket edges must be increasing, got {list(edges)}")
    outside = (v < e[0]) | (v > e[-1])
    if outside.any():
        raise ValueError(f"{int(outside.sum())} value(s) outside the brackets [{e[0]}, {e[-1]}], "
                         f"first {v[outside][0]}")
    return np.minimum(np.searchsorted(e, v, side="right") - 1, len(e) - 2)


def bracket_accuracy(pred: Sequence[float], gold: Sequence[float], *,
                     edges: Sequence[float] = DEFAULT_BRACKETS) -> float:
    """Share of items whose prediction falls in the same score bracket as the label
    (0-2 / 2-4 / 4-5 by default, as in the Queryloop MSRpar study)."""
    p, g = _arrays(pred, gold)
    return float(np.mean(bracket_of(p, edges) == bracket_of(g, edges)))


def default_bracket_edges(label_range: tuple[float, float], gold: Sequence[float] = ()) -> np.ndarray:
    """The brackets of ``evaluate_predictions``: 0-2 / 2-4 / 4-5 scaled onto the label range, except for
    binary labels (every label one of the range's two ends), where the middle bracket could hold no label
    and the brackets are the two halves of the range (bracket accuracy = accuracy at the midpoint).

    >>> default_bracket_edges((0.0, 1.0), [0, 1, 1]).tolist()
    [0.0, 0.5, 1.0]
    """
    lo, hi = float(label_range[0]), float(label_range[1])
    g = np.asarray(gold, dtype=float)
    if len(g) and np.all((g == lo) | (g == hi)):
        return np.array([lo, (lo + hi) / 2, hi])
    return rescale(DEFAULT_BRACKETS, (0, 5), (lo, hi))


def correlation(pred: Sequence[float], gold: Sequence[float], method: str = "spearman") -> float | None:
    """Spearman (average ranks for ties), Kendall (tau-b) or Pearson; ``None`` when either side is constant."""
    p, g = _arrays(pred, gold)
    if len(p) < 2 or np.ptp(p) == 0 or np.ptp(g) == 0:
        return None
    # Spearman and Pearson through np.corrcoef: the same values as scipy's, without its per-call
    # overhead, which dominates a 1,000-resample bootstrap.
    if method == "spearman":
        value = np.corrcoef(stats.rankdata(p), stats.rankdata(g))[0, 1]
    elif method == "kendall":
        value = stats.kendalltau(p, g).statistic
    elif method == "pearson":
        value = np.corrcoef(p, g)[0, 1]
    else:
        raise ValueError(f"unknown correlation {method!r}; expected one of {', '.join(CORRELATIONS)}")
    return None if math.isnan(value) else float(value)


@dataclass(frozen=True)
class GroupedValue:
    """A metric computed per group and averaged; ``value`` is None when no group qualified."""

    value: float | None
    groups_used: int
    skipped_small: int = 0  # fewer than two items
    skipped_constant: int = 0  # constant labels or predictions: the metric is undefined there

    def to_dict(self) -> dict:
        return asdict(self)


def _group_indices(groups: Sequence) -> list[np.ndarray]:
    if len(groups) == 0:
        return []
    keys = np.asarray([str(g) for g in groups])
    _, inverse = np.unique(keys, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.flatnonzero(np.diff(inverse[order])) + 1
    return np.split(order, bounds)


def per_group_values(pred: Sequence[float], gold: Sequence[float], groups: Sequence,
                     fn: Callable[[np.ndarray, np.ndarray], float | None]) -> tuple[list[float], int, int]:
    """``fn`` on each group of at least two items: (defined values, groups too small, groups where fn is None)."""
    p, g = _arrays(pred, gold)
    if len(groups) != len(p):
        raise ValueError(f"groups has {len(groups)} entries for {len(p)} items")
    values, small, undefined = [], 0, 0
    for idx in _group_indices(groups):
        if len(idx) < 2:
            small += 1
            continue
        value = fn(p[idx], g[idx])
        if value is None:
            undefined += 1
        else:
            values.append(value)
    return values, small, undefined


def _grouped(values: list[float], small: int, undefined: int) -> GroupedValue:
    return GroupedValue(float(np.mean(values)) if values else None, len(values), small, undefined)


def grouped_correlation(pred: Sequence[float], gold: Sequence[float], groups: Sequence,
                        method: str = "spearman") -> GroupedValue:
    """Correlation within each group, averaged over groups (LINKAGE's protocol)."""
    return _grouped(*per_group_values(pred, gold, groups, lambda p, g: correlation(p, g, method)))


def _best_hit(p: np.ndarray, g: np.ndarray, worst: bool) -> float | None:
    if np.ptp(g) == 0:
        return None  # every answer equally good: no best to find

    def hit(p: np.ndarray, g: np.ndarray) -> bool:
        # all items sharing the top prediction must be among the top-labeled ones
        return bool(np.all(g[p == p.max()] == g.max()))

    return float(hit(p, g) and (not worst or hit(-p, -g)))


def best_accuracy(pred: Sequence[float], gold: Sequence[float], groups: Sequence, *,
                  with_worst: bool = False) -> GroupedValue:
    """Share of groups where the top-scored answer is a best-labeled one (and, with ``with_worst``,
    the bottom-scored one a worst-labeled one). Tied top predictions count only if all are best."""
    return _grouped(*per_group_values(pred, gold, groups, lambda p, g: _best_hit(p, g, with_worst)))


def rbo(ranking_a: Sequence, ranking_b: Sequence, *, p: float = 1.0, depth: int | None = None,
        extrapolate: bool = False) -> float:
    """Rank-biased overlap of two rankings (best first), Webber et al. 2010.

    With ``agreement(d) = |a[:d] & b[:d]| / d`` over depths ``d = 1..k`` (k: the shorter list, or
    ``depth``): ``p = 1`` gives the plain average of the agreements (the NRP paper's setting);
    ``p < 1`` gives ``(1 - p) * sum(p**(d-1) * agreement(d))``, plus ``agreement(k) * p**k`` with
    ``extrapolate`` (RBO_ext).
    """
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    if not ranking_a and not ranking_b:
        return 1.0
    if not ranking_a or not ranking_b:
        return 0.0
    k = min(len(ranking_a), len(ranking_b), depth or math.inf)
    seen_a, seen_b, overlap, agreements = set(), set(), 0, []
    for d in range(k):
        a, b = ranking_a[d], ranking_b[d]
        overlap += (a == b) + (a in seen_b) + (b in seen_a)
        seen_a.add(a)
        seen_b.add(b)
        agreements.append(overlap / (d + 1))
    if p == 1.0:
        return float(np.mean(agreements))
    weights = (1 - p) * p ** np.arange(k)
    value = float(np.dot(weights, agreements))
    return value + agreements[-1] * p**k if extrapolate else value


def ndcg(pred: Sequence[float], gold: Sequence[float], groups: Sequence | None = None, *,
         k: int | None = 10) -> GroupedValue:
    """nDCG@k with linear gains (the labels), items ordered by prediction; ties in predictions are
    averaged (scikit-learn's ``ndcg_score``). Per group and averaged when ``groups`` is given;
    groups whose labels are all zero have no ideal ranking and are skipped. Labels must be >= 0."""
    p, g = _arrays(pred, gold)
    if np.any(g < 0):
        raise ValueError("nDCG gains must be non-negative: shift the labels so the lowest grade is 0")
    if groups is None:
        groups = ["all"] * len(p)

    def one(p: np.ndarray, g: np.ndarray) -> float | None:
        if not np.any(g > 0):
            return None
        return float(ndcg_score(g[None, :], p[None, :], k=k))

    return _grouped(*per_group_values(p, g, groups, one))


def cohen_kappa(pred: Sequence[float], gold: Sequence[float], *, weights: str | None = None,
                labels: Sequence[float] | None = None) -> float | None:
    """Cohen's kappa between discrete ratings: unweighted, ``"linear"`` or ``"quadratic"``.

    Continuous predictions must be rounded to the label set first (``snap_to_labels``). ``None``
    when chance agreement is total (both raters constant on one label).
    """
    p, g = _arrays(pred, gold)
    if weights not in (None, "linear", "quadratic"):
        raise ValueError(f"weights must be None, 'linear' or 'quadratic', got {weights!r}")
    grid = np.unique(np.concatenate([p, g]) if labels is None else np.asarray(labels, dtype=float))
    unknown = np.setdiff1d(np.concatenate([p, g]), grid)
    if unknown.size:
        raise ValueError(f"ratings {unknown[:5].tolist()} are not among the labels {grid.tolist()}")
    if np.unique(np.concatenate([p, g])).size == 1:
        return None  # both raters always give one same label: chance agreement is total
    # weights count steps between positions on the sorted label grid (equal to value gaps on 1,2,3,...);
    # computed here rather than with sklearn's cohen_kappa_score (tests check the two agree) because
    # its per-call validation dominates a bootstrap.
    k = len(grid)
    observed = np.bincount(np.searchsorted(grid, p) * k + np.searchsorted(grid, g), minlength=k * k).reshape(k, k)
    observed = observed / observed.sum()
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    steps = np.abs(np.arange(k)[:, None] - np.arange(k)[None, :])
    cost = {None: (steps > 0).astype(float), "linear": steps, "quadratic": steps**2}[weights]
    chance = float(np.sum(cost * expected))
    return None if chance == 0 else 1 - float(np.sum(cost * observed)) / chance


def snap_to_labels(values: Sequence[float], labels: Sequence[float]) -> np.ndarray:
    """Round each value to the nearest allowed label (ties go to the lower label)."""
    grid = np.sort(np.asarray(labels, dtype=float))
    v = np.asarray(values, dtype=float)
    return grid[np.argmin(np.abs(v[:, None] - grid[None, :]), axis=1)]


@dataclass(frozen=True)
class Interval:
    """A percentile bootstrap interval; ``resamples`` counts the resamples where the metric was defined."""

    low: float | None
    high: float | None
    resamples: int


def _percentiles(values: list[float], confidence: float, resamples: int) -> Interval:
    if not values:
        return Interval(None, None, 0)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return Interval(float(low), float(high), resamples)


def interval_of(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """The percentile interval of bootstrap values; NaN values (the metric undefined on that resample)
    are left out and not counted in ``resamples``."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    return _percentiles(list(v), confidence, int(v.size))


def spearman_rows(pred: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Spearman of each row of two ``(resamples, items)`` arrays, as ``correlation`` computes it for one
    pair (average ranks for ties), in one pass; NaN where either row is constant."""
    rp, rg = stats.rankdata(pred, axis=1), stats.rankdata(gold, axis=1)
    rp -= rp.mean(axis=1, keepdims=True)
    rg -= rg.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (rp * rg).sum(axis=1) / np.sqrt((rp ** 2).sum(axis=1) * (rg ** 2).sum(axis=1))
    rho[(np.ptp(pred, axis=1) == 0) | (np.ptp(gold, axis=1) == 0)] = np.nan
    return rho


def resample_indices(n_items: int, groups: Sequence | None = None, *, n_resamples: int = 1000,
                     seed: int = 0) -> list[np.ndarray]:
    """Item indices of ``n_resamples`` bootstrap samples that draw whole groups with replacement.
    Hand-written, as are the intervals built on it: ``scipy.stats.bootstrap`` resamples observations, not groups."""
    rng = np.random.default_rng(seed)
    if groups is None:
        return list(rng.integers(0, n_items, (n_resamples, n_items)))
    units = _group_indices(groups)
    flat = np.concatenate(units)
    lengths = np.array([len(u) for u in units])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    samples = []
    for chosen in rng.integers(0, len(units), (n_resamples, len(units))):
        size = lengths[chosen]
        # positions in `flat`: each chosen group's start, repeated, plus 0..len-1 within the group
        offsets = np.arange(size.sum()) - np.repeat(np.cumsum(size) - size, size)
        samples.append(flat[np.repeat(starts[chosen], size) + offsets])
    return samples


def bootstrap_interval(fn: Callable[[np.ndarray, np.ndarray], float | None], pred: Sequence[float],
                       gold: Sequence[float], groups: Sequence | None = None, *, n_resamples: int = 1000,
                       confidence: float = 0.95, seed: int = 0) -> Interval:
    """Confidence interval of a whole-sample metric ``fn(pred, gold)``, resampling whole groups
    (items when ``groups`` is None) with replacement."""
    p, g = _arrays(pred, gold)
    values = []
    for idx in resample_indices(len(p), groups, n_resamples=n_resamples, seed=seed):
        value = fn(p[idx], g[idx])
        if value is not None:
            values.append(value)
    return _percentiles(values, confidence, len(values))


def paired_difference(fn: Callable[[np.ndarray, np.ndarray], float | None], pred_a: Sequence[float],
                      pred_b: Sequence[float], gold: Sequence[float], groups: Sequence | None = None, *,
                      n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0) -> dict:
    """``fn(a) - fn(b)`` of two judges on the same items, and its interval from resamples that draw the
    same items (whole groups) for both, so what the two share does not widen it:
    ``{"difference", "ci", "resamples"}``."""
    if len(pred_a) != len(pred_b):
        raise ValueError(f"paired_difference needs predictions of the same items ({len(pred_a)} vs {len(pred_b)})")
    a, g = _arrays(pred_a, gold)
    b, _ = _arrays(pred_b, gold)
    whole_a, whole_b = fn(a, g), fn(b, g)
    values = []
    for idx in resample_indices(len(a), groups, n_resamples=n_resamples, seed=seed):
        va, vb = fn(a[idx], g[idx]), fn(b[idx], g[idx])
        if va is not None and vb is not None:
            values.append(va - vb)
    interval = _percentiles(values, confidence, len(values))
    difference = None if whole_a is None or whole_b is None else float(whole_a - whole_b)
    return {"difference": difference, "ci": [interval.low, interval.high], "resamples": interval.resamples}


def bootstrap_mean_interval(values: Sequence[float], *, n_resamples: int = 1000, confidence: float = 0.95,
                            seed: int = 0) -> Interval:
    """Confidence interval of the mean of per-group values, resampling the groups: scipy's percentile
    bootstrap (with ``seed``'s generator it draws the resamples the hand-written version drew)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0 or n_resamples < 1:  # no resample, no interval (as every interval here)
        return Interval(None, None, 0)
    if v.size == 1:  # scipy needs two observations; every resample of one is that one
        return Interval(float(v[0]), float(v[0]), n_resamples)
    result = stats.bootstrap((v,), np.mean, n_resamples=n_resamples, confidence_level=confidence,
                             method="percentile", rng=np.random.default_rng(seed), vectorized=True)
    return Interval(float(result.confidence_interval.low), float(result.confidence_interval.high), n_resamples)
