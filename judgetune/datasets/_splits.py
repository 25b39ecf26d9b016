"""Deterministic train / dev / test splits that never put one group (query) in two splits."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from judgetune.datasets._schema import Example

DEFAULT_FRACTIONS = {"train": 0.6, "dev": 0.2, "test": 0.2}


def split_by_group(examples: list[Example], fractions: Mapping[str, float] = DEFAULT_FRACTIONS, *,
                   seed: int = 0) -> dict[str, list[Example]]:
    """Shuffle the groups with ``seed`` and deal them into splits of about ``fractions`` of the items.

    Groups are assigned whole, in shuffled order, each to the split furthest below its target
    share, so the result depends only on the set of examples and the seed (not on input order).
    Ungrouped examples count as groups of one.
    """
    if not examples:
        raise ValueError("cannot split an empty list of examples")
    total = sum(fractions.values())
    if any(f < 0 for f in fractions.values()) or total <= 0:
        raise ValueError(f"fractions must be non-negative with a positive sum, got {dict(fractions)}")
    members: dict[str, list[Example]] = {}
    for example in sorted(examples, key=lambda e: e.id):
        members.setdefault(example.group_key, []).append(example)
    keys = sorted(members)
    order = np.random.default_rng(seed).permutation(len(keys))
    targets = {name: f / total * len(examples) for name, f in fractions.items()}
    splits: dict[str, list[Example]] = {name: [] for name in fractions}
    for index in order:
        group = members[keys[index]]
        name = max(splits, key=lambda n: (targets[n] - len(splits[n])) / max(targets[n], 1e-9)
                   if targets[n] > 0 else float("-inf"))
        splits[name].extend(group)
    return splits


def split_examples(examples: list[Example], *, seed: int = 0,
                   dev_fraction_of_train: float = 0.25) -> dict[str, list[Example]]:
    """train / dev / test: the source's official splits where every example names one in
    ``meta['split']`` (dev carved from train by group when the source has none), else a seeded
    60/20/20 split by group."""
    official = {e.meta.get("split") for e in examples}
    if None in official or not official <= {"train", "dev", "test"} or "train" not in official:
        return split_by_group(examples, seed=seed)
    splits = {name: [e for e in examples if e.meta["split"] == name] for name in ("train", "dev", "test")}
    if not splits["dev"]:
        carved = split_by_group(splits["train"], {"train": 1 - dev_fraction_of_train,
                                                  "dev": dev_fraction_of_train}, seed=seed)
        splits["train"], splits["dev"] = carved["train"], carved["dev"]
    return splits


def _groups_shuffled(examples: Sequence[Example], seed: int) -> dict[str, list[Example]]:
    """Examples by group; each group's members in a seeded order that depends only on the seed and group."""
    groups: dict[str, list[Example]] = {}
    for ex in sorted(examples, key=lambda e: e.id):
        groups.setdefault(ex.group_key, []).append(ex)
    for key, members in groups.items():
        random.Random(f"{seed}:{key}").shuffle(members)
    return groups


def limit_by_group(examples: Sequence[Example], n: int | None, *, seed: int = 0) -> list[Example]:
    """``n`` examples taken group by group, groups in a seeded order (all when n is None); only the
    last group taken may be cut, keeping a random part of it rather than its first ids."""
    if n is None or n >= len(examples):
        return list(examples)
    groups = _groups_shuffled(examples, seed)
    keys = sorted(groups)
    random.Random(seed).shuffle(keys)
    picked: list[Example] = []
    for key in keys:
        picked.extend(groups[key])
        if len(picked) >= n:
            return picked[:n]
    return picked


def sample_per_group(examples: Sequence[Example], m: int, *, seed: int = 0) -> list[Example]:
    """At most ``m`` examples of every group, drawn seeded per group (per-question metrics keep every question)."""
    groups = _groups_shuffled(examples, seed)
    return [ex for key in sorted(groups) for ex in groups[key][:m]]


def groups_of(examples: Sequence[Example]) -> list[str] | None:
    """Per-example group keys when some group holds several examples, else None (nothing to group)."""
    keys = [ex.group_key for ex in examples]
    return keys if len(set(keys)) < len(keys) else None


def group_folds(n_items: int, groups: Sequence[str] | None = None, *, folds: int = 5,
                seed: int = 0) -> tuple[Any, np.ndarray]:
    """The one fold scheme of calibration, search and selection: ``GroupKFold`` (shuffled, seeded), a
    question's answers always on one side; each item its own group when ``groups`` is None (or names
    a single group). Returns the splitter and the group array to pass with it."""
    if groups is not None and len(groups) != n_items:
        raise ValueError(f"groups has {len(groups)} entries for {n_items} pairs")
    keys = np.arange(n_items) if groups is None or len(set(groups)) < 2 else np.asarray([str(g) for g in groups])
    n_splits = max(2, min(folds, len(set(keys.tolist()))))
    from sklearn.model_selection import GroupKFold  # here: reading data never loads scikit-learn

    return GroupKFold(n_splits=n_splits, shuffle=True, random_state=seed), keys


def fold_of(n_items: int, groups: Sequence[str] | None = None, *, folds: int = 5, seed: int = 0) -> np.ndarray:
    """Each item's fold (0 .. folds - 1) under ``group_folds``: the one fold assignment every stage reads."""
    splitter, keys = group_folds(n_items, groups, folds=folds, seed=seed)
    out = np.empty(n_items, dtype=int)
    for f, (_, held) in enumerate(splitter.split(np.arange(n_items), groups=keys)):
        out[held] = f
    return out
