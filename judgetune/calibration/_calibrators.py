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
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, TypeAdapter, ValidationError, model_validator
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.dummy import DummyRegressor
from sklearn.linear_model import QuantileRegressor
from sklearn.model_selection import cross_val_predict

from judgetune.datasets import group_folds

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

    def off_scale(self, raw: Any) -> np.ndarray:
        """Per raw score: whether the map lies off the scale there, so that ``predict`` clips it to an end."""
        low, high = self._range()
        mapped = self._map(_column(raw))
        return (mapped < low) | (mapped > high)

    def _map(self, raw: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def is_flat(self) -> bool:
        """Whether the fitted map gives every raw score the same value (it ranks nothing)."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """The fitted calibrator as plain JSON (``calibrator_from_dict`` reads it back)."""
        raise NotImplementedError


class LinearCalibrator(Calibrator):
    """An affine map fitted by median (L1) regression, clipped to the scale: the error that counts is the
    absolute one, and the conditional median minimizes it (least squares fits the mean). Its slope is
    never negative: calibration maps a judge onto the human scale and keeps its order (as isotonic
    does); a judge whose scores fall as the labels rise gets slope 0, the labels' median, instead of
    being turned upside down by a few items."""

    kind = "linear"

    def fit(self, raw: Any, gold: Sequence[float]) -> LinearCalibrator:
        self._range()
        x, y = _column(raw), np.asarray(gold, dtype=float)
        slope, intercept = 0.0, float(np.median(y))
        if np.ptp(x) > 0:
            model = QuantileRegressor(quantile=0.5, alpha=0.0, solver="highs").fit(x.reshape(-1, 1), y)
            if model.coef_[0] > 0:  # L1 is convex: with a falling fit the best non-negative slope is 0
                slope, intercept = float(model.coef_[0]), float(model.intercept_)
        self.slope_, self.intercept_ = slope, intercept
        return self

    def _map(self, raw: np.ndarray) -> np.ndarray:
        return self.slope_ * raw + self.intercept_

    def is_flat(self) -> bool:
        return self.slope_ == 0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "label_range": [float(v) for v in self.label_range], "slope": self.slope_,
                "intercept": self.intercept_}


def isotonic_l1(x: np.ndarray, y: np.ndarray) -> tuple[list[float], list[float]]:
    """The non-decreasing fit of ``y`` on ``x`` with the least absolute error, as knots (x, y).

    Pool-adjacent-violators with medians: items of equal ``x`` start as one block, a block's value
    is the median of its labels, and neighbouring blocks that violate the order are merged (the
    median of the union) until none does. PAVA solves any separable convex loss this way; for the
    absolute error the block minimizer is the median. Each block gives a knot at its lowest and its
    highest ``x``; between blocks the map is linear (as scikit-learn's IsotonicRegression predicts).
    Hand-written because scikit-learn's IsotonicRegression fits the squared error only.
    """
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order]
    blocks: list[tuple[float, float, list[float], float]] = []  # (x low, x high, labels, median)
    for value in np.unique(xs):
        labels = ys[xs == value].tolist()
        low = high = float(value)
        while blocks and blocks[-1][3] > float(np.median(labels)):
            prev = blocks.pop()
            labels, low = prev[2] + labels, prev[0]
        blocks.append((low, high, labels, float(np.median(labels))))
    knots_x, knots_y = [], []
    for low, high, _, median in blocks:
        knots_x += [low] if low == high else [low, high]
        knots_y += [median] if low == high else [median, median]
    return knots_x, knots_y


class IsotonicCalibrator(Calibrator):
    """Monotone non-decreasing step-wise linear map with the least absolute error (see ``isotonic_l1``),
    stored as its knots."""

    kind = "isotonic"

    def fit(self, raw: Any, gold: Sequence[float]) -> IsotonicCalibrator:
        low, high = self._range()
        x, y = isotonic_l1(_column(raw), np.asarray(gold, dtype=float))
        self.x_, self.y_ = x, [float(min(max(v, low), high)) for v in y]
        return self

    def _map(self, raw: np.ndarray) -> np.ndarray:
        if len(self.x_) == 1:
            return np.full_like(raw, self.y_[0])
        return np.interp(raw, self.x_, self.y_)  # clips at the ends, as IsotonicRegression(out_of_bounds="clip")

    def is_flat(self) -> bool:
        return len(set(self.y_)) <= 1

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "label_range": [float(v) for v in self.label_range], "x": self.x_, "y": self.y_}


class ConstantCalibrator(Calibrator):
    """The trivial map: every raw score to the training labels' median (the best constant under absolute
    error). A candidate form, so that cross-validation can say when the judge's scores buy nothing."""

    kind = "constant"

    def fit(self, raw: Any, gold: Sequence[float]) -> ConstantCalibrator:
        low, high = self._range()
        _column(raw)
        median = DummyRegressor(strategy="median").fit(np.zeros((len(gold), 1)), np.asarray(gold, dtype=float))
        self.value_ = float(min(max(float(median.constant_[0][0]), low), high))
        return self

    def _map(self, raw: np.ndarray) -> np.ndarray:
        return np.full(raw.shape, self.value_)

    def is_flat(self) -> bool:
        return True

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "label_range": [float(v) for v in self.label_range], "value": self.value_}


