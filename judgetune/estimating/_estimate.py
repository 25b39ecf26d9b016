"""Per system and per pair of systems: the judge-only, labels-only and PPI++ estimates on the human scale.

Rows with a label (one human score each) or a pairwise comparison (a preference between two systems' answers)
are read as ``Observations``; this module turns them into ``Estimates``: a mean label per system (pointwise
rows) or a win rate per system (pairwise rows: 1 won, 0.5 tie, 0 lost), and B minus A for every pair, paired
by input when both systems answered the same inputs and the same inputs carry both their labels.
The statistics are ``judgetune.stats``' finite-target ones: means over the file's rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from judgetune import stats
from judgetune.errors import JudgetuneError
from judgetune.estimating._checks import notes
from judgetune.estimating._pairs import pair_record
from judgetune.estimating._rows import Observations
from judgetune.estimating._sides import Side, fit, sides

__all__ = ["Estimates", "estimate_observations"]


@dataclass
class Estimates:
    """What ``judgetune estimate`` reports: one record per system and per pair, and the lines that say what
    is assumed or doubtful (``notes``)."""

    measure: str  # "mean label" or "win rate"
    alpha: float
    scale: tuple[float, float]
    systems: list[dict[str, Any]]
    pairs: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    method: str = "ppi++"

    def to_dict(self) -> dict[str, Any]:
        return {"measure": self.measure, "method": self.method, "confidence": 1 - self.alpha,
                "scale": list(self.scale),
                "target": "the mean over every row of the file, as if all were labeled",
                "systems": [_finite(r) for r in self.systems], "pairs": [_finite(r) for r in self.pairs],
                "notes": list(self.notes)}

    def to_pandas(self) -> Any:
        """One row per system (``what`` "system") and per pair ("difference", named "B - A")."""
        try:
            import pandas
        except ImportError:
            raise JudgetuneError("estimates as a DataFrame need pandas: pip install pandas") from None
        rows = [{"what": "system", "name": r["system"], **r} for r in self.systems]
        rows += [{"what": "difference", "name": f"{r['b']} - {r['a']}", **r} for r in self.pairs]
        frame = pandas.DataFrame(rows)
        frame.attrs["notes"] = list(self.notes)
        return frame


def _finite(record: dict[str, Any]) -> dict[str, Any]:
    """A record with inf and nan as None (JSON has neither)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


def _system_record(side: Side) -> dict[str, Any]:
    labeled = int(side.mine.sum())
    note = "biased" if labeled >= 2 else f"unvalidated: {labeled} labeled row(s)"
    record = {"system": side.name, "rows": int(side.inside.sum()), "labeled": labeled, "failed": side.failed,
              "judge": float(side.f[side.inside].mean()), "judge_note": note}
    for key, est in (("labels", side.labels), ("ppi", side.ppi)):
        record.update({key: est.value if est else None, f"{key}_low": est.low if est else None,
                       f"{key}_high": est.high if est else None})
    record["lambda"] = side.ppi.lam if side.ppi else None
    record["labels_worth"] = stats.worth_of(side.labels, side.ppi) if side.ppi else None
    return record


def estimate_observations(obs: Observations, scale: tuple[float, float], *, alpha: float = 0.05,
                          lam: float | None = None, method: str = "ppi++") -> Estimates:
    """Every system's and every pair's estimates (``scale``: the judge's human scale, for win values; ``lam``: the
    weight on the judge, None power-tuned; ``method``: what the judge-assisted figures are called, ``ppi++`` or
    ``cross`` for a judge cross-fitted on these labels)."""
    all_sides = sides(obs, scale)
    bounds = (0.0, 1.0) if obs.pairwise else (obs.scale or scale)  # the labels' own scale where known
    for side in all_sides:
        fit(side, alpha, bounds, lam)
    pairs = [pair_record(a, b, obs.pairwise, alpha, bounds, lam) for a, b in combinations(all_sides, 2)]
    lines = notes(obs, all_sides, scale)
    few = [s.name for s in all_sides if s.ppi is not None and lam is None and s.labels.labeled < stats.MIN_JUDGED]
    if few:
        lines.append(f"{len(few)} system(s) with fewer than {stats.MIN_JUDGED} labels: their estimate is the labels' own "
                     f"(the judge's weight is 0 there; --fit fits one judge on every system's labels)")
    return Estimates("win rate" if obs.pairwise else "mean label", alpha, scale,
                     [_system_record(s) for s in all_sides], pairs, lines, method)
