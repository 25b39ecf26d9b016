"""Exact coverage of a system's mean from binary labels: why no interval sits in [0.93, 0.97] at every true rate.

A system with ``N`` outputs of which ``K`` are labeled 1 is sampled ``n`` at a time without replacement, as
``judgetune estimate`` assumes (``--draws`` of benchmarks/estimate.py draw the same way). With binary labels the
interval can take only ``n + 1`` forms, so its coverage at a given ``K`` is a sum over the hypergeometric law,
computed exactly here for every ``K`` that leaves both values present, and it oscillates with ``K`` (Brown, Cai
and DasGupta, Statistical Science 2001). A single set's cell in benchmarks/results/estimate-<set>.json measures
the oscillation at its own few systems' rates (SummEval: 2 systems, 50 summaries each); this file gives the whole
curve for each interval:

- ``judgetune``: the interval ``judgetune estimate`` prints for labels alone (``stats.labels_mean`` with the scale:
  Wilson's score interval with the sample's dispersion and the finite-population factor);
- ``wilson``: Wilson's score interval for a binomial proportion (no finite-population factor);
- ``clopper-pearson``: the exact binomial interval (never below 95% for a binomial; conservative);
- ``jeffreys``: the Beta(k + 1/2, n - k + 1/2) quantiles;
- ``t``: the mean plus or minus Student's t times the standard error, the interval ``estimate`` gave before the
  scale was used (zero width when the labels are all alike).

Rows ``{N, n, method, mean_coverage, min_coverage, share_in_band, mean_width}`` over ``K`` in ``[1, N - 1]``
(``share_in_band``: the share of ``K`` whose coverage is in [0.93, 0.97]).

    python benchmarks/estimate_exact.py [--rows 50 500] [--sizes 5 10 20 50] [--json] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)
import numpy as np
from scipy import stats as scipy_stats

from judgetune.stats import labels_mean

Interval = Callable[[int, int, int], tuple[float, float]]  # (k ones, n labels, N rows) -> (low, high)


def _judgetune(k: int, n: int, rows: int) -> tuple[float, float]:
    e = labels_mean([1.0] * k + [0.0] * (n - k), rows=rows, scale=(0.0, 1.0))
    return e.low, e.high


def _wilson(k: int, n: int, rows: int) -> tuple[float, float]:
    ci = scipy_stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return ci.low, ci.high


def _clopper_pearson(k: int, n: int, rows: int) -> tuple[float, float]:
    ci = scipy_stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return ci.low, ci.high


def _jeffreys(k: int, n: int, rows: int) -> tuple[float, float]:
    low = 0.0 if k == 0 else float(scipy_stats.beta.ppf(0.025, k + 0.5, n - k + 0.5))
    high = 1.0 if k == n else float(scipy_stats.beta.ppf(0.975, k + 0.5, n - k + 0.5))
    return low, high


def _t(k: int, n: int, rows: int) -> tuple[float, float]:
    e = labels_mean([1.0] * k + [0.0] * (n - k), rows=rows)
    return e.low, e.high


METHODS: dict[str, Interval] = {"judgetune": _judgetune, "wilson": _wilson, "clopper-pearson": _clopper_pearson,
                                "jeffreys": _jeffreys, "t": _t}


def coverage_curve(method: Interval, rows: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact coverage and expected width at each ``K`` in ``1 .. rows - 1``, ``n`` labels drawn without replacement."""
    forms = [method(k, n, rows) for k in range(n + 1)]
    covers, widths = [], []
    for ones in range(1, rows):
        truth = ones / rows
        law = scipy_stats.hypergeom(rows, ones, n)
        p = law.pmf(np.arange(n + 1))
        covers.append(sum(pk for pk, (low, high) in zip(p, forms) if low - 1e-12 <= truth <= high + 1e-12))
        widths.append(sum(pk * (high - low) for pk, (low, high) in zip(p, forms)))
    return np.asarray(covers), np.asarray(widths)


def rows_for(all_rows: list[int], sizes: list[int]) -> list[dict]:
    out = []
    for rows in all_rows:
        for n in (s for s in sizes if s < rows):
            for name, method in METHODS.items():
                cover, width = coverage_curve(method, rows, n)
                out.append({"N": rows, "n": n, "method": name, "mean_coverage": round(float(cover.mean()), 4),
                            "min_coverage": round(float(cover.min()), 4),
                            "share_in_band": round(float(np.mean((cover >= 0.93) & (cover <= 0.97))), 4),
                            "mean_width": round(float(width.mean()), 4)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[50, 500], help="outputs per system (N)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 10, 20, 50], help="labels per system (n)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    payload = {"target": "a system's share of 1-labels over its N outputs; n drawn without replacement",
               "band": [0.93, 0.97], "rows": rows_for(args.rows, args.sizes)}
    if args.out:
        _results.write_result(args.out, payload, sys.argv)
    if args.json:
        print(json.dumps(payload, indent=1))
        return
    print(f"{'N':>4} {'n':>3} {'method':16} {'mean cov':>9} {'min cov':>8} {'in band':>8} {'width':>7}")
    for r in payload["rows"]:
        print(f"{r['N']:>4} {r['n']:>3} {r['method']:16} {r['mean_coverage']:>9.3f} {r['min_coverage']:>8.3f} "
              f"{r['share_in_band']:>8.2f} {r['mean_width']:>7.3f}")


if __name__ == "__main__":
    main()
