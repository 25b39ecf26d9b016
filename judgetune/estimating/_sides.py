"""One system's rows as the inputs of its mean: the outcome per row (a label, or a comparison's win value for
the system), the judge's, which rows are the system's and which are labeled; and its two estimates."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from judgetune import stats
from judgetune.estimating._rows import Observations

__all__ = ["Side", "fit", "sides"]


@dataclass
class Side:
    """One system's rows as a mean's inputs: outcome ``y`` (nan unlabeled), the judge's ``f``, which rows are
    its own (``inside``), which are labeled, and its estimates."""

    name: str
    y: np.ndarray
    f: np.ndarray
    inside: np.ndarray
    labeled: np.ndarray
    failed: int
    inputs: np.ndarray  # the code of the input each of its rows answers (-1: none)
    ppi: stats.Estimate | None = None
    labels: stats.Estimate | None = None

    @property
    def mine(self) -> np.ndarray:
        return self.inside & self.labeled


def sides(obs: Observations, scale: tuple[float, float]) -> list[Side]:
    """Every system's rows, in order of first appearance; a failed judgment (score nan) stands in at the
    system's mean judge score (a comparison: at a tie), which keeps the estimate unbiased."""
    labeled = ~np.isnan(obs.labels)
    failed = np.isnan(obs.scores)
    out = []
    for code, name in enumerate(obs.names):
        if obs.pairwise:
            side = (obs.system_b == code).astype(float) - (obs.system == code)
            raw = np.where(failed, sum(scale) / 2, obs.scores)
            y, f = stats.win_values(np.nan_to_num(obs.labels), side), stats.judged_wins(raw, side, *scale)
            inside = side != 0
        else:
            inside = obs.system == code
            mean = float(np.mean(obs.scores[inside & ~failed])) if np.any(inside & ~failed) else sum(scale) / 2
            y, f = obs.labels, np.where(failed, mean, obs.scores)
        out.append(Side(name, y, f, inside, labeled, int(np.sum(inside & failed)), obs.inputs[inside]))
    return out


def fit(side: Side, alpha: float, bounds: tuple[float, float] | None = None, lam: float | None = None) -> None:
    """The side's labels-only and judge-assisted estimates (None with fewer than 2 labels): ``bounds``, the
    outcome's (a label's scale, or 0-1 for win values); ``lam`` the weight on the judge (None: power-tuned)."""
    mine = side.mine
    if mine.sum() < 2:
        return
    side.labels = stats.labels_mean(side.y[mine], rows=int(side.inside.sum()), alpha=alpha, scale=bounds)
    side.ppi = stats.ppi_mean(side.y[mine], side.f[mine], side.f[side.inside & ~side.labeled], alpha=alpha, lam=lam,
                              scale=bounds)
