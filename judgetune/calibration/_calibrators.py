"""Calibrators: map a judge's raw scores onto the human scale, fitted on dev data.

They are scikit-learn estimators (``__init__`` stores its parameters unchanged, ``fit`` returns
self, learned state in trailing-underscore attributes), so scikit-learn's model selection runs
them; the choice between kinds is cross-validated over the examples' groups (``GroupKFold``: dev
holds many answers per question, and a question's answers must not sit on both sides of a fold).
They serialize to plain JSON, so a frozen judge config holds them without pickle.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import GroupKFold, cross_val_score

log = logging.getLogger(__name__)


def _column(raw: Any) -> np.ndarray:
    """Raw scores as one feature column (1-D input is the common case)."""
    x = np.asarray(raw, dtype=float)
    if x.ndim == 2 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim != 1:
        raise ValueError(f"expected one raw score per item, got an array of shape {x.shape}")
    return x


class Calibrator(RegressorMixin, BaseEstimator):
    """Base: a monotone map from raw scores to the human scale; predictions are clipped to ``label_range``.

    Args:
        label_range: (low, high) of the human scale.
    """

    kind: str = ""

    def __init__(self, label_range: tuple[float, float] = (0.0, 1.0)):
        self.label_range = label_range

    def _range(self) -> tuple[float, float]:
        low, high = (float(v) for v in self.label_range)
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"label_range must be finite with low below high, got {list(self.label_range)}")
        return low, high

    def fit(self, raw: Any, gold: Sequence[float]) -> Calibrator:
        raise NotImplementedError

    def predict(self, raw: Any) -> np.ndarray:
        return np.clip(self._map(_column(raw)), *self._range())

    def _map(self, raw: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """The fitted calibrator as plain JSON (``calibrator_from_dict`` reads it back)."""
        raise NotImplementedError


class LinearCalibrator(Calibrator):
    """An affine map (least squares), clipped to the scale. Its slope is never negative: calibration maps
    a judge onto the human scale and keeps its order (as isotonic does); a judge whose scores fall as
    the labels rise gets slope 0, the labels' mean, instead of being turned upside down by a few items."""

    kind = "linear"

    def fit(self, raw: Any, gold: Sequence[float]) -> LinearCalibrator:
        self._range()
        model = LinearRegression(positive=True).fit(_column(raw).reshape(-1, 1), np.asarray(gold, dtype=float))
        self.slope_, self.intercept_ = float(model.coef_[0]), float(model.intercept_)
        return self

    def _map(self, raw: np.ndarray) -> np.ndarray:
        return self.slope_ * raw + self.intercept_

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "label_range": [float(v) for v in self.label_range], "slope": self.slope_,
                "intercept": self.intercept_}


class IsotonicCalibrator(Calibrator):
    """Monotone non-decreasing step-wise linear map (scikit-learn's IsotonicRegression), stored as its knots."""

    kind = "isotonic"

    def fit(self, raw: Any, gold: Sequence[float]) -> IsotonicCalibrator:
        low, high = self._range()
        model = IsotonicRegression(y_min=low, y_max=high, out_of_bounds="clip")
        model.fit(_column(raw), np.asarray(gold, dtype=float))
        self.x_, self.y_ = [float(x) for x in model.X_thresholds_], [float(y) for y in model.y_thresholds_]
        return self

    def _map(self, raw: np.ndarray) -> np.ndarray:
        if len(self.x_) == 1:
            return np.full_like(raw, self.y_[0])
        return np.interp(raw, self.x_, self.y_)  # what IsotonicRegression.predict does, clipping at the ends

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "label_range": [float(v) for v in self.label_range], "x": self.x_, "y": self.y_}


CALIBRATORS: dict[str, type[Calibrator]] = {"linear": LinearCalibrator, "isotonic": IsotonicCalibrator}
_FIELDS = {"linear": ("slope", "intercept"), "isotonic": ("x", "y")}


