"""What an estimate refuses (one line each) and what it says it assumes.

Refused: one system; no label at all; labels off the judge's human scale; a judge whose scale is not the
file's (a stated ``--scale`` that differs, preferences for a judge of single answers); labels drawn with
unequal recorded probabilities within a system. Said: a system with fewer than 2 labels (its judge-only mean
is unvalidated), failed judgments, that the labels are taken for a uniform random sample (or that their
recorded probabilities say so), and labeled rows that the judge scores unlike the system's other rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from judgetune.errors import JudgetuneError
from judgetune.estimating._rows import Observations
from judgetune.estimating._sides import Side

__all__ = ["BALANCE_Z", "check_rows", "check_scale", "notes"]

BALANCE_Z = 3.29  # |z| beyond which labeled rows look unlike the rest (two-sided p < 0.001)


def _number(value: float) -> str:
    return f"{value:g}"


def check_scale(obs: Observations, judge: tuple[float, float], config: str, *,
                stated: tuple[float, float] | None = None, stated_by: str = "--scale") -> None:
    """Refuse labels the judge's scale cannot hold, and a file whose scale is not the judge's.

    Raises:
        JudgetuneError: one line naming the first offending row and how many there are.
    """
    low, high = judge
    shown = f"{_number(low)}-{_number(high)}"
    if stated is not None and (not math.isclose(stated[0], low) or not math.isclose(stated[1], high)):
        raise JudgetuneError(f"{stated_by} {_number(stated[0])}-{_number(stated[1])}: the judge {config} scores on the "
                             f"scale {shown}; estimate with a judge tuned on this file's scale")
    if obs.pairwise and not math.isclose(low, -high):
        raise JudgetuneError(f"{obs.where}: the rows are pairwise preferences, but the judge {config} scores one "
                             f"answer on the scale {shown}; estimate win rates with a judge tuned on preferences "
                             "(a scale such as -2..2)")
    labels = obs.labels
    off = np.flatnonzero(~np.isnan(labels) & ((labels < low - 1e-9) | (labels > high + 1e-9)))
    if len(off):
        first = off[0]
        name = "preference" if obs.pairwise else "label"
        raise JudgetuneError(f"{obs.label_line(first)}: {name}: expected a label on the judge's scale {shown} "
                             f"({config}), found {_number(labels[first])} ({len(off)} label(s) lie outside it); "
                             "estimate with a judge tuned on this file's scale")


def check_rows(obs: Observations, by: Sequence[str]) -> None:
    """Refuse a file with one system or with no label.

    Raises:
        JudgetuneError: one line.
    """
    if len(obs.names) < 2:
        raise JudgetuneError(f"--by {','.join(by)}: {obs.where} holds one system ({obs.names[0]!r}); estimate "
                             "compares two or more (a column with each row's system, model or prompt variant)")
    if np.all(np.isnan(obs.labels)):
        raise JudgetuneError(f"{obs.where}: no row carries a human label; label a uniform random sample of each "
                             "system's rows first (judgetune pick --for estimate draws one)")
    _equal_probabilities(obs)


def _equal_probabilities(obs: Observations) -> None:
    """Refuse labels whose recorded sampling probabilities differ within a system (within all comparisons)."""
    recorded = ~np.isnan(obs.labels) & ~np.isnan(obs.probabilities)
    groups = [(None, np.ones(len(obs), dtype=bool))] if obs.pairwise else [
        (name, obs.system == code) for code, name in enumerate(obs.names)]
    for name, group in groups:
        rows = np.flatnonzero(group & recorded)
        values = obs.probabilities[rows]
        if len(values) and not np.allclose(values, values[0], rtol=1e-6):
            who = "the comparisons" if name is None else f"system {name!r}"
            low, high = rows[np.argmin(values)], rows[np.argmax(values)]
            raise JudgetuneError(f"{obs.label_line(low)} and {obs.label_line(high)}: the labeled rows of {who} were "
                                 f"drawn with unequal probabilities ({values.min():.3g} to {values.max():.3g}); "
                                 "estimate needs a uniform random sample per system (judgetune pick --for estimate)")


def _probabilities(obs: Observations, all_sides: list[Side]) -> list[str]:
    """What the recorded sampling probabilities say (or that the sample is assumed uniform)."""
    labeled = ~np.isnan(obs.labels)
    recorded = labeled & ~np.isnan(obs.probabilities)
    if not recorded.any():
        return ["assumed: the labeled rows of each system are a uniform random sample of its rows (no sampling "
                "probability recorded; judgetune pick --for estimate draws and records one)"]
    _equal_probabilities(obs)
    lines = ["labels: a uniform random sample per system, as their recorded sampling probabilities say"]
    if (labeled & ~recorded).any():
        lines.append(f"assumed: {int((labeled & ~recorded).sum())} labeled row(s) without a recorded sampling "
                     "probability belong to the same uniform random sample")
    return lines


def _balance(side: Side) -> str | None:
    """A line when the judge scores the side's labeled rows unlike all its rows (|z| > BALANCE_Z)."""
    f, mine, inside = side.f, side.mine, side.inside
    n, total = int(mine.sum()), int(inside.sum())
    spread = float(np.std(f[inside], ddof=1)) if total > 1 else 0.0
    if n < 2 or n >= total or spread <= 1e-9 * max(1.0, abs(float(f[inside].mean()))):  # constant up to rounding
        return None
    z = (f[mine].mean() - f[inside].mean()) / (spread * math.sqrt((1 - n / total) / n))
    if abs(z) <= BALANCE_Z:
        return None
    return (f"warning: system {side.name!r}: the judge scores its labeled rows {f[mine].mean():.3g} on average and "
            f"all its rows {f[inside].mean():.3g} (z = {z:.1f}): the labels do not look like a uniform random sample; "
            "the intervals assume they are one")


def _scale_note(obs: Observations, scale: tuple[float, float]) -> str | None:
    """A line when the labels span less than half the judge's scale (a judge of another scale, perhaps)."""
    labels = obs.labels[~np.isnan(obs.labels)]
    low, high = scale
    if obs.pairwise or len(labels) < 2 or labels.max() - labels.min() >= (high - low) / 2:
        return None
    return (f"warning: the labels span {_number(labels.min())}-{_number(labels.max())}, less than half the judge's "
            f"scale {_number(low)}-{_number(high)}: if the file's scale is not the judge's, its judge-only figures "
            "are on the judge's scale (PPI++ and the labels-only figures stay on the labels'); --scale LOW-HIGH checks")


def notes(obs: Observations, all_sides: list[Side], scale: tuple[float, float]) -> list[str]:
    """The lines an estimate prints beside its figures (assumptions first, then warnings)."""
    lines = _probabilities(obs, all_sides)
    scale_line = _scale_note(obs, scale)
    if scale_line:
        lines.append(scale_line)
    for side in all_sides:
        labeled = int(side.mine.sum())
        if labeled < 2:
            judge = float(side.f[side.inside].mean())
            lines.append(f"warning: system {side.name!r} has {labeled} labeled row(s): its judge-only figure "
                         f"{judge:.3g} is unvalidated and has no interval (label at least 2 of its rows; "
                         "judgetune pick --for estimate)")
        if side.failed:
            stand_in = "a tie" if obs.pairwise else "its mean judge score"
            lines.append(f"warning: system {side.name!r}: {side.failed} row(s) without a judge score (failed "
                         f"judgments) stand in at {stand_in}; the estimate stays unbiased")
        balance = _balance(side)
        if balance:
            lines.append(balance)
    return lines
