"""Calibrators: map a judge's raw scores onto the human scale, fitted on dev data.

They follow scikit-learn's conventions (``fit`` returns self, learned state in trailing-underscore
attributes) and serialize to plain JSON, so a frozen judge config holds them without pickle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import KFold


class Calibrator:
    """Base: predictions are clipped to the human ``label_range``."""

    kind: str = ""

    def __init__(self, label_range: tuple[float, float]):
        self.label_range = (float(label_range[0]), float(label_range[1]))

    def fit(self, raw: Sequence[float], gold: Sequence[float]) -> Calibrator:
        raise NotImplementedError

    def predict(self, raw: Sequence[float]) -> np.ndarray:
        return np.clip(self._map(np.asarray(raw, dtype=float)), *self.label_range)

    def _map(self, raw: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError


class LinearCalibrator(Calibrator):
    kind = "linear"

    def fit(self, raw: Sequence[float], gold: Sequence[float]) -> LinearCalibrator:
        model = LinearRegression().fit(np.asarray(raw, dtype=float).reshape(-1, 1), np.asarray(gold, dtype=float))
        self.slope_, self.intercept_ = float(model.coef_[0]), float(model.intercept_)
        return self

    def _map(self, raw: np.ndarray) -> np.ndarray:
        return self.slope_ * raw + self.intercept_

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "label_range": list(self.label_range), "slope": self.slope_,
                "intercept": self.intercept_}


class IsotonicCalibrator(Calibrator):
    """Monotone non-decreasing step-wise linear map (scikit-learn's IsotonicRegression), stored as its knots."""

    kind = "isotonic"

    def fit(self, raw: Sequence[float], gold: Sequence[float]) -> IsotonicCalibrator:
        model = IsotonicRegression(y_min=self.label_range[0], y_max=self.label_range[1], out_of_bounds="clip")
        model.fit(np.asarray(raw, dtype=float), np.asarray(gold, dtype=float))
        self.x_, self.y_ = [float(x) for x in model.X_thresholds_], [float(y) for y in model.y_thresholds_]
        return self

    def _map(self, raw: np.ndarray) -> np.ndarray:
        if len(self.x_) == 1:
            return np.full_like(raw, self.y_[0])
        return np.interp(raw, self.x_, self.y_)  # what IsotonicRegression.predict does, clipping at the ends

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "label_range": list(self.label_range), "x": self.x_, "y": self.y_}


CALIBRATORS: dict[str, type[Calibrator]] = {"linear": LinearCalibrator, "isotonic": IsotonicCalibrator}


def calibrator_from_dict(data: dict[str, Any]) -> Calibrator:
    """Rebuild a fitted calibrator from its ``to_dict``."""
    kind = data.get("kind")
    if kind not in CALIBRATORS:
        raise ValueError(f"calibrator kind must be one of {sorted(CALIBRATORS)}, got {kind!r}")
    calibrator = CALIBRATORS[kind](tuple(data["label_range"]))
    if kind == "linear":
        calibrator.slope_, calibrator.intercept_ = float(data["slope"]), float(data["intercept"])
    else:
        if len(data["x"]) != len(data["y"]) or not data["x"]:
            raise ValueError("isotonic calibrator: x and y must be non-empty and of one length")
        calibrator.x_, calibrator.y_ = [float(v) for v in data["x"]], [float(v) for v in data["y"]]
    return calibrator


def cross_validated_mae(kind: str, raw: Sequence[float], gold: Sequence[float], *,
                        label_range: tuple[float, float], folds: int = 5, seed: int = 0) -> float:
    """Mean absolute error of a calibrator kind on held-out folds."""
    x, y = np.asarray(raw, dtype=float), np.asarray(gold, dtype=float)
    errors = np.empty(len(x))
    for train, test in KFold(n_splits=min(folds, len(x)), shuffle=True, random_state=seed).split(x):
        errors[test] = np.abs(CALIBRATORS[kind](label_range).fit(x[train], y[train]).predict(x[test]) - y[test])
    return float(errors.mean())


def fit_calibrator(raw: Sequence[float], gold: Sequence[float], *, label_range: tuple[float, float],
                   kinds: Sequence[str] = ("isotonic", "linear"), folds: int = 5, seed: int = 0) -> tuple[Calibrator, dict]:
    """The calibrator kind with the lowest cross-validated MAE, refitted on all the data, and the CV figures.

    Raises:
        ValueError: fewer than 4 pairs to fit on.
    """
    if len(raw) != len(gold) or len(raw) < 4:
        raise ValueError(f"need at least 4 (raw, human) pairs of equal length to calibrate, got {len(raw)}")
    cv = {kind: cross_validated_mae(kind, raw, gold, label_range=label_range, folds=folds, seed=seed) for kind in kinds}
    best = min(cv, key=cv.get)
    return CALIBRATORS[best](label_range).fit(raw, gold), cv
