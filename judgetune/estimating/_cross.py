"""A judge fitted on the labels it then helps estimate with (cross-prediction-powered inference; Zrnic and Candes,
PNAS 2024).

The labeled rows are cut into folds (whole inputs per fold, so an input's answers by two systems never sit on
both sides of a fit); for each fold a ridge regression of the label on the features (the frozen judge's score,
and with ``signals`` the hybrid judge's cheap signals) is fitted on the other folds and predicts the fold's rows;
every unlabeled row gets the mean of the fold models' predictions. No labeled row is predicted by a model that saw
its label, so ``label - prediction`` on the labeled rows corrects the predictions' mean without bias, as a frozen
judge's score does in PPI; the estimate weighs the predictions by their slope within systems, pooled over every
system's labels (``pooled_weight``).

One model is fitted on every system's labels together: with a few labels per system it has many more to learn
from than a per-system weight, which is what makes a judge worth labels at 5 or 10 labels a system.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from judgetune.errors import JudgetuneError
from judgetune.estimating._estimate import Estimates, estimate_observations
from judgetune.estimating._rows import Observations

__all__ = ["FITS", "FOLDS", "MIN_FIT_LABELS", "cross_fit", "cross_observations", "fitted_estimates", "pooled_weight"]

FOLDS = 5
MIN_FIT_LABELS = 10  # labeled rows in all below which no model is fitted
FITS = ("score", "signals")
ALPHAS = np.logspace(-2, 4, 13)


def _folds(labeled: np.ndarray, inputs: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Each labeled row's fold (-1 unlabeled): whole inputs per fold where rows name their input."""
    from judgetune.datasets import fold_of

    rows = np.flatnonzero(labeled)
    groups = [f"input-{k}" if k >= 0 else f"row-{r}" for r, k in zip(rows, inputs[rows])]
    out = np.full(len(labeled), -1)
    out[rows] = fold_of(len(rows), groups, folds=min(folds, len(set(groups))), seed=seed)
    return out


def _design(features: np.ndarray) -> np.ndarray:
    """Features with missing values at their column's mean and a column per feature that has any missing."""
    x = np.asarray(features, dtype=float)
    means = np.nanmean(np.where(np.isfinite(x), x, np.nan), axis=0)
    missing = ~np.isfinite(x)
    filled = np.where(missing, np.nan_to_num(means)[None, :], x)
    flags = missing[:, missing.any(axis=0)].astype(float)
    return np.hstack([filled, flags])


def cross_fit(labels: np.ndarray, features: np.ndarray, inputs: np.ndarray, scale: tuple[float, float], *,
              folds: int = FOLDS, seed: int = 0) -> np.ndarray:
    """Every row's prediction of its label (``labels``: nan where unlabeled): out of fold for a labeled row, the
    fold models' mean for the others; clipped to ``scale``.

    Raises:
        JudgetuneError: fewer than ``MIN_FIT_LABELS`` labeled rows.
    """
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    labeled = ~np.isnan(labels)
    if labeled.sum() < MIN_FIT_LABELS:
        raise JudgetuneError(f"--fit: {int(labeled.sum())} labeled row(s); a judge is fitted on at least "
                             f"{MIN_FIT_LABELS} (label more, or estimate without --fit)")
    x = _design(features)
    fold = _folds(labeled, inputs, folds, seed)
    out = np.full(len(labels), np.nan)
    unlabeled = []
    for k in np.unique(fold[labeled]):
        train = labeled & (fold != k)
        model = make_pipeline(StandardScaler(), RidgeCV(alphas=ALPHAS)).fit(x[train], labels[train])
        held = fold == k
        out[held] = model.predict(x[held])
        unlabeled.append(model.predict(x[~labeled]) if (~labeled).any() else np.zeros(0))
    if (~labeled).any():
        out[~labeled] = np.mean(unlabeled, axis=0)
    return np.clip(out, *scale)


def cross_observations(obs: Observations, features: np.ndarray, scale: tuple[float, float], *,
                       folds: int = FOLDS, seed: int = 0) -> Observations:
    """``obs`` with its scores replaced by the cross-fitted predictions (``features``: one row per observation)."""
    if len(features) != len(obs.labels):
        raise ValueError(f"features: expected {len(obs.labels)} rows, got {len(features)}")
    # a comparison's outcome is who won (a tie in the middle): the model learns that, on the scale's ends
    target = np.sign(obs.labels) * scale[1] if obs.pairwise else obs.labels
    predicted = cross_fit(target, features, obs.inputs, scale, folds=folds, seed=seed)
    return replace(obs, scores=predicted)


def pooled_weight(obs: Observations, scale: tuple[float, float]) -> float:
    """The weight on the cross-fitted predictions: the least-squares slope of the fitted outcome (the label; who won,
    for a comparison) on the prediction within systems, pooled over every system's labeled rows, clipped to [0, 1].
    Predictions that follow the labels keep about 1; predictions that do not (a model fitted on signals the labels
    ignore) get about 0, so they cost no width."""
    labeled = ~np.isnan(obs.labels) & ~np.isnan(obs.scores)
    codes = obs.system if not obs.pairwise else np.zeros(len(obs.labels), dtype=int)
    outcome = np.sign(obs.labels) * scale[1] if obs.pairwise else obs.labels
    across = within = 0.0
    for code in np.unique(codes[labeled]):
        rows = labeled & (codes == code)
        y, f = outcome[rows], obs.scores[rows]
        across += float(np.sum((y - y.mean()) * (f - f.mean())))
        within += float(np.sum((f - f.mean()) ** 2))
    return float(np.clip(across / within, 0.0, 1.0)) if within > 0 else 0.0


def fitted_estimates(obs: Observations, scale: tuple[float, float], fit: str, *, alpha: float = 0.05,
                     seed: int = 0) -> Estimates:
    """Every system's and pair's estimates with a judge cross-fitted on ``obs``' labels (``fit``: ``score``, a
    model of the frozen judge's score; ``signals``, of the score and the hybrid's cheap signals of each row's texts).

    Raises:
        JudgetuneError: an unknown ``fit``, no texts for ``signals``, or too few labels.
    """
    if fit not in FITS:
        raise JudgetuneError(f"--fit {fit}: expected one of {', '.join(FITS)}")
    features = obs.scores[:, None]
    if fit == "signals":
        if obs.examples is None:
            raise JudgetuneError("--fit signals reads each row's texts; give the data without --scores, or --fit score")
        from judgetune.judges import signal_features

        features = np.column_stack([features, signal_features(obs.examples)[0]])
    crossed = cross_observations(obs, features, scale, seed=seed)
    estimates = estimate_observations(crossed, scale, alpha=alpha, lam=pooled_weight(crossed, scale),
                                      method="cross")
    labeled = int((~np.isnan(obs.labels)).sum())
    estimates.notes.append(f"cross: a judge fitted on the {labeled} labels ({fit}: ridge, {FOLDS} folds over whole "
                           "inputs), each labeled row predicted by the folds that did not see it")
    return estimates