def calibrator_from_dict(data: dict[str, Any]) -> Calibrator:
    """Rebuild a fitted calibrator from its ``to_dict``.

    Raises:
        ValueError: an unknown kind, a missing or extra field, a non-finite number, a reversed range.
    """
    if not isinstance(data, dict):
        raise ValueError(f"expected an object, got {type(data).__name__}")
    kind = data.get("kind")
    if kind not in CALIBRATORS:
        raise ValueError(f"calibrator kind must be one of {sorted(CALIBRATORS)}, got {kind!r}")
    fields = {"kind", "label_range", *_FIELDS[kind]}
    if set(data) != fields:
        raise ValueError(f"{kind} calibrator: expected exactly the fields {sorted(fields)}, got {sorted(data)}")

    def finite(value: Any, name: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name}: expected a finite number, got {value!r}")
        return float(value)

    if not isinstance(data["label_range"], list) or len(data["label_range"]) != 2:
        raise ValueError(f"label_range: expected [low, high], got {data['label_range']!r}")
    calibrator = CALIBRATORS[kind](tuple(finite(v, "label_range") for v in data["label_range"]))
    calibrator._range()
    if kind == "linear":
        calibrator.slope_, calibrator.intercept_ = finite(data["slope"], "slope"), finite(data["intercept"], "intercept")
    else:
        x, y = data["x"], data["y"]
        if not isinstance(x, list) or not isinstance(y, list) or len(x) != len(y) or not x:
            raise ValueError("isotonic calibrator: x and y must be non-empty and of one length")
        calibrator.x_, calibrator.y_ = [finite(v, "x") for v in x], [finite(v, "y") for v in y]
        if any(b < a for a, b in zip(calibrator.x_, calibrator.x_[1:])):
            raise ValueError("isotonic calibrator: x must be non-decreasing")
    return calibrator


def cross_validated_mae(kind: str, raw: Sequence[float], gold: Sequence[float], *, label_range: tuple[float, float],
                        groups: Sequence[str] | None = None, folds: int = 5, seed: int = 0) -> float:
    """Mean absolute error of a calibrator kind on held-out folds, whole groups held out together
    (each item its own group when ``groups`` is None)."""
    x, y = _column(raw).reshape(-1, 1), np.asarray(gold, dtype=float)
    groups = np.arange(len(x)) if groups is None or len(set(groups)) < 2 else np.asarray(groups)
    n_splits = min(folds, len(set(groups.tolist())))
    cv = GroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    scores = cross_val_score(clone(CALIBRATORS[kind](label_range)), x, y, groups=groups, cv=cv,
                             scoring="neg_mean_absolute_error", error_score="raise")
    return float(-np.mean(scores))


def fit_calibrator(raw: Sequence[float], gold: Sequence[float], *, label_range: tuple[float, float],
                   groups: Sequence[str] | None = None, kinds: Sequence[str] = ("isotonic", "linear"), folds: int = 5,
                   seed: int = 0) -> tuple[Calibrator, dict]:
    """The calibrator kind with the lowest group-wise cross-validated MAE, refitted on all the data,
    and the CV figures.

    Args:
        groups: the examples' groups (questions); a fold never splits one.

    Raises:
        ValueError: fewer than 4 pairs to fit on, or lists of different lengths.
    """
    if len(raw) != len(gold) or len(raw) < 4:
        raise ValueError(f"need at least 4 (raw, human) pairs of equal length to calibrate, got {len(raw)}")
    if groups is not None and len(groups) != len(raw):
        raise ValueError(f"groups has {len(groups)} entries for {len(raw)} pairs")
    cv = {kind: cross_validated_mae(kind, raw, gold, label_range=label_range, groups=groups, folds=folds, seed=seed)
          for kind in kinds}
    best = min(cv, key=cv.get)
    calibrator = CALIBRATORS[best](label_range).fit(raw, gold)
    mapped = calibrator.predict(raw)
    if np.ptp(mapped) == 0:
        log.warning("the %s calibrator fitted on %d dev items is flat: every item will get the same score, %.3f "
                    "(the judge's dev scores do not rise with the labels); the frozen judge ranks nothing",
                    best, len(raw), float(mapped[0]))
    return calibrator, cv
