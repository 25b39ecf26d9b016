"""A panel's score: several judges' raw scores, each standardized by its own centre and spread, averaged
over the judges that scored the item. One function for the panel judge, ``tune --panel`` and the
benchmarks, so the three cannot drift apart."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["panel_mean", "standardizers"]


def standardizers(raw: np.ndarray, reference: Sequence[int] | slice, *,
                  min_items: int = 4) -> tuple[list[int], list[float], list[float]]:
    """Each judge's centre and spread on the ``reference`` items (columns of ``raw``, one row per judge, NaN
    where a judge failed): ``(kept, centers, scales)``, keeping the judges with at least ``min_items`` scored
    reference items and some spread there. No label is read."""
    kept, centers, scales = [], [], []
    for row, scores in enumerate(np.asarray(raw, dtype=float)):
        ref = scores[reference]
        ref = ref[~np.isnan(ref)]
        if len(ref) >= min_items and float(np.std(ref)) > 0:
            kept.append(row)
            centers.append(float(np.mean(ref)))
            scales.append(float(np.std(ref)))
    return kept, centers, scales


def panel_mean(raw: np.ndarray, centers: Sequence[float], scales: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The panel's score of every item (columns of ``raw``, one row per judge, NaN where a judge failed): the
    mean of the judges' standardized scores over those that scored it, NaN where none did. Returns the scores
    and the standardized matrix."""
    z = (np.asarray(raw, dtype=float) - np.asarray(centers, dtype=float)[:, None]) / np.asarray(scales, dtype=float)[:, None]
    judged = (~np.isnan(z)).sum(axis=0)
    out = np.full(z.shape[1], np.nan)
    out[judged > 0] = np.nansum(z[:, judged > 0], axis=0) / judged[judged > 0]
    return out, z