CALIBRATORS: dict[str, type[Calibrator]] = {"linear": LinearCalibrator, "isotonic": IsotonicCalibrator,
                                            "constant": ConstantCalibrator}
CALIBRATOR_KINDS = ("isotonic", "linear", "constant")  # the forms a run chooses among, by cross-validated MAE
_FIELDS = {"linear": ("slope", "intercept"), "isotonic": ("x", "y"), "constant": ("value",)}


class _State(BaseModel):
    """A fitted calibrator's JSON, as ``to_dict`` writes it: exactly these fields, finite numbers."""

    model_config = ConfigDict(extra="forbid", strict=True)
    label_range: list[FiniteFloat] = Field(min_length=2, max_length=2)

    @model_validator(mode="after")
    def _ordered(self) -> _State:
        if not self.label_range[0] < self.label_range[1]:
            raise ValueError(f"label_range must be finite with low below high, got {self.label_range}")
        return self


    def _on_scale(self, field: str, values: list[float]) -> None:
        """A map's fixed outputs lie on its scale: off it, predict would clip every item to one end in silence."""
        low, high = self.label_range
        off = next((v for v in values if not low <= v <= high), None)
        if off is not None:
            raise ValueError(f"{field}: expected a score within label_range [{low:g}, {high:g}], found {off:g}")


class _LinearState(_State):
    kind: Literal["linear"]
    slope: FiniteFloat
    intercept: FiniteFloat

    @model_validator(mode="after")
    def _flat_on_scale(self) -> _LinearState:
        if self.slope < 0:  # fit never gives one: it would turn the judge's order upside down
            raise ValueError(f"slope: expected 0 or more (a calibrator keeps the judge's order), found {self.slope:g}")
        if self.slope == 0:  # a flat line gives every item its intercept
            self._on_scale("intercept (slope 0)", [self.intercept])
        return self


class _IsotonicState(_State):
    kind: Literal["isotonic"]
    x: list[FiniteFloat] = Field(min_length=1)
    y: list[FiniteFloat] = Field(min_length=1)

    @model_validator(mode="after")
    def _knots(self) -> _IsotonicState:
        if len(self.x) != len(self.y):
            raise ValueError("x and y must be of one length")
        if any(b < a for a, b in zip(self.x, self.x[1:])):
            raise ValueError("x must be non-decreasing")
        falls = next((i for i in range(1, len(self.y)) if self.y[i] < self.y[i - 1]), None)
        if falls is not None:  # fit never gives one: a falling map turns the judge's order upside down
            raise ValueError(f"y: expected non-decreasing values (a calibrator keeps the judge's order), found "
                             f"{self.y[falls]:g} after {self.y[falls - 1]:g} (y[{falls}])")
        self._on_scale("y", self.y)  # fitted knots are clipped to the scale
        return self


class _ConstantState(_State):
    kind: Literal["constant"]
    value: FiniteFloat

    @model_validator(mode="after")
    def _value_on_scale(self) -> _ConstantState:
        self._on_scale("value", [self.value])
        return self


_STATE = TypeAdapter(Annotated[_LinearState | _IsotonicState | _ConstantState, Field(discriminator="kind")])


