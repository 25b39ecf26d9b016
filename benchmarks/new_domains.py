"""Untuned vs tuned judges on catalog sets the recipes were not developed on.

For each set: train / dev / test by group (``judgetune.tuning.prepare_splits``, which splits with
``judgetune.datasets.split_examples`` and keeps seeded subsets by group), then
- the untuned judge (``make_judge`` with the data's defaults, fitted or given demos from the same
  training pool the tuner uses), scored on test by ``judgetune.evaluation.evaluate_judge``, which adds
  the constant (training median), random (training labels) and embedding (MiniLM) rows. Untuned rows
  are not calibrated: the judge's own score range is mapped onto the human scale, so their MAE and
  bracket accuracy say little (Spearman is unaffected);
- the tuned judge (``judgetune.tuning.tune``: TPE on the search items, chosen and calibrated on dev,
  scored once on test); its figures are ``config.metrics["test"]``.

Judges: ``hybrid`` (signals, no LM) tuned beside ``embedding`` and ``hybrid`` untuned, and the
``likelihood`` judge (embedded SmolLM2-135M) untuned vs tuned. ``--fit-items N`` caps the training items
both fit on and draw demos from (``RunSpec.fit_items``, seeded; default all): on STS-B a fit on all 5,749
pairs first encodes about 11,000 sentences with two encoders (over 10 minutes on 2 shared cores; cached
on disk after). Where the data has groups (questions),
``spearman_per_group`` is the within-group Spearman averaged over groups.

Rows: ``{dataset, method, n, spearman, low, high, spearman_per_group, group_low, group_high, mae,
bracket_accuracy}``; beside each tuned judge, the random predictor over 200 seeds (mean, with the
2.5-97.5 percentiles of its draws as the interval).

    python benchmarks/new_domains.py [--quick] [--json] [--sets stsb ...] [--judges hybrid likelihood] [--trials N]
        [--fit-items N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _results  # benchmarks/ is on sys.path when a benchmark runs

from judgetune.evaluation import evaluate_judge
from judgetune.judges import make_judge
from judgetune.lm import load_lm
from judgetune.tuning import RunSpec, prepare_splits, tune

SETS = ("stsb", "summac-summeval", "summac-xsumfaith", "llmbar-natural", "linkage-webglm")
JUDGES = ("hybrid", "likelihood")


def row(dataset: str, method: str, metrics: dict[str, Any], seconds: float, **extra: Any) -> dict[str, Any]:
    low, high = metrics.get("spearman_ci") or [None, None]
    group_low, group_high = metrics.get("spearman_per_group_ci") or [None, None]
    return {"dataset": dataset, "method": method, "n": metrics.get("n"), "spearman": metrics.get("spearman"),
            "low": low, "high": high, "spearman_per_group": metrics.get("spearman_per_group"),
            "group_low": group_low, "group_high": group_high,
            "mae": metrics.get("mae"), "bracket_accuracy": metrics.get("bracket_accuracy"),
            "seconds": round(seconds, 1), **extra}


def spec_for(dataset: str, judge: str, args: argparse.Namespace) -> RunSpec:
    return RunSpec(also=[], name=f"new-domains-{dataset}-{judge}", judge=judge, data=dataset, seed=args.seed,
                   n_trials=args.trials, search_items=args.search_items, dev_items=args.dev_items,
                   test_items=args.test_items, fit_items=args.fit_items)


def untuned_rows(dataset: str, kind: str, args: argparse.Namespace, *, baselines: bool) -> list[dict[str, Any]]:
    """The untuned judge (and, with ``baselines``, constant / random / embedding) on the tuner's test items."""
    splits = prepare_splits(spec_for(dataset, kind, args))
    lm = load_lm("local:smollm2") if kind == "likelihood" else None
    try:
        judge = make_judge(kind, lm, train=splits.demo_pool, label_range=splits.label_range, seed=args.seed)
        start = time.perf_counter()
        result = evaluate_judge(judge, splits.test, train=splits.train, label_range=splits.label_range,
                                embedding=baselines, n_resamples=args.resamples, seed=args.seed)
        seconds = time.perf_counter() - start
    finally:
        if lm is not None:
            lm.close()
    rows = []
    for metrics in result["rows"]:
        name = metrics["name"]
        if name == kind:
            rows.append(row(dataset, f"{kind} untuned", metrics, seconds, failures=metrics.get("parse_failures")))
        elif baselines:
            rows.append(row(dataset, name if name != "embedding" else "embedding (MiniLM) untuned", metrics, 0.0))
    return rows


def tuned_rows(dataset: str, kind: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The tuned judge on test, and the random predictor's mean and 2.5-97.5 percentile spread over 200
    seeds on the same items (one random draw's row, as ``evaluate_judge`` gives, can look lucky or unlucky)."""
    with tempfile.TemporaryDirectory() as runs:
        start = time.perf_counter()
        config, _, _ = tune(spec_for(dataset, kind, args), runs_dir=runs)
        seconds = time.perf_counter() - start
    test = config.metrics["test"]
    return [row(dataset, f"{kind} tuned", test, seconds, failures=test.get("parse_failures"),
                chosen={"params": config.params, "calibrator": config.calibrator["kind"]}),
            row(dataset, "random (200 seeds: mean, 2.5-97.5%)", config.metrics["baselines"]["random"], 0.0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (minutes per set on 2 cores)")
    parser.add_argument("--json", action="store_true", help="one JSON row per line")
    parser.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    parser.add_argument("--judges", nargs="+", choices=JUDGES, default=list(JUDGES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int)
    parser.add_argument("--fit-items", type=int, help="training items the hybrid fits on and demos come from "
                        "(seeded, question by question; default all)")
    parser.add_argument("--out", type=Path, help="also write every row, with the run's meta, to this JSON file")
    args = parser.parse_args()
    every: list[dict[str, Any]] = []
    args.trials = args.trials or (4 if args.quick else 12)
    args.search_items = 16 if args.quick else 40
    args.dev_items = 40 if args.quick else 150
    args.test_items = 100 if args.quick else 300
    args.resamples = 200 if args.quick else 1000
    for dataset in args.sets:
        rows: list[dict[str, Any]] = []
        for i, kind in enumerate(args.judges):
            try:
                rows.extend(untuned_rows(dataset, kind, args, baselines=i == 0))
                rows.extend(tuned_rows(dataset, kind, args))
            except Exception as exc:  # a judge that does not fit this data: say so, keep the other rows
                rows.append({"dataset": dataset, "method": f"{kind}", "skipped": f"{type(exc).__name__}: {exc}"})
        for r in rows:
            print(json.dumps(r) if args.json else r, flush=True)
        every.extend(rows)
    if args.out:  # every item scored alone: no protocol, no label of a scored item read
        meta = _results.meta(sys.argv)
        args.out.write_text(json.dumps({"meta": meta, "protocol": None, "rows": every}, indent=2) + "\n",
                            encoding="utf-8")


if __name__ == "__main__":
    main()
