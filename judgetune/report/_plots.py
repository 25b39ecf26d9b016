"""The report's figures, drawn with matplotlib (Agg) and returned as PNG bytes."""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import optuna  # noqa: E402

from judgetune.calibration import calibrator_from_dict  # noqa: E402
from judgetune.stats import DEFAULT_BRACKETS, bracket_of, rescale  # noqa: E402


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _complete(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def pareto_front(study: optuna.Study, chosen: int | None) -> bytes:
    """Optuna's Pareto-front plot of (MAE, Spearman), with the chosen trial circled."""
    from optuna.visualization.matplotlib import plot_pareto_front

    with warnings.catch_warnings(), plt.rc_context():  # it sets the ggplot style globally: kept to this figure
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        ax = plot_pareto_front(study, target_names=["MAE on search items (lower is better)",
                                                    "Spearman (higher is better)"])
    ax.figure.set_size_inches(5.5, 3.8)
    for t in _complete(study):
        if t.number == chosen:
            ax.scatter([t.values[0]], [t.values[1]], s=160, facecolors="none", edgecolors="k", label="chosen")
            ax.legend(loc="best")
    return _png(ax.figure)


def history(study: optuna.Study) -> bytes:
    """Each objective by trial, side by side. Drawn here rather than with Optuna's
    ``plot_optimization_history``, which draws one objective per figure (and its best-so-far line
    means little for a two-objective study, whose best trials form a front)."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    trials = _complete(study)
    for ax, index, name in ((axes[0], 0, "MAE"), (axes[1], 1, "Spearman")):
        ax.plot([t.number for t in trials], [t.values[index] for t in trials], "o-", ms=4)
        ax.set_xlabel("trial")
        ax.set_ylabel(name)
    fig.suptitle("Optimization history")
    return _png(fig)


def importance(study: optuna.Study) -> bytes | None:
    """fANOVA importance of each parameter for Spearman; None when there is too little to fit."""
    try:
        # the default evaluator ranks parameters by how they lower the target: lower -Spearman is better
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # its reminder of exactly that
            values = optuna.importance.get_param_importances(study, target=lambda t: -t.values[1])
    except (RuntimeError, ValueError):
        return None
    if not values:
        return None
    fig, ax = plt.subplots(figsize=(5, 0.4 * len(values) + 1))
    names = list(values)[::-1]
    ax.barh(names, [values[n] for n in names])
    ax.set_xlabel("importance for Spearman (fANOVA)")
    return _png(fig)


def predicted_vs_human(raw: Sequence[float], calibrated: Sequence[float], human: Sequence[float],
                       calibrator: dict | None, label_range: tuple[float, float]) -> bytes:
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.4))
    axes[0].scatter(raw, human, s=10, alpha=0.6)
    if calibrator is not None and len(raw):
        grid = np.linspace(min(raw), max(raw), 200)
        axes[0].plot(grid, calibrator_from_dict(calibrator).predict(grid), "C3", label=f"{calibrator['kind']} calibrator")
        axes[0].legend(loc="upper left")
    axes[0].set_xlabel("raw judge score")
    axes[0].set_ylabel("human label")
    axes[1].scatter(calibrated, human, s=10, alpha=0.6)
    axes[1].plot(label_range, label_range, "k--", lw=1)
    axes[1].set_xlabel("calibrated score")
    axes[1].set_ylabel("human label")
    fig.suptitle("Test split: predicted vs human")
    return _png(fig)


def bracket_confusion(calibrated: Sequence[float], human: Sequence[float], label_range: tuple[float, float]) -> bytes:
    edges = rescale(DEFAULT_BRACKETS, (0, 5), label_range)
    n = len(edges) - 1
    matrix = np.zeros((n, n), dtype=int)
    for p, g in zip(bracket_of(np.clip(calibrated, edges[0], edges[-1]), edges), bracket_of(human, edges)):
        matrix[int(g), int(p)] += 1
    names = [f"{edges[i]:g}-{edges[i + 1]:g}" for i in range(n)]
    fig, ax = plt.subplots(figsize=(4, 3.4))
    ax.imshow(matrix, cmap="Blues")
    for i in range(n):
        for j in range(n):
            ax.text(j, i, str(matrix[i, j]), ha="center", va="center")
    ax.set_xticks(range(n), names)
    ax.set_yticks(range(n), names)
    ax.set_xlabel("predicted bracket")
    ax.set_ylabel("human bracket")
    ax.set_title("Bracket confusion (test)")
    return _png(fig)
