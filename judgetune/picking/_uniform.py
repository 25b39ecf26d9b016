"""Which rows to label next for an estimate: a seeded uniform random sample per system, with the probability each
row had of being labeled written beside it (``sampling_probability``), so that the estimate can check that its
labels are the uniform sample its intervals assume.

- Systems that answered the same inputs once each: ``n`` inputs drawn from those no system has a label on, and
  every system's answer to them picked (so that differences are paired by input).
- Pairwise comparisons: ``n`` comparisons drawn from the unlabeled ones (one sample of all comparisons).
- Otherwise: ``n`` rows drawn per system from its unlabeled rows.

A row's probability is the share of its system's rows (or inputs, or comparisons) labeled once this round is
labeled: a uniform sample drawn from what a uniform sample left is a uniform sample of the whole. The picked rows
are written back by ``RawRows`` in the input's own format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from judgetune.errors import JudgetuneError, shown

__all__ = ["Rows", "Sample", "draw", "shared_inputs"]


class Rows(Protocol):
    """What a draw reads of an estimate's rows (``judgetune.estimating.Observations``): systems coded by row
    (``system``; ``system_b`` for pairwise rows), each row's input code (-1: none), labels (nan: unlabeled)."""

    names: list[str]
    system: np.ndarray
    system_b: np.ndarray | None
    inputs: np.ndarray
    labels: np.ndarray

    @property
    def pairwise(self) -> bool: ...

    def __len__(self) -> int: ...


@dataclass(frozen=True)
class Sample:
    """The picked rows (indices into the data's rows, in file order), each one's sampling probability, and how
    they were drawn (``unit``: "input", "comparison" or "row")."""

    rows: np.ndarray
    probabilities: np.ndarray
    unit: str
    per_system: dict[str, int]


def shared_inputs(obs: Rows) -> bool:
    """Whether every system answered the same inputs, each once."""
    if obs.pairwise or (obs.inputs < 0).any():
        return False
    sets = []
    for code in range(len(obs.names)):
        mine = np.sort(obs.inputs[obs.system == code])
        if np.any(mine[1:] == mine[:-1]):
            return False
        sets.append(mine)
    return all(np.array_equal(sets[0], other) for other in sets[1:])


def _too_many(n: int, free: int, what: str) -> JudgetuneError:
    return JudgetuneError(f"--n {n}: {what} has {free} unlabeled left to draw from; pick at most {free}")


def _by_input(obs: Rows, n: int, rng: np.random.Generator) -> Sample:
    labeled = ~np.isnan(obs.labels)
    all_inputs = np.unique(obs.inputs)
    touched = np.unique(obs.inputs[labeled])
    free = np.setdiff1d(all_inputs, touched)
    if n > len(free):
        raise _too_many(n, len(free), "the inputs every system answered")
    chosen = rng.choice(free, n, replace=False)
    rows = np.flatnonzero(np.isin(obs.inputs, chosen))
    share = (len(touched) + n) / len(all_inputs)
    return Sample(rows, np.full(len(rows), share), "input", {name: n for name in obs.names})


def _by_comparison(obs: Rows, n: int, rng: np.random.Generator) -> Sample:
    labeled = ~np.isnan(obs.labels)
    free = np.flatnonzero(~labeled)
    if n > len(free):
        raise _too_many(n, len(free), "the file")
    rows = np.sort(rng.choice(free, n, replace=False))
    counts = {name: int(np.sum((obs.system[rows] == c) | (obs.system_b[rows] == c))) for c, name in
              enumerate(obs.names)}
    return Sample(rows, np.full(n, (labeled.sum() + n) / len(obs)), "comparison", counts)


def _by_system(obs: Rows, n: int, rng: np.random.Generator) -> Sample:
    labeled = ~np.isnan(obs.labels)
    rows, shares = [], []
    for code, name in enumerate(obs.names):
        mine = obs.system == code
        free = np.flatnonzero(mine & ~labeled)
        if n > len(free):
            raise _too_many(n, len(free), f"system '{shown(name)}'")
        rows.append(rng.choice(free, n, replace=False))
        shares.append(np.full(n, (np.sum(mine & labeled) + n) / mine.sum()))
    order = np.argsort(np.concatenate(rows), kind="stable")
    return Sample(np.concatenate(rows)[order], np.concatenate(shares)[order], "row", {s: n for s in obs.names})


def draw(obs: Rows, n: int, *, seed: int = 0) -> Sample:
    """``n`` inputs (systems that answered the same inputs), comparisons (pairwise rows) or rows per system to
    label next, drawn uniformly at random from the unlabeled ones with ``seed``.

    Raises:
        JudgetuneError: ``n`` below 1 or above what is left unlabeled.
    """
    if n < 1:
        raise JudgetuneError(f"--n {n}: expected at least 1")
    rng = np.random.default_rng(seed)
    if obs.pairwise:
        return _by_comparison(obs, n, rng)
    if shared_inputs(obs):
        return _by_input(obs, n, rng)
    return _by_system(obs, n, rng)
