"""What tuning bought, as statistics: the shipped judge minus the default on the same test items (paired
intervals over whole groups), the shipped judge against the constant predictor, and the one rule for a
failed judgment (``filled``) that selection and these figures share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from judgetune.datasets import Example, groups_of
from judgetune.stats._evaluate import constant_baseline
from judgetune.stats._metrics import (
    bootstrap_mean_interval,
    correlation,
    paired_difference,
    per_group_values,
)

__all__ = ["difference_record", "filled", "gain", "harmful_gain", "versus_constant"]


def filled(values: np.ndarray, fallback: float | None = None) -> np.ndarray:
    """The one failure rule: a failed judgment (NaN) is scored as a guess of the median, ``fallback``
    where given (the labels' median, for calibrated scores), else the median of the parsed values
    (a raw score that ranks in the middle); 0 when nothing parsed."""
    values = np.asarray(values, dtype=float)
    ok = ~np.isnan(values)
    fill = fallback if fallback is not None else float(np.median(values[ok])) if ok.any() else 0.0
    return np.where(ok, values, fill)


def difference_record(diff: dict) -> dict[str, float | None]:
    """A ``paired_difference`` result as the records write it: ``{"value", "low", "high"}``."""
    return {"value": diff["difference"], "low": diff["ci"][0], "high": diff["ci"][1]}


def _mae(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(np.abs(a - b)))


def gain(shipped: Sequence[float | None], default: Sequence[float | None], examples: Sequence[Example], *,
         default_shipped: bool, fallback: float | None = None, n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Shipped minus default on every test item: Spearman, MAE (lower is better, so a negative MAE gain is
    an improvement) and, where the data has groups, the per-group Spearman, each as ``{"value", "low",
    "high"}`` with a paired 95% interval (the same whole groups drawn for both). A failed judgment is
    scored as selection scores it (``filled``): ``fallback`` (the labels' median, for calibrated scores)
    or the median of that judge's parsed scores; ``failed`` counts them."""
    a = filled(np.asarray([np.nan if x is None else x for x in shipped], dtype=float), fallback)
    b = filled(np.asarray([np.nan if x is None else x for x in default], dtype=float), fallback)
    gold = [e.judgment for e in examples]
    groups = groups_of(list(examples))
    common = {"n_resamples": n_resamples, "seed": seed}
    out: dict[str, Any] = {"n": len(gold), "default_shipped": default_shipped,
                           "failed": {"shipped": sum(x is None for x in shipped),
                                      "default": sum(x is None for x in default)}}
    if len(gold) < 2:
        return {**out, "spearman": None, "mae": None}
    out["spearman"] = difference_record(paired_difference(correlation, a, b, gold, groups, **common))
    out["mae"] = difference_record(paired_difference(_mae, a, b, gold, groups, **common))
    if groups is not None:
        per_a = dict(zip(*_per_group(a, gold, groups)))
        per_b = dict(zip(*_per_group(b, gold, groups)))
        both = sorted(set(per_a) & set(per_b))
        diffs = [per_a[g] - per_b[g] for g in both]
        interval = bootstrap_mean_interval(diffs, **common)
        out["spearman_per_group"] = {"value": float(np.mean(diffs)) if diffs else None, "low": interval.low,
                                     "high": interval.high, "groups": len(diffs)}
    return out


def _per_group(pred: np.ndarray, gold: Sequence[float], groups: Sequence[str]) -> tuple[list[str], list[float]]:
    """(group, Spearman) of each group where it is defined."""
    names, values = [], []
    for key in dict.fromkeys(groups):
        idx = [i for i, g in enumerate(groups) if g == key]
        value, _, _ = per_group_values(pred[idx], [gold[i] for i in idx], [key] * len(idx), correlation)
        if value:
            names.append(key)
            values.append(value[0])
    return names, values


def versus_constant(scores: Sequence[float | None], examples: Sequence[Example], train_labels: Sequence[float], *,
                    n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The shipped judge's test MAE minus the constant predictor's (the training median), paired, and
    ``worse``: true when the interval lies above 0 (the judge is worse than guessing, beyond noise)."""
    kept = [(s, e) for s, e in zip(scores, examples) if s is not None]
    if len(kept) < 2:
        return {"mae": None, "worse": False}
    pred = [s for s, _ in kept]
    diff = difference_record(paired_difference(_mae, pred, constant_baseline(train_labels, len(kept)),
                                       [e.judgment for _, e in kept], groups_of([e for _, e in kept]),
                                       n_resamples=n_resamples, seed=seed))
    return {"mae": diff, "worse": diff["low"] is not None and diff["low"] > 0}


def harmful_gain(g: dict[str, Any]) -> str | None:
    """The warning when the shipped judge is worse than the default on test beyond noise: a Spearman gain
    whose interval lies wholly below 0, or an MAE gain wholly above it (None otherwise)."""
    worse = []
    for name, key, sign in (("Spearman", "spearman", 1), ("per-group Spearman", "spearman_per_group", 1),
                            ("MAE", "mae", -1)):
        figure = g.get(key) or {}
        low, high = figure.get("low"), figure.get("high")
        if low is not None and high is not None and (high < 0 if sign > 0 else low > 0):
            worse.append(f"{name} {figure['value']:+.3f} [{low:+.3f}, {high:+.3f}]")
    if not worse:
        return None
    return ("the shipped judge is worse than the default on the test items beyond noise (paired 95%): "
            + ", ".join(worse))
