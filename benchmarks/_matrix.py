"""A saved score matrix (``benchmarks/score_matrix.py``) read as arrays, and the seeded draws of whole questions
that the replay and the stacking benchmark take from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from judgetune.stats import panel_mean, standardizers

__all__ = ["load_matrix", "panel_row", "split_units"]


def load_matrix(path: Path) -> dict[str, Any]:
    """The matrix's scored prefix: ``scores`` (C, n) with NaN for failures, ``gold``, ``ids``, ``all_groups`` (every
    item's group) and ``groups`` (the same, or None when every item is its own group)."""
    m = json.loads(Path(path).read_text())
    n = m["scored"]
    scores = np.array([[np.nan if v is None else v for v in row[:n]] for row in m["scores"]], dtype=float)
    groups = [str(g) for g in m["items"]["groups"][:n]]
    grouped = len(set(groups)) < n
    return {"meta": m["meta"], "candidates": m["candidates"], "scores": scores,
            "gold": np.asarray(m["items"]["labels"][:n], dtype=float), "ids": [str(i) for i in m["items"]["ids"][:n]],
            "groups": groups if grouped else None, "all_groups": groups, "n": n}


def split_units(groups: list[str], take: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Indices of about ``take`` items made of whole questions (seeded), and the rest."""
    keys = list(dict.fromkeys(groups))
    sizes = dict.fromkeys(keys, 0)
    for g in groups:
        sizes[g] += 1
    chosen, count = set(), 0
    for i in rng.permutation(len(keys)):
        if count >= take:
            break
        chosen.add(keys[i])
        count += sizes[keys[i]]
    inside = np.array([g in chosen for g in groups])
    return np.flatnonzero(inside), np.flatnonzero(~inside)


def panel_row(scores: np.ndarray, lab: np.ndarray) -> np.ndarray:
    """The panel of every candidate on every item: each standardized by its mean and spread on the items ``lab``
    (scores only, no label), averaged over the candidates that judged the item; candidates with no spread there are
    left out."""
    kept, centers, scales = standardizers(scores, lab)
    return panel_mean(scores[kept], centers, scales)[0]
