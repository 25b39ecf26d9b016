"""The first round of picks, before any label exists: cover the default judge's score range and the
data's groups (or clusters of answers).

The items are sorted by the cheap judge's score and cut into ``n`` strata of (nearly) equal size;
one item is picked per stratum, so the picks follow the score's distribution from its lowest to its
highest values. Inside a stratum the pick goes to an item of the group furthest below its fair share
of the picks so far (its share of the items times the picks made, minus its picks; ties broken by a
seeded draw): the picks spread over the data's groups in proportion to their sizes, so a small,
atypical cluster is covered without being over-sampled (balancing the groups instead made the
labelled sample unlike the data: on STS-B a hybrid fitted on it did worse than on random picks).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import numpy as np

__all__ = ["cover"]


def cover(scores: Sequence[float], groups: Sequence[str], n: int, *, seed: int = 0,
          taken: Sequence[str] = ()) -> list[int]:
    """Indices of ``n`` items: one per score stratum, each from the group furthest below its fair share.

    Args:
        scores: the default judge's score per item.
        groups: each item's group or cluster.
        n: how many to pick (at most ``len(scores)``).
        seed: seeds the tie-breaks.
        taken: groups of items already labeled (counted as represented).
    """
    if n > len(scores):
        raise ValueError(f"cannot pick {n} of {len(scores)} items")
    rng = random.Random(seed)
    noise = [rng.random() for _ in scores]  # a seeded order among equal scores and equal counts
    order = sorted(range(len(scores)), key=lambda i: (scores[i], noise[i]))
    strata = [list(chunk) for chunk in np.array_split(np.asarray(order, dtype=int), n)] if n else []
    seen = Counter(taken)
    size = Counter(groups)
    total, made = len(groups), len(taken)
    picked: list[int] = []
    # strata in a seeded order, so no end of the score range is favoured when groups compete
    for s in rng.sample(range(len(strata)), len(strata)):
        made += 1
        best = max(strata[s], key=lambda i: (size[groups[i]] / total * made - seen[groups[i]], noise[i]))
        picked.append(int(best))
        seen[groups[best]] += 1
    return sorted(picked, key=lambda i: (scores[i], noise[i]))
