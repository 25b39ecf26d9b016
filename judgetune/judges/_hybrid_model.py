"""The hybrid judge's fitted model: signals normalized per item or group, optional interactions, and a ridge,
logistic or pairwise fit, stored as plain JSON."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, ValidationError
from scipy import stats

from judgetune.errors import JudgetuneError

NORMALIZATIONS = ("global", "z", "rank")


GROUP_NORMALIZATIONS = ("z", "rank")  # read the other candidates of the item's group: the group protocol


MODELS = ("ridge", "logistic", "pairwise")


MAX_PAIRS_PER_GROUP = 400


NEUTRAL = {"z": 0.0, "rank": 0.5, "global": 0.0}  # a missing feature after normalization: no information


def normalize(x: np.ndarray, groups: Sequence[str], how: str, *, center: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Features normalized per group (``z``, ``rank``) or with the training statistics (``global``).
    A missing feature (NaN: its signal failed on that item) becomes the neutral value: the group's
    mean for ``z``, the middle rank for ``rank``, the training mean for ``global``."""
    x = np.asarray(x, dtype=float)
    if how == "global":
        out = (x - center) / scale
    else:
        out = np.full_like(x, np.nan)
        members: dict[str, list[int]] = defaultdict(list)
        for i, g in enumerate(groups):
            members[g].append(i)
        for rows in members.values():
            for col in range(x.shape[1]):
                values = x[rows, col]
                seen = ~np.isnan(values)
                if how == "z":
                    spread = values[seen].std() if seen.any() else 0.0
                    column = (values - values[seen].mean()) / spread if spread > 0 else np.where(seen, 0.0, np.nan)
                elif seen.sum() > 1:
                    column = np.full(len(rows), np.nan)
                    column[seen] = (stats.rankdata(values[seen]) - 1) / (seen.sum() - 1)
                else:
                    column = np.where(seen, 0.5, np.nan)
                out[rows, col] = column
    return np.where(np.isnan(out), NEUTRAL[how], out)


def with_interactions(z: np.ndarray) -> np.ndarray:
    """The normalized features followed by the product of every pair of them, squares included.

    The columns of scikit-learn's ``PolynomialFeatures(2, include_bias=False)``, in its order; written out
    because that class refuses NaN, which marks a signal an item lacks (it must stay NaN in the products)."""
    rows, cols = np.triu_indices(z.shape[1])
    return np.hstack([z, z[:, rows] * z[:, cols]])


