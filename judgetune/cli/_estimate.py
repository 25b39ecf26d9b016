"""The commands of judge-assisted estimates: ``estimate`` (each system's mean or win rate, every pair's
difference) and ``pick --for estimate`` (a uniform random sample per system to label next)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from judgetune import datasets
from judgetune._files import atomic_write, clashes
from judgetune.cli._options import _mapping
from judgetune.errors import JudgetuneError, shown


def _confidence(text: str) -> float:
    try:
        value = float(text) if text.isascii() else math.nan
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a level between 0 and 1 such as 0.95, got {text!r}")
    return value


def _inputs(args: argparse.Namespace) -> list:
    catalog = str(args.data) in datasets.CATALOG
    return [args.config, *([] if catalog else [args.data]), *[p for p in (args.scores, args.labeled) if p]]


def _refuse_out(args: argparse.Namespace) -> None:
    if args.out is None:
        return
    if clashes(args.out, _inputs(args)):
        raise JudgetuneError(f"--out {shown(args.out)}: that is an input of this command; write the estimates "
                             "elsewhere")
    if args.out.resolve().is_dir() or not args.out.resolve().parent.is_dir():
        raise JudgetuneError(f"--out {shown(args.out)}: expected a file to write in an existing folder")
    if args.out.exists() and not args.force:
        raise JudgetuneError(f"--out {shown(args.out)}: the file exists; pass --force to replace it")


def _estimate(args: argparse.Namespace) -> None:
    from judgetune.estimating import estimate_files

    _refuse_out(args)
    mapping = _mapping(args)
    scale = None if args.scale is None else (args.scale.low, args.scale.high)
    result = estimate_files(args.config, args.data, args.by, scores=args.scores, labeled=args.labeled,
                            scale=scale, alpha=1 - args.confidence, api_base=args.api_base, mirror=args.mirror,
                            progress=True, fit=args.fit, seed=args.seed, **mapping)
    payload = {"config": str(args.config), "data": str(args.data), "by": args.by, **result.to_dict()}
    if args.out is not None:
        with atomic_write(args.out) as handle:
            json.dump(payload, handle, indent=1)
    for note in result.notes:
        print(shown(note), file=sys.stderr)
    if args.json:
        print(json.dumps(payload, indent=1))
        return
    print(_table(result))
    if args.out is not None:
        print(f"written: {shown(args.out)}")


def _figure(value: Any, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.{digits}g}"


def _interval(record: dict, key: str, low: str, high: str) -> str:
    if record.get(key) is None:
        return "-"
    return f"{record[key]:.3f} [{record[low]:.3f}, {record[high]:.3f}]"


def _p(value: float | None) -> str:
    return "-" if value is None else ("<0.001" if value < 0.001 else f"{value:.3f}")


def _needed(n: int, per: str) -> str:
    return {"input": f"{n} inputs", "system": f"{n} per system", "comparison": f"{n} comparisons"}[per]


def _table(result: Any) -> str:
    """The estimates as two plain tables: systems, then differences (B - A); every name shown whole and escaped
    (one line each), its column as wide as the longest."""
    level = f"{100 * (1 - result.alpha):g}%"
    low, high = result.scale
    systems = [shown(r["system"]) for r in result.systems]
    pairs = [f"{shown(r['b'])} - {shown(r['a'])}" for r in result.pairs]
    wide = max([20, *map(len, systems)])
    method = "cross (fitted)" if result.method == "cross" else "PPI++"
    judges = [_figure(r["judge"]) + ("" if r["judge_note"] == "biased" else " (unvalidated)") for r in result.systems]
    judge_wide = max([14, *map(len, judges)])
    lines = [f"{result.measure} per system on the scale {low:g} to {high:g}, {level} intervals over every row of the "
             "file (as if all were labeled)",
             f"{'system':<{wide}} {'rows':>7} {'labeled':>7}  {'judge (biased)':>{judge_wide}}  {'labels only':<24} "
             f"{method:<24} {'labels worth':>12}"]
    for name, r, judge in zip(systems, result.systems, judges):
        worth = "-" if r["labels_worth"] is None else f"{r['labels_worth']:.2f}x"
        lines.append(f"{name:<{wide}} {r['rows']:>7} {r['labeled']:>7}  {judge:>{judge_wide}}  "
                     f"{_interval(r, 'labels', 'labels_low', 'labels_high'):<24} "
                     f"{_interval(r, 'ppi', 'ppi_low', 'ppi_high'):<24} {worth:>12}")
    wide = max([30, *map(len, pairs)])
    lines += ["", f"{'difference (B - A)':<{wide}} {'pairing':<11} {method:<26} {'p':>7}  {'labels only':<26} "
                  f"{'labels for 80% power':>22}"]
    for name, r in zip(pairs, result.pairs):
        needed = "-" if r["labels_needed"] is None else _needed(r["labels_needed"], r["labels_needed_per"])
        lines.append(f"{name:<{wide}} {r['pairing'] or '-':<11} {_interval(r, 'difference', 'low', 'high'):<26} "
                     f"{_p(r['p_value']):>7}  {_interval(r, 'labels_difference', 'labels_low', 'labels_high'):<26} "
                     f"{needed:>22}")
    return "\n".join(lines)


def _pick_for_estimate(args: argparse.Namespace) -> None:
    from judgetune.estimating import PROBABILITY, by_columns, read_observations
    from judgetune.picking import draw, read_rows

    if args.by is None:
        raise JudgetuneError("pick --for estimate needs --by SYSTEM (or A,B for pairwise rows): the column naming "
                             "each row's system")
    names = by_columns(args.by)
    mapping = _mapping(args)
    obs = read_observations(args.data, names, labeled=args.labeled, **mapping)
    sample = draw(obs, args.n, seed=args.seed)
    rows = read_rows(args.data)
    if len(rows) != len(obs):  # the two readers disagree on what a row is: say so, never write wrong rows
        raise JudgetuneError(f"{shown(args.data)}: read {len(obs)} items but {len(rows)} rows; write the file as JSONL")
    # each picked row carries the id the estimate knows it by (STEM:LINE when the file has none), so that the
    # labeled file joins back whatever its name
    ids = {(mapping["fields"] or {}).get("id", "id"): [obs.ids[i] for i in sample.rows]}
    rows.write(args.out, sample.rows, columns=ids, meta={PROBABILITY: sample.probabilities.tolist()})
    counts = ", ".join(f"{shown(k)} {v}" for k, v in sample.per_system.items())
    unit = {"input": "inputs every system answered (each system's answer to each)",
            "comparison": "comparisons", "row": "rows per system"}[sample.unit]
    summary = {"picked": len(sample.rows), "unit": sample.unit, "per_system": sample.per_system, "seed": args.seed,
               "out": str(args.out), "sampling_probability": sorted(set(map(float, sample.probabilities)))}
    if args.json:
        print(json.dumps(summary, indent=1))
        return
    print(f"{len(sample.rows)} rows written to {shown(args.out)}: {args.n} {unit} drawn uniformly at random (seed "
          f"{args.seed}; per system: {counts}), each with its id and sampling_probability")
    print("label them, then: judgetune estimate --config JUDGE.json --data DATA --by "
          f"{shown(args.by)} --labeled LABELED", file=sys.stderr)


def _pick_either(args: argparse.Namespace) -> None:
    """``pick``: for calibration (the default) or, with ``--for estimate``, a uniform sample per system."""
    from judgetune.cli._scoring import _pick, check_pick_paths

    if args.purpose != "estimate":
        if args.by is not None:
            raise JudgetuneError("--by: only with --for estimate (pick for calibration covers the judge's scores)")
        _pick(args)
        return
    check_pick_paths(args)
    if args.out.suffix.lower() != args.data.suffix.lower():
        raise JudgetuneError(f"--out {shown(args.out)}: expected a {args.data.suffix} file, the input's format")
    _pick_for_estimate(args)