def calibrator_from_dict(data: dict[str, Any]) -> Calibrator:
    """Rebuild a fitted calibrator from its ``to_dict`` (checked by the pydantic models above).

    Raises:
        ValueError: an unknown kind, a missing or extra field, a non-finite number, a reversed range,
            naming the field.
    """
    try:
        state = _STATE.validate_python(data)
    except ValidationError as err:
        problems = []
        for e in err.errors():
            where = ".".join(str(part) for part in e["loc"][1:])  # loc[0] is the kind's tag
            message = e["msg"].removeprefix("Value error, ")
            problems.append(f"{where}: {message}" if where else message)
        kind = data.get("kind") if isinstance(data, dict) else None
        raise ValueError(f"{kind + ' ' if kind in CALIBRATORS else ''}calibrator: {'; '.join(problems)}") from None
    calibrator = CALIBRATORS[state.kind](tuple(state.label_range))
    for name in _FIELDS[state.kind]:
        setattr(calibrator, f"{name}_", getattr(state, name))
    return calibrator


def cross_fitted(raw: Sequence[float], gold: Sequence[float], *, label_range: tuple[float, float],
                 groups: Sequence[str] | None = None, kinds: Sequence[str] = CALIBRATOR_KINDS, folds: int = 5,
                 seed: int = 0) -> tuple[np.ndarray, str, dict[str, float]]:
    """Out-of-fold calibrated predictions (``cross_val_predict`` over ``group_folds``) of the calibrator
    kind with the lowest MAE among ``kinds``, that kind, and every kind's out-of-fold MAE.

    Raises:
        ValueError: fewer than 4 pairs, lists of different lengths, an unknown kind.
    """
    x, y = _column(raw), np.asarray(gold, dtype=float)
    if len(x) != len(y) or len(x) < 4:
        raise ValueError(f"need at least 4 (raw, human) pairs of equal length to calibrate, got {len(x)}")
    unknown = sorted(set(kinds) - set(CALIBRATORS))
    if unknown:
        raise ValueError(f"calibrator kinds must be among {sorted(CALIBRATORS)}, got {unknown}")
    cv, keys = group_folds(len(x), groups, folds=folds, seed=seed)
    preds, maes = {}, {}
    for kind in kinds:
        preds[kind] = cross_val_predict(CALIBRATORS[kind](label_range), x.reshape(-1, 1), y, groups=keys, cv=cv)
        maes[kind] = float(np.mean(np.abs(preds[kind] - y)))
    best = min(kinds, key=lambda k: (maes[k], list(kinds).index(k)))
    return preds[best], best, maes


def cross_validated_mae(kind: str, raw: Sequence[float], gold: Sequence[float], *, label_range: tuple[float, float],
                        groups: Sequence[str] | None = None, folds: int = 5, seed: int = 0) -> float:
    """Mean absolute error of a calibrator kind on held-out folds (``group_folds``: whole groups held out)."""
    return cross_fitted(raw, gold, label_range=label_range, groups=groups, kinds=(kind,), folds=folds, seed=seed)[2][kind]


def fit_calibrator(raw: Sequence[float], gold: Sequence[float], *, label_range: tuple[float, float],
                   groups: Sequence[str] | None = None, kinds: Sequence[str] = CALIBRATOR_KINDS, folds: int = 5,
                   seed: int = 0) -> tuple[Calibrator, dict]:
    """The calibrator kind with the lowest group-wise cross-validated MAE (``cross_fitted``), refitted on
    all the data, and every kind's CV MAE. When the constant wins, or the fitted map is flat, it says so
    in one warning: the judge's scores then buy nothing over the labels' median on these items.

    Args:
        groups: the examples' groups (questions); a fold never splits one.

    Raises:
        ValueError: fewer than 4 pairs to fit on, or lists of different lengths.
    """
    if len(raw) != len(gold) or len(raw) < 4:
        raise ValueError(f"need at least 4 (raw, human) pairs of equal length to calibrate, got {len(raw)}")
    _, best, cv = cross_fitted(raw, gold, label_range=label_range, groups=groups, kinds=kinds, folds=folds, seed=seed)
    calibrator = CALIBRATORS[best](label_range).fit(raw, gold)
    mapped = calibrator.predict(raw)
    if best == "constant":
        log.warning("the constant calibrator (the labels' median, %.3f) has the lowest cross-validated MAE on these %d "
                    "items (%s): the judge's scores do not beat guessing the median; the frozen judge ranks nothing",
                    float(mapped[0]), len(raw), ", ".join(f"{k} {v:.3f}" for k, v in cv.items()))
    elif np.ptp(mapped) == 0:
        log.warning("the %s calibrator fitted on %d items is flat: every item will get the same score, %.3f "
                    "(no range of the judge's scores has a different median label: they do not rise with the labels, or too "
                    "few labels differ from the rest, as with a rare class); the frozen judge ranks nothing",
                    best, len(raw), float(mapped[0]))
    return calibrator, cv