def training_pairs(x: np.ndarray, y: np.ndarray, groups: Sequence[str], *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Feature differences of two answers with different labels, within a group (across the data when
    every group is a single item), both orders, at most ``MAX_PAIRS_PER_GROUP`` per group (seeded)."""
    rng = random.Random(seed)
    members: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    blocks = list(members.values()) if any(len(m) > 1 for m in members.values()) else [list(range(len(y)))]
    diffs, signs = [], []
    for rows in blocks:
        pairs = [(i, j) for a, i in enumerate(rows) for j in rows[a + 1:] if y[i] != y[j]]
        if len(rows) > 200:  # the whole data as one block: draw pairs instead of listing them all
            pairs = [(i, j) for i, j in (rng.sample(rows, 2) for _ in range(20 * len(rows))) if y[i] != y[j]]
        rng.shuffle(pairs)
        for i, j in pairs[:MAX_PAIRS_PER_GROUP]:
            diffs.extend([x[i] - x[j], x[j] - x[i]])
            signs.extend([int(y[i] > y[j]), int(y[j] > y[i])])
    if not diffs or len(set(signs)) < 2:
        raise JudgetuneError("the pairwise model needs training answers of different labels within a group")
    return np.asarray(diffs), np.asarray(signs)


class HybridState(BaseModel):
    """A fitted hybrid judge's state (judge.json's ``fitted``): the model as ``HybridModel.to_dict`` writes it,
    the signals dropped at fit time and BM25's corpus statistics (checked by ``BM25Judge.check_fitted``). The
    types are checked here; what depends on the number of features, by ``HybridModel.from_dict``."""

    model_config = ConfigDict(extra="forbid", strict=True)
    features: list[str]
    normalization: str
    model: str
    alpha: FiniteFloat
    interactions: bool = False
    seed: int = 0
    monotone: bool = False
    center: list[FiniteFloat]
    scale: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]]
    coef: list[FiniteFloat] | list[list[FiniteFloat]]
    intercept: FiniteFloat | list[FiniteFloat]
    classes: list[FiniteFloat] | None = None
    score_range: list[FiniteFloat] = Field(min_length=2, max_length=2)
    dropped: list[str] = []
    bm25: dict[str, Any] | None = None


class HybridModel:
    """Normalization plus a linear model over named features; ``fit`` returns self, the learned
    state is plain data (trailing underscores) and round-trips through ``to_dict``/``from_dict``."""

    def __init__(self, features: Sequence[str], *, normalization: str = "global", model: str = "ridge",
                 alpha: float = 1.0, interactions: bool = False, seed: int = 0, monotone: bool = False):
        if normalization not in NORMALIZATIONS or model not in MODELS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS} and model one of {MODELS}")
        if not isinstance(interactions, bool):
            raise ValueError(f"interactions must be true or false, got {interactions!r}")
        if not isinstance(monotone, bool):
            raise ValueError(f"monotone must be true or false, got {monotone!r}")
        if monotone and model != "ridge":
            raise ValueError(f"monotone: only the ridge model takes non-negative coefficients, not {model}")
        self.features, self.normalization, self.model, self.alpha, self.interactions, self.seed = (
            list(features), normalization, model, float(alpha), interactions, seed)
        self.monotone = monotone  # ridge with non-negative coefficients: each feature can only raise the score

    def inputs(self, x: np.ndarray, groups: Sequence[str]) -> np.ndarray:
        """The linear model's inputs: normalized features, with their pairwise products if ``interactions``."""
        z = normalize(x, groups, self.normalization, center=self.center_, scale=self.scale_)
        return with_interactions(z) if self.interactions else z

    def fit(self, x: np.ndarray, y: Sequence[float], groups: Sequence[str]) -> HybridModel:
        from sklearn.linear_model import LogisticRegression, Ridge

        y = np.asarray(y, dtype=float)
        self.center_ = np.nan_to_num(np.nanmean(x, axis=0))
        spread = np.nan_to_num(np.nanstd(x, axis=0))
        self.scale_ = np.where(spread > 0, spread, 1.0)
        z = self.inputs(x, groups)
        self.classes_ = None
        if self.model == "ridge":
            fitted = Ridge(alpha=self.alpha, positive=self.monotone).fit(z, y)
            self.coef_, self.intercept_ = np.asarray(fitted.coef_, dtype=float), float(fitted.intercept_)
        elif self.model == "logistic":
            labels = np.rint(y)
            if len(set(labels)) < 2:
                raise JudgetuneError("the logistic model needs at least two distinct training labels")
            fitted = LogisticRegression(C=1 / self.alpha, max_iter=2000).fit(z, labels)
            self.coef_, self.intercept_ = np.asarray(fitted.coef_, dtype=float), np.asarray(fitted.intercept_, dtype=float)
            self.classes_ = [float(c) for c in fitted.classes_]
        else:
            diffs, signs = training_pairs(z, y, groups, seed=self.seed)
            fitted = LogisticRegression(C=1 / self.alpha, fit_intercept=False, max_iter=2000).fit(diffs, signs)
            self.coef_, self.intercept_ = np.asarray(fitted.coef_[0], dtype=float), 0.0
        scores, _ = self._scores(z)
        self.score_range_ = (float(scores.min()), float(scores.max()) if scores.max() > scores.min() else
                             float(scores.min()) + 1.0)
        if self.classes_ is not None:
            self.score_range_ = (min(self.classes_), max(self.classes_))
        return self

    def _scores(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        if self.classes_ is None:
            return z @ self.coef_ + self.intercept_, None
        logits = z @ self.coef_.T + self.intercept_
        if logits.ndim == 1 or logits.shape[1] == 1:  # two classes: sklearn keeps one row of coefficients
            p1 = 1 / (1 + np.exp(-logits.reshape(-1)))
            probs = np.column_stack([1 - p1, p1])
        else:
            probs = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs /= probs.sum(axis=1, keepdims=True)
        return probs @ np.asarray(self.classes_), probs

    def predict(self, x: np.ndarray, groups: Sequence[str]) -> tuple[np.ndarray, np.ndarray | None]:
        """Scores, and class probabilities for the logistic model (None otherwise)."""
        return self._scores(self.inputs(x, groups))

    def to_dict(self) -> dict[str, Any]:
        return {"features": self.features, "normalization": self.normalization, "model": self.model,
                "alpha": self.alpha, "interactions": self.interactions, "seed": self.seed, "monotone": self.monotone,
                "center": self.center_.tolist(), "scale": self.scale_.tolist(),
                "coef": self.coef_.tolist(), "intercept": self.intercept_ if np.isscalar(self.intercept_)
                else self.intercept_.tolist(), "classes": self.classes_, "score_range": list(self.score_range_)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HybridModel:
        """Rebuild a fitted model, checking every field.

        Raises:
            ValueError: naming the missing or malformed field.
        """
        try:
            state = HybridState.model_validate(data)
        except ValidationError as err:
            raise ValueError("fitted: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                                    for e in err.errors())) from None
        try:
            model = cls(state.features, normalization=state.normalization, model=state.model, alpha=state.alpha,
                        interactions=state.interactions, seed=state.seed, monotone=state.monotone)
        except ValueError as err:
            raise ValueError(f"fitted: {err}") from None
        n = len(model.features)
        width = n + n * (n + 1) // 2 if model.interactions else n
        model.center_, model.scale_ = np.asarray(state.center, dtype=float), np.asarray(state.scale, dtype=float)
        model.coef_ = np.asarray(state.coef, dtype=float)
        model.intercept_ = np.asarray(state.intercept) if isinstance(state.intercept, list) else state.intercept
        model.classes_ = state.classes
        model.score_range_ = tuple(state.score_range)
        if model.center_.shape != (n,) or model.scale_.shape != (n,):
            raise ValueError(f"fitted: center and scale must be {n} numbers, one per feature")
        if model.coef_.shape[-1] != width:
            raise ValueError(f"fitted: coef: expected {width} coefficients per row (one per "
                             f"{'feature and pair of features' if model.interactions else 'feature'}), "
                             f"found shape {list(model.coef_.shape)}")
        if (model.classes_ is None) != (model.model != "logistic"):
            raise ValueError("fitted: classes: required exactly for the logistic model")
        if model.classes_ is not None and model.coef_.ndim != 2:
            raise ValueError("fitted: coef: the logistic model needs a matrix (a row per class, or one row for two)")
        if not model.score_range_[0] < model.score_range_[1]:
            raise ValueError(f"fitted: score_range: expected [low, high] with low < high, found {state.score_range}")
        return model
