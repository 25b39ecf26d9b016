"""Stage 7b, a candidate's figures on the selection items: its raw scores, their out-of-fold calibration, and the
figures on the search items alone that the candidates are ranked and turned away by. No LM call here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from judgetune import stats
from judgetune.calibration import CALIBRATORS, cross_fitted
from judgetune.datasets import groups_of
from judgetune.judges import MAX_MEMBERS
from judgetune.stats import correlation, filled, units_of
from judgetune.tuning._space import PANEL
from judgetune.tuning._splits import Splits

__all__ = ["CandidateFigures", "FiguresCache", "SelectionItems", "figures_of", "panel_candidate", "search_calibrated",
           "search_figure", "spearman_figure"]

FiguresCache = dict  # (raw, judged, labels, calibrate) as bytes -> CandidateFigures: one run's, or one replay draw's


@dataclass
class CandidateFigures:
    """One candidate on the selection items: raw scores (NaN where it failed or was not judged), out-of-fold
    calibrated predictions (a failure gets the labels' median: failing costs what guessing costs; NaN where not
    judged), the calibrator's kind, the failure rate, and ``judged`` (None: every item)."""

    params: dict[str, Any]
    raw: np.ndarray
    pred: np.ndarray
    calibrator: str | None
    failure_rate: float
    judged: np.ndarray | None = None


@dataclass
class SelectionItems:
    """The labels selection reads: ``gold`` and ``groups`` of every selection item, the first ``n_search`` of them the
    search items, ``groups_ranked`` what Spearman ranks within (None when pooled). ``screened`` marks the items
    after the search items that the early-stopping gate moved to the choosing side (they choose, never confirm)."""

    gold: np.ndarray
    groups: list[str] | None
    n_search: int
    label_range: tuple[float, float]
    pooled: bool = False
    screened: np.ndarray | None = None

    @classmethod
    def of(cls, splits: Splits, pooled: bool = False) -> SelectionItems:
        items = splits.selection
        return cls(np.asarray([e.judgment for e in items], dtype=float), groups_of(items), len(splits.search),
                   splits.label_range, pooled)

    @property
    def groups_ranked(self) -> list[str] | None:
        return None if self.pooled else self.groups

    @property
    def clusters(self) -> list[str] | None:
        """The questions when pooled (the paired tests resample them whole), else None."""
        return self.groups if self.pooled else None

    def ranked_on(self, which: np.ndarray) -> list[str] | None:
        """``groups_ranked`` of the items ``which`` picks (a boolean mask or indices; None when pooled or ungrouped)."""
        return _picked(self.groups_ranked, which)

    def clusters_on(self, which: np.ndarray) -> list[str] | None:
        """``clusters`` of the items ``which`` picks (a boolean mask or indices; None unless pooled and grouped)."""
        return _picked(self.clusters, which)

    @property
    def confirming(self) -> np.ndarray:
        """The items that confirm: every item but the search items (which chose the candidates) and the screened."""
        mask = np.ones(len(self.gold), dtype=bool)
        mask[:self.n_search] = False
        return mask if self.screened is None else mask & ~self.screened


def _picked(values: list[str] | None, which: np.ndarray) -> list[str] | None:
    if values is None:
        return None
    which = np.asarray(which)
    return [values[i] for i in (np.flatnonzero(which) if which.dtype == bool else which)]


def figures_of(params: dict[str, Any], raw: np.ndarray, items: SelectionItems, seed: int, *,
               judged: np.ndarray | None = None, calibrate: bool = True,
               cache: FiguresCache | None = None) -> CandidateFigures:
    """A candidate's figures from its raw scores on the judged selection items: out-of-fold calibrated predictions.
    ``calibrate=False`` skips the calibration (every prediction the labels' median): the gate under the Spearman rule
    reads raw scores only, so only the record's descriptive MAE changes. ``cache`` keeps figures computed once."""
    raw = np.asarray(raw, dtype=float)
    seen = np.ones(len(raw), dtype=bool) if judged is None else np.asarray(judged, dtype=bool)
    key = (raw.tobytes(), seen.tobytes(), items.gold.tobytes(), calibrate)
    if cache is not None and key in cache:
        return cache[key]
    gold = items.gold
    ok = seen & ~np.isnan(raw)
    pred, kind = np.where(seen, float(np.median(gold)), np.nan), None
    if calibrate and ok.sum() >= 4:
        keys = None if items.groups is None else [g for g, k in zip(items.groups, ok) if k]
        pred[ok], kind, _ = cross_fitted(raw[ok], gold[ok], label_range=items.label_range, groups=keys, seed=seed)
    out = CandidateFigures(params, raw, pred, kind, float(1 - ok.sum() / max(1, seen.sum())), judged)
    if cache is not None:
        cache[key] = out
    return out


