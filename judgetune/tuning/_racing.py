"""Stage 7c, the early-stopping gate: which candidate is judged on which selection item, so that challengers
that cannot beat the default stop being judged as soon as that is clear.

Every candidate is judged on the search items (cached from the search). The confirming items are then judged in
a seeded order of whole questions:

- Screening (the nested gate, without ``--panel``, when the confirming items hold at least twice what the nested
  test needs once the screen is taken): every challenger not turned away and the default are judged on the first
  confirming items, as many as the search items or ``SCREEN_SHARE`` of the confirming items when that is more. The
  best ``SCREEN_KEEP`` of the challengers (rounded, at least one) on the search and screened items go on when
  strictly ahead of the default there; the others stop. A challenger that costs no LM call (another family's
  default, ``free``) goes on when ahead of the default without taking a place, and the others only when ahead of
  it too. The screened items then choose in every fold and are never
  held out, as the search items: the choice of who goes on reads no item the test holds out.
- Futility: the rest is judged in ``LOOKS`` blocks; after each block but the last, when every challenger still
  judged is behind the default beyond noise on the tested items so far (its one-sided ``1 - FUTILITY`` upper
  bound below 0), judging stops and the default ships. Stopping never ships, and a run that does not stop ends
  with the test it would have made anyway, so a challenger ships in no run where it would not have without it.
- ``--gate on`` judges only its one challenger (the best on the search items) beside the default; ``--panel``
  judges every member on every item (the panel is their mean), with futility only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from judgetune.stats import FOLDS, ahead_of_default, paired_advantages, units_of
from judgetune.tuning._figures import SelectionItems

__all__ = ["FUTILITY", "LOOKS", "SCREEN_KEEP", "SCREEN_SHARE", "Race", "Scorer", "race"]

Scorer = Callable[[int, np.ndarray], np.ndarray]  # (candidate index, item indices) -> raw scores (NaN: failed)
FUTILITY = 0.2  # a challenger stops when its one-sided 80% upper bound on the tested items so far is below 0
LOOKS = 4  # blocks of the confirming items, a futility look after each but the last
MIN_LOOK_ITEMS, MIN_LOOK_GROUPS = 20, 3  # fewer tested units so far, and no futility look is made
MIN_FOLD_ITEMS = 10  # the nested gate's held-out fold: fewer items in each, and it refuses
SCREEN_SHARE = 0.25  # the screen judges at least the search items' count, or this share of the confirming items
SCREEN_KEEP = 1 / 3  # the share of the screened challengers (rounded, at least one) the screen lets on


@dataclass
class Race:
    """What was judged: ``raws`` (C, n; NaN where failed or not judged), ``judged`` (C, n), the items moved to the
    choosing side (``screened``), who was still judged at the end (``live``) and why judging stopped (``stopped``:
    the default ships), with the counts of judgments made and saved."""

    raws: np.ndarray
    judged: np.ndarray
    screened: np.ndarray
    live: list[int]
    stopped: str | None = None
    refused: str | None = None  # the gate could make no test on these items: nothing past the search was judged
    looks: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def begin(cls, n_candidates: int, score: Scorer, items: SelectionItems) -> Race:
        """Every candidate judged on the search items (the search judged them: the LM's answers are cached)."""
        n = len(items.gold)
        state = cls(np.full((n_candidates, n), np.nan), np.zeros((n_candidates, n), dtype=bool),
                    np.zeros(n, dtype=bool), [])
        for j in range(n_candidates):
            state.judge(score, j, np.arange(items.n_search))
        return state

    def judge(self, score: Scorer, j: int, rows: np.ndarray) -> None:
        """Candidate ``j`` judged on the items ``rows`` it has not judged yet."""
        rows = np.asarray(rows, dtype=int)
        rows = rows[~self.judged[j, rows]]
        if len(rows):
            self.raws[j, rows] = score(j, rows)
            self.judged[j, rows] = True

    def record(self, n_search: int) -> dict[str, Any]:
        full = int(self.judged.size)
        made = int(self.judged.sum())
        confirming = int(self.judged[:, n_search:].sum())
        return {"judgments": made, "confirming_judgments": confirming, "every_judgment": full,
                "confirming_by_candidate": [int(k) for k in self.judged[:, n_search:].sum(axis=1)],
                "saved": full - made, "screened_items": int(self.screened.sum()), "live": self.live,
                "stopped": self.stopped, "looks": self.looks}


def _order(items: SelectionItems, seed: int) -> list[np.ndarray]:
    """The confirming items' units (whole questions, or single items) in a seeded order, as item indices."""
    rows = np.flatnonzero(items.confirming)
    groups = None if items.groups is None else [items.groups[i] for i in rows]
    units = [rows[u] for u in units_of(groups, len(rows))]
    return [units[i] for i in np.random.default_rng([seed, 7]).permutation(len(units))]


def _count(items: SelectionItems, units: list[np.ndarray]) -> int:
    """The gate's units among ``units``: questions, or items where Spearman is not taken per question (pooled)."""
    return len(units) if items.groups_ranked else sum(len(u) for u in units)


def _least(items: SelectionItems) -> int:
    """The units the nested test needs: a question, or ``MIN_FOLD_ITEMS`` items, in every held-out fold."""
    return FOLDS if items.groups_ranked else MIN_FOLD_ITEMS * FOLDS


def _futile(state: Race, items: SelectionItems, rows: np.ndarray) -> dict[str, Any] | None:
    """The futility look on the tested items judged so far: each live challenger's advantage and its one-sided
    ``1 - FUTILITY`` upper bound; None when too few units to look."""
    groups = items.ranked_on(rows)
    units = len(units_of(groups, len(rows)))
    if units < (MIN_LOOK_GROUPS if groups else MIN_LOOK_ITEMS):
        return None
    raw = state.raws[[0, *state.live]][:, rows]
    clusters = items.clusters_on(rows)
    figures = paired_advantages("spearman", raw, raw, items.gold[rows], groups, 1 - 2 * FUTILITY, clusters)
    upper = {j: figures[k + 1]["interval"][1] for k, j in enumerate(state.live)}
    futile = all(u is not None and u < 0 for u in upper.values())
    return {"items": int(len(rows)), "upper": upper, "futile": futile}


def race(state: Race, score: Scorer, items: SelectionItems, live: Sequence[int], *, gate: str, panel: bool,
         seed: int, least: tuple[int, str], screen: bool = True, free: frozenset[int] = frozenset()) -> Race:
    """Judge the candidates on the confirming items as the early-stopping gate decides (the module's docstring),
    from ``state`` (``Race.begin``); ``live``: the challengers not turned away (for ``gate == "on"``, the one tested,
    or none); ``least``: the confirming units the gate needs for a test, and their name; ``screen``: screen the
    challengers first (else futility looks only); ``free``: the challengers whose judgments cost no LM call (other
    families' defaults without an LM)."""
    state.live = list(live)
    units = _order(items, seed)
    if _count(items, units) < least[0]:
        state.live, state.refused = [], (f"the confirming items (pool and dev) hold {_count(items, units)} {least[1]}; "
                                         f"the gate needs at least {least[0]}: the default ships (label more rows, or "
                                         "raise --gate-items or --dev-items where they leave labeled rows out)")
        state.stopped = state.refused
        return state
    if not state.live:
        state.stopped = ("no challenger ahead of the default on the search items" if gate == "on"
                         else "no challenger left to judge beside the default")
        return state
    if gate == "nested" and not panel and screen:
        units = _screen(state, score, items, units, free)
        if state.stopped:
            return state
    parts = [p for p in np.array_split(np.arange(len(units)), min(LOOKS, len(units))) if len(p)]
    blocks = [np.concatenate([units[i] for i in p]) for p in parts]
    tested = np.zeros(0, dtype=int)
    for k, block in enumerate(blocks):
        for j in [0, *state.live]:
            state.judge(score, j, block)
        tested = np.concatenate([tested, block])
        look = _futile(state, items, tested) if k < len(blocks) - 1 else None
        if look is not None:
            state.looks.append(look)
            if look["futile"]:
                state.stopped = (f"every challenger judged was behind the default beyond noise after {len(tested)} of "
                                 f"the {sum(len(b) for b in blocks)} confirming items (one-sided "
                                 f"{1 - FUTILITY:.0%} upper bound below 0)")
                return state
    return state


def _screen(state: Race, score: Scorer, items: SelectionItems, units: list[np.ndarray],
            free: frozenset[int] = frozenset()) -> list[np.ndarray]:
    """Judge every live challenger on the first confirming units (as many items as the search items, or
    ``SCREEN_SHARE`` of the confirming items when more) when the rest still holds twice what the nested test needs;
    keep the best ``SCREEN_KEEP`` of them (at least one) that are ahead of the default on search and screen. A
    ``free`` challenger (no LM call) ahead of the default goes on without taking a place, and the others go on only
    when ahead of it too: judging one that trails a free one costs LM calls for a challenger that would rarely be
    the choice. Returns the units left to judge."""
    target = max(items.n_search, SCREEN_SHARE * int(items.confirming.sum()))
    taken, size = 0, 0
    while taken < len(units) and size < target:
        size += len(units[taken])
        taken += 1
    if _count(items, units[taken:]) < 2 * _least(items) or taken == 0:
        return units
    screen = np.concatenate(units[:taken])
    for j in [0, *state.live]:
        state.judge(score, j, screen)
    state.screened[screen] = True
    choosing = np.concatenate([np.arange(items.n_search), screen])
    groups = items.ranked_on(choosing)
    ahead = ahead_of_default(state.raws[:, choosing], items.gold[choosing], groups, state.live)  # best first
    leading = next((k for k, j in enumerate(ahead) if j in free), len(ahead))  # the best free one's place
    paid = [j for j in ahead[:leading] if j not in free]
    paid = paid[:max(1, round(SCREEN_KEEP * sum(j not in free for j in state.live)))]
    state.live = [j for j in ahead if j in free or j in paid]
    if not state.live:
        state.stopped = (f"no challenger was ahead of the default on the {len(choosing)} search and screened items")
    return units[taken:]
