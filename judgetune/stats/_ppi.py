"""Means on the human scale from a judge's scores on every row and human labels on a random subset of them:
prediction-powered inference with a power-tuned weight on the judge (PPI++; Angelopoulos, Duchi and Zrnic,
2023; Angelopoulos et al., Science 2023), beside the labels-only and the judge-only means.

The PPI++ estimate is ``lam * mean(judge on all rows) + mean(label - lam * judge on the labeled rows)``: the
judge's mean, corrected by its error on the labels. It is unbiased for any judge when the labeled rows are
a uniform random sample; the judge only changes its variance, ``Var(label - lam * judge) / n`` instead of
``Var(label) / n``, and ``lam`` is chosen to make it smallest (``lam = 0`` is the labels-only mean).

Two targets:

- ``finite=True`` (what ``judgetune estimate`` reports): the mean human label over the given rows, as if
  every one were labeled; the labels are a simple random sample of them. The judge's mean over all rows is
  then a constant, ``lam`` is the least-squares slope of label on judge clipped to [0, 1], and the variance
  carries the finite-population correction ``1 - n / N`` (survey sampling's difference estimator). With ``lam``
  tuned on the same labels, each residual is divided by ``sqrt(1 - leverage)`` (HC2). Below ``MIN_JUDGED``
  labels ``lam`` is 0: the estimate is the labels' own.
- ``finite=False``: the mean of the source the rows were drawn from, with the unlabeled rows as PPI's
  separate unlabeled sample: ``lam = Cov(label, judge) / ((1 + n / N) Var(judge))`` clipped to [0, 1] and
  ``Var = lam^2 Var(judge, unlabeled) / N + Var(label - lam * judge) / n``, as in PPI++ and ``ppi_py``.

Bounded labels (``scale`` given; ``judgetune estimate`` always gives it). Labels piled at one end of the scale make
the sample variance small or zero in exactly the samples that miss the rare labels at the other end, and a t interval
then covers far below its level (65% with 10 labels per system on a summarization set rated mostly 5). An outcome on
``[low, high]``, rescaled to [0, 1], has variance at most ``mu (1 - mu)`` at mean ``mu``; its estimate's variance is
written ``keep * rho * mu (1 - mu) / n`` with ``rho`` the dispersion: the sample's (residual) variance over that
bound at the estimate, shrunk by ``PSEUDO`` observation toward 1 (a binary outcome's) for labels, toward the labels'
own for a judge's residuals (``dispersion``). Labels all alike leave nothing to check a judge against: the estimate
is then the labels' own. The interval holds every ``mu`` that this variance, taken at ``mu`` itself, does not reject:
Wilson's score interval for a proportion with ``n / (keep * rho)`` trials (``score_interval``). So an all-equal
sample is read as a binary one (Wilson's interval, never zero width), a sample near the scale's end gets the
asymmetric interval that holds there, the interval never leaves the scale, and a judge that halves the residual
variance halves ``rho``: it is still worth what it explains. The point estimate is the unbiased one, clipped to the
scale; p-values are the score test's (the variance at the null), so they agree with the interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import special as _special

__all__ = ["MIN_JUDGED", "PSEUDO", "Estimate", "adjusted_residuals", "dispersion", "judge_mean", "labels_mean",
           "labels_worth", "ppi_mean", "residual_floor", "score_interval", "tuned_lambda", "worth_of",
           "z_value"]

PSEUDO = 1.0  # observations of a binary outcome's dispersion that every sample's is shrunk toward (see the module)
MIN_JUDGED = 8  # labels below which the weight on the judge is 0 (the estimate is the labels' own)

Numbers = Sequence[float] | np.ndarray


@dataclass(frozen=True)
class Estimate:
    """A mean (or a difference of means) with its standard error and CLT interval.

    ``labeled``: the labels it rests on; ``rows``: the rows (or inputs) it is a mean over; ``lam``: the
    weight on the judge (0: labels only); ``residual_var``: the per-label variance of ``label - lam * judge``
    (the labels' own variance when ``lam`` is 0), from which the labels a decision needs are computed; ``df``:
    the degrees of freedom of its t quantile (None: the normal's)."""

    value: float
    se: float
    low: float
    high: float
    labeled: int
    rows: int
    lam: float
    residual_var: float
    df: float | None = None
    scale: tuple[float, float] | None = None  # a score interval's bounds (see the module)
    score_factor: float | None = None  # keep * rho / n: the variance of the rescaled estimate is this x mu (1 - mu)

    @property
    def width(self) -> float:
        return self.high - self.low

    def p_value(self, null: float = 0.0) -> float:
        """Two-sided p-value of ``value == null`` from the interval's t (or normal) distribution (1 when se is 0
        and value is null, 0 when se is 0 and it is not); a score interval's is the score test's."""
        if self.scale is not None and self.score_factor is not None:
            low, high = self.scale
            u0, u = (null - low) / (high - low), (self.value - low) / (high - low)
            var = self.score_factor * u0 * (1 - u0)
            if var <= 0:
                return 1.0 if math.isclose(u, u0, abs_tol=1e-12) else 0.0
            return float(2 * _special.ndtr(-abs(u - u0) / math.sqrt(var)))
        if self.se == 0:
            return 1.0 if math.isclose(self.value, null, abs_tol=1e-12) else 0.0
        t = abs(self.value - null) / self.se
        return float(2 * (_special.ndtr(-t) if self.df is None else _special.stdtr(self.df, -t)))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def z_value(alpha: float, df: float | None = None) -> float:
    """The two-sided quantile: 1.96 for ``alpha`` 0.05 (normal), 2.09 with ``df`` 19 (Student's t)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: expected a number in (0, 1), got {alpha}")
    return float(_special.ndtri(1 - alpha / 2) if df is None else _special.stdtrit(df, 1 - alpha / 2))


def _array(values: Numbers, what: str) -> np.ndarray:
    array = np.asarray(values, dtype=float).reshape(-1)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what}: expected finite numbers")
    return array


def _two_labels(labels: np.ndarray) -> None:
    if len(labels) < 2:
        raise ValueError(f"expected at least 2 labels for an interval, got {len(labels)}")


def _interval(value: float, se: float, alpha: float, *, df: float | None = None,
              scale: tuple[float, float] | None = None, **fields: float) -> Estimate:
    """``value +- q * se``; with ``scale``, the value and both ends clipped to it."""
    half = z_value(alpha, df) * se
    low, high = value - half, value + half
    if scale is not None:
        value, low, high = (min(max(v, scale[0]), scale[1]) for v in (value, low, high))
    return Estimate(value=float(value), se=float(se), low=float(low), high=float(high), df=df, **fields)


def dispersion(variance: float, n: int, value: float, scale: tuple[float, float], *, cap: bool,
               toward: float = 1.0) -> float:
    """``rho`` of the module: ``variance`` (a sample's, per outcome) over the bound ``mu (1 - mu)`` at ``value``,
    both on the scale rescaled to [0, 1], shrunk toward ``toward`` (1: a binary outcome's; for a judge's residuals,
    the labels' own) by ``PSEUDO`` observation; 1 at the scale's ends. ``cap``: at most ``n / (n - 1)``, which a
    sample of outcomes on the scale never exceeds (not so a residual)."""
    low, high = scale
    if not low < high:
        raise ValueError(f"scale: expected low below high, got {low} and {high}")
    u = min(max((value - low) / (high - low), 0.0), 1.0)
    bound = u * (1 - u)
    rho = max(variance, 0.0) / (high - low) ** 2 / bound if bound > 0 else 1.0
    if cap:
        rho = min(rho, n / (n - 1))
    return ((n - 1) * rho + PSEUDO * toward) / (n - 1 + PSEUDO)


def score_interval(value: float, variance: float, n: int, keep: float, scale: tuple[float, float], alpha: float, *,
                   cap: bool = False, toward: float = 1.0, **fields: Any) -> Estimate:
    """The bounded estimate of the module: ``value`` (clipped to ``scale``) with Wilson's interval for ``n`` outcomes
    of per-outcome ``variance`` (``keep``: the finite-population factor ``1 - n / N``; ``toward`` as
    ``dispersion``'s); ``se`` is the plug-in one, ``residual_var`` the per-label variance it implies
    (``se^2 = keep * residual_var / n``)."""
    low, high = scale
    rho = dispersion(variance, n, value, scale, cap=cap, toward=toward)
    u = min(max((value - low) / (high - low), 0.0), 1.0)
    factor = max(keep, 0.0) * rho / n
    per_label = rho * u * (1 - u) * (high - low) ** 2
    k = z_value(alpha) ** 2 * factor
    center, half = (u + k / 2) / (1 + k), math.sqrt(k * u * (1 - u) + k * k / 4) / (1 + k)
    return Estimate(value=low + (high - low) * u, se=math.sqrt(factor * u * (1 - u)) * (high - low),
                    low=low + (high - low) * max(center - half, 0.0), high=low + (high - low) * min(center + half, 1.0),
                    labeled=n, residual_var=per_label, scale=(float(low), float(high)), score_factor=factor, **fields)


def residual_floor(resid: float, labels: np.ndarray) -> float:
    """The residual variance, at least the labels' own over n: a judge seen to agree exactly with n labels may
    still miss about one row in n, so no estimate claims more than n labels' worth per label."""
    return max(resid, float(np.var(labels, ddof=1)) / len(labels))


def adjusted_residuals(labels: Numbers, judged: Numbers, lam: float) -> np.ndarray:
    """``label - lam * judge`` centred, each divided by ``sqrt(1 - h)`` with ``h`` its leverage in the fit of label
    on judge (``1/n + (f - mean f)^2 / sum((f - mean f)^2)``): the HC2 correction, for a ``lam`` tuned on these
    same labels. Their variance estimates the residual variance without the fit's optimism."""
    y, f = _array(labels, "labels"), _array(judged, "judged")
    e = y - lam * f
    centred_f = f - f.mean()
    spread = float(np.sum(centred_f ** 2))
    leverage = 1 / len(y) + (centred_f ** 2 / spread if spread > 0 else 0.0)
    return (e - e.mean()) / np.sqrt(np.clip(1 - leverage, 1e-12, None))


def labels_mean(labels: Numbers, *, rows: int | None = None, alpha: float = 0.05,
                scale: tuple[float, float] | None = None) -> Estimate:
    """The mean of the labels with its t interval, or with ``scale`` (the labels' bounds) the score interval of
    the module.
    ``rows``: the rows the labels were drawn from, for the mean over those rows (finite-population
    correction); None: the mean of an unlimited source."""
    y = _array(labels, "labels")
    _two_labels(y)
    n = len(y)
    total = n if rows is None else rows
    if total < n:
        raise ValueError(f"rows: expected at least the {n} labeled rows, got {total}")
    keep = 1.0 if rows is None else 1 - n / total
    var = float(np.var(y, ddof=1))
    if scale is not None:
        return score_interval(float(y.mean()), var, n, keep, scale, alpha, cap=True, rows=total, lam=0.0)
    return _interval(float(y.mean()), math.sqrt(max(keep, 0.0) * var / n), alpha, labeled=n, rows=total, lam=0.0,
                     residual_var=var, df=n - 1)


def judge_mean(scores: Numbers) -> float:
    """The judge's mean over every row: biased by whatever the judge gets wrong on average."""
    return float(_array(scores, "scores").mean())


def tuned_lambda(labels: Numbers, judged: Numbers, *, unlabeled: int | None = None,
                 pooled_var: float | None = None) -> float:
    """The weight on the judge that makes the estimate's variance smallest.

    ``unlabeled`` None (finite target): the least-squares slope ``Cov(y, f) / Var(f)`` on the labeled rows,
    clipped to [0, 1]. Else PPI++'s ``Cov(y, f) / ((1 + n / N) Var(f))`` with ``N = unlabeled``, the covariance
    over the labeled rows (divided by n) and ``pooled_var`` the judge's variance over all rows, clipped to
    [0, 1]. 0 when the judge is constant on the labeled rows."""
    y, f = _array(labels, "labels"), _array(judged, "judged")
    if len(y) != len(f):
        raise ValueError(f"labels and judged: expected the same length, got {len(y)} and {len(f)}")
    n = len(y)
    if unlabeled is None:
        var = float(np.var(f, ddof=1)) if n > 1 else 0.0
        return float(np.clip(float(np.cov(y, f, ddof=1)[0, 1]) / var, 0.0, 1.0)) if var > 0 else 0.0
    var = float(np.var(f, ddof=1)) if pooled_var is None else pooled_var
    cov = float(np.mean((y - y.mean()) * (f - f.mean())))
    if var <= 0:
        return 0.0
    return float(np.clip(cov / ((1 + n / unlabeled) * var), 0.0, 1.0))


def ppi_mean(labels: Numbers, judged: Numbers, unlabeled: Numbers, *, alpha: float = 0.05, lam: float | None = None,
             finite: bool = True, scale: tuple[float, float] | None = None) -> Estimate:
    """The PPI++ mean: ``labels`` and the judge's scores on the same rows (``judged``), and the judge's scores
    on the rows without a label (``unlabeled``). ``lam`` None: power-tuned (see ``tuned_lambda``; 0 below
    ``MIN_JUDGED`` labels, and where the labels are all alike: a judge is not credited where the labels show it
    nothing to correct); ``finite``: the target; ``scale``: the labels' bounds, for the score interval (see
    the module; the residuals' dispersion is shrunk toward the labels' own, not a binary outcome's).

    Raises:
        ValueError: fewer than 2 labels, mismatched lengths, non-finite values, or no unlabeled row when
            ``finite`` is False.
    """
    y, f, u = _array(labels, "labels"), _array(judged, "judged"), _array(unlabeled, "unlabeled")
    _two_labels(y)
    n, m = len(y), len(u)
    if finite:
        if scale is not None and np.ptp(y) == 0:  # labels all alike: nothing to check the judge against
            return labels_mean(y, rows=n + m, alpha=alpha, scale=scale)
        tuned = lam is None and (scale is None or n >= MIN_JUDGED)
        weight = tuned_lambda(y, f) if tuned else (0.0 if lam is None else float(lam))
        everywhere = float(np.concatenate([f, u]).mean())
        value = weight * everywhere + float(np.mean(y - weight * f))
        resid = float(np.var(y - weight * f, ddof=1))
        if tuned and weight > 0:  # lam fitted on these labels: HC2's residuals
            resid = float(np.sum(adjusted_residuals(y, f, weight) ** 2)) / (n - 1)
        keep = max(0.0, 1 - n / (n + m))
        if scale is not None:
            alone = 1.0 if weight == 0 else dispersion(float(np.var(y, ddof=1)), n, float(y.mean()), scale, cap=True)
            return score_interval(value, resid, n, keep, scale, alpha, cap=weight == 0, toward=alone, rows=n + m,
                                  lam=weight)
        resid = residual_floor(resid, y)
        se = math.sqrt(keep * resid / n)
        return _interval(value, se, alpha, labeled=n, rows=n + m, lam=weight, residual_var=resid, df=n - 1)
    if m < 2:
        raise ValueError(f"unlabeled: expected at least 2 scores for the source's mean, got {m}")
    pooled = float(np.var(np.concatenate([f, u]), ddof=1))
    weight = tuned_lambda(y, f, unlabeled=m, pooled_var=pooled) if lam is None else float(lam)
    value = weight * float(u.mean()) + float(np.mean(y - weight * f))
    resid = float(np.var(y - weight * f))
    se = math.sqrt(weight ** 2 * float(np.var(u)) / m + resid / n)
    return _interval(value, se, alpha, labeled=n, rows=n + m, lam=weight, residual_var=resid)


def worth_of(labels: Estimate, judged: Estimate) -> float | None:
    """What a judge-assisted estimate is worth in labels: the labels-only variance over its own (1 when both are
    0; None when only its own is); for score intervals, the ratio of their variances at one mean (of ``rho``)."""
    if labels.score_factor is not None and judged.score_factor is not None and judged.score_factor > 0:
        return labels.score_factor / judged.score_factor
    if judged.se > 0:
        return labels.se ** 2 / judged.se ** 2
    if labels.se == 0:
        return 1.0
    return None


def labels_worth(labels: Numbers, scores: Numbers) -> dict[str, float | int]:
    """What a judge is worth in labels, on labeled rows it scored (a test split), as ``judgetune estimate``
    computes it: ``labels_worth``, the labels' variance over that of ``label - lam * score`` with the power-tuned
    ``lam`` (clipped to [0, 1]) and HC2's residuals for a ``lam`` fitted on the same labels (n labels with this
    judge on many more scored rows estimate a mean about as precisely as ``labels_worth * n`` labels alone; at
    most n, see ``residual_floor``); ``plain``, the same with ``lam = 1`` (the calibrated score taken as it is,
    below 1 when it adds noise); ``lambda``; ``n``.

    Raises:
        ValueError: fewer than 2 labels or mismatched lengths.
    """
    y, f = _array(labels, "labels"), _array(scores, "scores")
    _two_labels(y)
    weight = tuned_lambda(y, f)
    var = float(np.var(y, ddof=1))

    def ratio(resid: float) -> float:
        if resid > 0:
            return var / resid
        return 1.0 if var == 0 else math.inf

    fitted = float(np.sum(adjusted_residuals(y, f, weight) ** 2)) / (len(y) - 1) if weight > 0 else var
    return {"labels_worth": ratio(residual_floor(fitted, y)),
            "plain": ratio(residual_floor(float(np.var(y - f, ddof=1)), y)), "lambda": weight, "n": len(y)}
