"""Run every probe that applies to a frozen judge, with statistics corrected together, and check bounds."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from judgetune.audit._probes import LISTWISE_UNIT, PAIRWISE_UNIT, PROBES, Scorer
from judgetune.audit._stats import ALPHA, POWER, benjamini_hochberg, paired_effect
from judgetune.config import JudgeConfig
from judgetune.datasets import Example, limit_by_group, sample_per_group
from judgetune.errors import JudgetuneError

log = logging.getLogger(__name__)
RELEVANT_SHARE = 0.1  # without a bound, an effect of a tenth of the unit's range is the one that matters
AUDIT_ITEMS = 40  # items an automatic audit (after a tune, of a candidate) looks at
UNIT_WIDTHS = {PAIRWISE_UNIT: 2.0, LISTWISE_UNIT: 1.0}  # other units: the human scale


def audit(config: JudgeConfig, examples: Sequence[Example], lm: Any = None, *, probes: Sequence[str] | None = None,
          bounds: Mapping[str, float] | None = None, n_resamples: int = 1000,
          seed: int = 0, progress: bool = False) -> dict[str, Any]:
    """Audit a frozen judge on ``examples``: every probe that applies to its kind.

    Args:
        config: the frozen judge (``judgetune.load(path).config`` or ``JudgeConfig.load(path)``).
        examples: the items to probe (labels are needed only by the listwise position probe and the
            demo redraw of self-consistency).
        lm: the judge's LM (``judgetune.scoring.load_config_lm(config)``; None for judges without one).
        probes: names from ``PROBES`` (default all).
        bounds: the effect size that matters per probe (``--audit-max``); a probe without one takes a
            tenth of its unit's range (``RELEVANT_SHARE``). It decides each row's ``reading``.

    Returns:
        ``{"probes": [{"probe", "effect", "low", "high", "p", "q", "mde", "n", "clusters", "failed",
        "unit", "relevant", "reading", ...extras}], "not_applicable": [{"probe", "why"}], "items", "alpha", "power"}``;
        ``q`` is the Benjamini-Hochberg q-value over the probes run.

    Raises:
        JudgetuneError: an unknown probe name, or no item to audit.
    """
    names = list(dict.fromkeys(probes or PROBES))  # a probe named twice runs, and is corrected for, once
    unknown = [n for n in names if n not in PROBES]
    if unknown:
        raise JudgetuneError(f"unknown audit probe(s) {unknown}; known: {', '.join(PROBES)}")
    if not examples:
        raise JudgetuneError("no items to audit")
    scorer = Scorer(config, examples, lm, progress=progress)
    rows, skipped = [], []
    for name in names:
        paired = PROBES[name](scorer)
        if isinstance(paired, str):
            skipped.append({"probe": name, "why": paired})
            continue
        if not paired.diffs:
            skipped.append({"probe": name, "why": f"every one of {paired.failed} judgments failed on a side"})
            continue
        stats = paired_effect(paired.diffs, paired.clusters, n_resamples=n_resamples, seed=seed)
        rows.append({"probe": name, "effect": stats.effect, "low": stats.low, "high": stats.high, "p": stats.p,
                     "q": None, "mde": stats.mde, "n": stats.n, "clusters": stats.clusters, "failed": paired.failed,
                     "unit": paired.unit, **paired.extra})
        log.info("audit %s: effect %.3f [%.3f, %.3f], n=%d", name, stats.effect, stats.low, stats.high, stats.n)
    for row, q in zip(rows, benjamini_hochberg([r["p"] for r in rows])):
        row["q"] = q
        width = UNIT_WIDTHS.get(row["unit"], config.label_range[1] - config.label_range[0])
        row["relevant"] = (bounds or {}).get(row["probe"], RELEVANT_SHARE * width)
        row["reading"] = reading(row, row["relevant"])
    return {"probes": rows, "not_applicable": skipped, "items": len(examples), "alpha": ALPHA, "power": POWER}


def audit_sample(examples: Sequence[Example], *, items: int = AUDIT_ITEMS, seed: int = 0) -> list[Example]:
    """The items an automatic audit looks at: at most ``items``, spread over as many questions as there
    are (the same number of answers from each, seeded), since the questions are what the intervals
    resample."""
    groups = len({e.group_key for e in examples})
    if not groups:
        return []
    per_group = max(1, math.ceil(items / groups))
    return limit_by_group(sample_per_group(list(examples), per_group, seed=seed), items, seed=seed)


def check_bounds(config: JudgeConfig, examples: Sequence[Example], lm: Any, bounds: Mapping[str, float], *,
                 seed: int = 0) -> tuple[list[str], dict[str, Any]]:
    """Audit a candidate on the bounded probes only: (why it breaks ``bounds``, empty when it does not;
    the audit). The tuner rejects a candidate with reasons (``--audit-max``)."""
    result = audit(config, audit_sample(examples, seed=seed), lm, probes=list(bounds), bounds=bounds,
                   seed=seed)
    return beyond_bounds(result, bounds), result


def parse_bounds(texts: Sequence[str]) -> dict[str, float]:
    """``["verbosity=0.3", ...]`` -> ``{"verbosity": 0.3}``: the largest acceptable absolute effect per probe.

    Raises:
        JudgetuneError: not PROBE=VALUE, an unknown probe, a probe given twice, or a negative or non-number value.
    """
    bounds: dict[str, float] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        if not sep or name not in PROBES:
            raise JudgetuneError(f"--audit-max {text}: expected PROBE=VALUE with PROBE one of {', '.join(PROBES)}")
        if name in bounds:
            raise JudgetuneError(f"--audit-max {name}: given twice")
        try:
            bound = float(value)
        except ValueError:
            raise JudgetuneError(f"--audit-max {text}: expected a number after '=', found {value!r}") from None
        if not bound >= 0 or bound == float("inf"):
            raise JudgetuneError(f"--audit-max {text}: expected a finite bound >= 0")
        bounds[name] = bound
    return bounds


def beyond_bounds(result: Mapping[str, Any], bounds: Mapping[str, float]) -> list[str]:
    """Why an audited judge breaks ``bounds``: one line per probe whose whole 95% interval lies beyond
    ``±bound`` (significantly beyond it, not merely an estimate over it). Empty: within bounds."""
    out = []
    for row in result["probes"]:
        bound = bounds.get(row["probe"])
        if bound is not None and (row["low"] > bound or row["high"] < -bound):
            out.append(f"{row['probe']}: effect {row['effect']:+.3f} [{row['low']:+.3f}, {row['high']:+.3f}] lies "
                       f"beyond the bound ±{bound:g}")
    return out


def format_audit(result: Mapping[str, Any]) -> str:
    """The audit as a plain-text table (one line per probe, then the probes that do not apply)."""
    lines = [f"{'probe':<17}{'effect':>8}  {'95% interval':<18}{'q':>7}{'MDE':>7}{'n':>5}  reading"]
    for r in result["probes"]:
        lines.append(f"{r['probe']:<17}{r['effect']:>+8.3f}  [{r['low']:+.3f}, {r['high']:+.3f}]{r['q']:>8.3f}"
                     f"{_f(r['mde']):>7}{r['n']:>5}  {r['reading']}")
    lines += [f"{r['probe']:<17}not run: {r['why']}" for r in result["not_applicable"]]
    return "\n".join(lines)


def reading(row: Mapping[str, Any], relevant: float, *, alpha: float = ALPHA) -> str:
    """How to read a probe: ``effect found`` (q below alpha); ``no effect found`` when an effect of size
    ``relevant`` would have been detected (MDE at most ``relevant``); else ``too few items to tell``
    (nothing found, but an effect up to the MDE could have gone unseen)."""
    if row["q"] is not None and row["q"] < alpha:
        return "effect found"
    return "no effect found" if row["mde"] is not None and row["mde"] <= relevant else "too few items to tell"


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
