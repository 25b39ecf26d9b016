"""A predictor's figures on human labels (correlations, error, brackets, each with its interval) beside the
trivial baselines': the training median and random draws from the training labels."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from judgetune.stats._metrics import (
    CORRELATIONS,
    _arrays,
    _best_hit,
    bootstrap_interval,
    bootstrap_mean_interval,
    bracket_accuracy,
    cohen_kappa,
    correlation,
    default_bracket_edges,
    ndcg,
    per_group_values,
    rescale,
    snap_to_labels,
)

__all__ = ["constant_baseline", "evaluate_predictions", "evaluate_with_baselines", "random_baseline",
           "random_baseline_spread"]


def constant_baseline(train_labels: Sequence[float], n: int) -> np.ndarray:
    """The trivial judge that always answers the training labels' median."""
    return np.full(n, float(np.median(np.asarray(train_labels, dtype=float))))


def random_baseline(train_labels: Sequence[float], n: int, *, seed: int = 0) -> np.ndarray:
    """The trivial judge that answers labels drawn at random from the training labels (same marginals)."""
    return np.random.default_rng(seed).choice(np.asarray(train_labels, dtype=float), size=n, replace=True)


def random_baseline_spread(train_labels: Sequence[float], gold: Sequence[float], *, label_range: tuple[float, float],
                           groups: Sequence | None = None, n_seeds: int = 200, seed: int = 0) -> dict:
    """The random predictor over ``n_seeds`` draws: each metric's mean, and the 2.5-97.5 percentiles of the
    draws as its ``_ci`` (the spread of the predictor itself, not one draw's bootstrap interval)."""
    draws = [evaluate_predictions(random_baseline(train_labels, len(gold), seed=seed + i), gold,
                                  label_range=label_range, groups=groups, n_resamples=0, seed=seed)
             for i in range(n_seeds)]
    row: dict = {"n": int(len(gold)), "seeds": n_seeds}
    for key, value in draws[0].items():
        if not isinstance(value, (int, float)) or key == "n" or isinstance(value, bool):
            continue
        values = [d[key] for d in draws if d.get(key) is not None]
        if not values:
            row[key], row[f"{key}_ci"] = None, [None, None]
            continue
        row[key] = float(np.mean(values))
        row[f"{key}_ci"] = [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]
    return row


def evaluate_predictions(pred: Sequence[float], gold: Sequence[float], *, label_range: tuple[float, float],
                         pred_range: tuple[float, float] | None = None, groups: Sequence | None = None,
                         brackets: Sequence[float] | None = None, labels: Sequence[float] | None = None,
                         n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0) -> dict:
    """Every agreement metric of one predictor, with grouped bootstrap intervals, as one flat record.

    Predictions are first mapped from ``pred_range`` (default: ``label_range``) onto the label
    range. ``brackets`` default to ``default_bracket_edges`` (0-2 / 2-4 / 4-5 scaled onto the label range;
    two halves for binary labels). ``labels`` (the
    discrete label set) enables Cohen's kappa on predictions snapped to it. Keys ending in ``_ci``
    hold ``[low, high]``; per-group figures appear only when ``groups`` is given.
    """
    p, g = _arrays(pred, gold)
    p = rescale(p, pred_range or label_range, label_range)
    edges = np.asarray(brackets if brackets is not None else default_bracket_edges(label_range, g), dtype=float)
    boot = {"n_resamples": n_resamples, "confidence": confidence, "seed": seed}
    row: dict = {"n": int(len(p))}

    def add(name: str, fn: Callable[[np.ndarray, np.ndarray], float | None]) -> None:
        row[name] = fn(p, g)
        interval = bootstrap_interval(fn, p, g, groups, **boot)
        row[f"{name}_ci"] = [interval.low, interval.high]

    add("mae", lambda a, b: float(np.mean(np.abs(a - b))))
    add("bracket_accuracy", lambda a, b: bracket_accuracy(np.clip(a, edges[0], edges[-1]), b, edges=edges))
    for method in CORRELATIONS:
        add(method, lambda a, b, m=method: correlation(a, b, m))
    if labels is not None:
        for weights in (None, "linear", "quadratic"):
            add(f"kappa_{weights or 'unweighted'}",
                lambda a, b, w=weights: cohen_kappa(snap_to_labels(a, labels), b, weights=w, labels=labels))
    if groups is not None:
        grouped = {f"{m}_per_group": (lambda a, b, m=m: correlation(a, b, m)) for m in CORRELATIONS}
        grouped["best_accuracy"] = lambda a, b: _best_hit(a, b, False)
        grouped["best_worst_accuracy"] = lambda a, b: _best_hit(a, b, True)
        for name, fn in grouped.items():
            values, small, undefined = per_group_values(p, g, groups, fn)
            interval = bootstrap_mean_interval(values, **boot)
            row[name] = float(np.mean(values)) if values else None
            row[f"{name}_ci"] = [interval.low, interval.high]
            row[f"{name}_groups"] = {"used": len(values), "skipped_small": small, "skipped_constant": undefined}
        row["ndcg@10"] = ndcg(p, g - label_range[0], groups, k=10).value  # gain 0 for the lowest grade
    return row


def evaluate_with_baselines(name: str, pred: Sequence[float], gold: Sequence[float], *,
                            train_labels: Sequence[float], seed: int = 0, **options) -> list[dict]:
    """Rows for the predictor and the trivial baselines (constant training median, random), side by side."""
    n = len(gold)
    rows = [{"name": name, **evaluate_predictions(pred, gold, seed=seed, **options)}]
    plain = {k: v for k, v in options.items() if k != "pred_range"}  # baselines answer on the label scale
    rows.append({"name": "constant", **evaluate_predictions(constant_baseline(train_labels, n), gold,
                                                            seed=seed, **plain)})
    rows.append({"name": "random", **evaluate_predictions(random_baseline(train_labels, n, seed=seed), gold,
                                                          seed=seed, **plain)})
    return rows