def panel_candidate(scored: Sequence[CandidateFigures], members: Sequence[int], items: SelectionItems,
                    seed: int, *, calibrate: bool = True) -> CandidateFigures | None:
    """The panel of the candidates ``members`` (indices into ``scored``): each member's raw scores standardized by
    their mean and spread on the search items (no labels read), averaged over the members that judged an item
    (NaN where none did). Members with fewer than 4 judged search items or no spread are left out; None when
    fewer than 2 remain. Its parameters hold the members', their centres and scales (``PANEL``): ``judge_for``
    builds the same panel from them."""
    members = list(members)[:MAX_MEMBERS]
    raws = np.stack([scored[i].raw for i in members])
    rows, centers, scales = stats.standardizers(raws, slice(0, items.n_search))
    if len(rows) < 2:
        return None
    kept = [members[r] for r in rows]
    raw, _ = stats.panel_mean(raws[rows], centers, scales)
    params = {PANEL: {"members": [scored[i].params for i in kept], "center": centers, "scale": scales}}
    return figures_of(params, raw, items, seed, calibrate=calibrate)


def spearman_figure(raw: np.ndarray, gold: np.ndarray, groups: Sequence[str] | None) -> float | None:
    """Spearman of raw scores (a failure ranks in the middle), per group and averaged where there are groups."""
    full = filled(raw)
    if groups is None:
        return correlation(full, gold)
    values = [correlation(full[idx], gold[idx]) for idx in units_of(groups, len(gold))]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def search_figure(rule: str, scored: CandidateFigures, gold: np.ndarray, groups: Sequence[str] | None, *,
                  label_range: tuple[float, float], seed: int, pooled: bool = False) -> float:
    """A candidate's figure on the search items alone (higher is better): the Spearman of its raw scores
    (per question unless ``pooled``), or minus the MAE of its scores calibrated out of fold (whole questions) on
    these items only (dev stays out of the choice)."""
    if rule == "spearman":
        rho = spearman_figure(scored.raw, gold, None if pooled else groups)
        return -np.inf if rho is None else rho
    ok = ~np.isnan(scored.raw)
    pred = np.full(len(gold), float(np.median(gold)))
    if ok.sum() >= 4:
        pred[ok], _, _ = cross_fitted(scored.raw[ok], gold[ok], label_range=label_range, seed=seed,
                                      groups=None if groups is None else [g for g, k in zip(groups, ok) if k])
    return -float(np.mean(np.abs(pred - gold)))


def search_calibrated(raw: np.ndarray, gold: np.ndarray, n_search: int, groups: Sequence[str] | None, *,
                      label_range: tuple[float, float], seed: int) -> np.ndarray:
    """Predictions for the items after the first ``n_search`` (dev) from a calibrator fitted, and its form chosen,
    on the search items alone (a failure, or too few judged search items, gets the search labels' median)."""
    search_raw, search_gold = raw[:n_search], gold[:n_search]
    ok = ~np.isnan(search_raw)
    out = np.full(len(raw) - n_search, float(np.median(search_gold)))
    if ok.sum() < 4:
        return out
    keys = None if groups is None else [g for g, k in zip(groups[:n_search], ok) if k]
    _, kind, _ = cross_fitted(search_raw[ok], search_gold[ok], groups=keys, label_range=label_range, seed=seed)
    calibrator = CALIBRATORS[kind](label_range).fit(search_raw[ok], search_gold[ok])  # quietly: one per candidate
    judged = ~np.isnan(raw[n_search:])
    out[judged] = calibrator.predict(raw[n_search:][judged])
    return out
