"""Panels and stacked judges on a saved score matrix: what the LM adds beside the signals, with no LM time.

From a matrix (``benchmarks/score_matrix.py``) and the signal judges' features of its items (sentence embeddings,
BM25, overlap, length: no LM, computed here in seconds), one seeded draw of ``--labels`` labeled items (whole
questions; the rest test) fits and chooses every judge on the labeled items alone and scores it on the test items:

- ``signals``: the hybrid of the signals (the hybrid judge's ridge model on its default signals);
- ``stacked``: the same model with the LM candidates' raw scores beside the signals (``stacked-default``: only the
  first matrix's untuned LM judge's; ``stacked-defaults``: every pooled matrix's untuned judge, as a stacked hybrid
  with the LM signals of those kinds would have);
- ``lm``: the best LM-only candidate on the labeled items (what tuning the LM judge alone ships, untested);
  ``lm-default``: the untuned LM judge;
- ``panel``: the mean of the within-draw ranks of the three candidates best on the labeled items (``panel-all``:
  every candidate); ``panel-z`` and ``panel-all-z``: the same members' scores each standardized by the mean and sd
  of its labeled scores, then averaged, so an item's score needs that item alone (what a frozen panel would ship);
- each member (``default``, ``c1``, ...).

Rows give test Spearman (global) and MAE (LM-only and panel scores calibrated on the labeled items by the
calibrator form their cross-validation picks), and paired differences with 95% bootstrap intervals over the test
items: ``vs_signals``, ``vs_lm``, ``vs_best_member`` (the member best on the labeled items). Those intervals are of
the one draw's fitted judges. ``draws`` repeats the whole comparison on that many seeded random splits and reports
each judge's mean Spearman difference against the signals, the share of splits it was ahead, and
``draws_vs_signals``: that mean with a 95% interval by the corrected resampled t (``split_interval``), for what the
judge gains over the signals when both are fitted on ``--labels`` items, the variation of the labeled items included.

``crossfit`` uses every item as a test item once, for intervals on more than one draw's remainder: the items are cut
into parts of whole questions (four when 300 of 400 are labels); for each part, every judge is fitted and chosen on
about ``--labels`` items of the other parts and scores the part. Spearman is taken over the pooled test scores (the
best LM candidate, which may differ between folds, standardized on its labeled scores), with paired bootstrap
intervals over all the items: they hold the folds' fits fixed, so they are narrower than an interval for the
procedure (``draws_vs_signals`` is that one).

    python benchmarks/stacking.py benchmarks/results/matrix-smollm2-likelihood-sts2012-msrpar.json [MATRIX ...]
        [--labels 300] [--draws 50] [--seed 0] [--out PATH]

Several matrices of one LM on the same items (e.g. the rubric and likelihood judges) are compared as one: their
candidates are pooled (named ``<judge>:<candidate>``) and the stacked judge takes every LM judge's scores.

Writes ``benchmarks/results/stacking-<lm>-<set>.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
from _matrix import load_matrix, split_units
from _results import lm_name
from scipy import stats as sps
from scipy.stats import rankdata

from judgetune import datasets
from judgetune.calibration import CALIBRATORS, cross_fitted
from judgetune.judges import BuildContext, HybridModel, JudgeSpec, build
from judgetune.stats import (
    bootstrap_interval,
    corrected_lower,
    correlation,
    difference_record,
    figures,
    filled,
    mae,
    paired_difference,
)


def load_matrices(paths: list[Path]) -> dict[str, Any]:
    """One matrix, or several on the same items pooled: candidates named by judge, cut to the items all scored."""
    loaded = [load_matrix(p) for p in paths]
    if len(loaded) == 1:
        return loaded[0]
    ids = [json.loads(p.read_text())["items"]["ids"] for p in paths]
    if any(i != ids[0] for i in ids) or len({m["meta"]["lm"] for m in loaded}) > 1:
        sys.exit("matrices to pool must share their LM and their items")
    n = min(m["n"] for m in loaded)
    first = loaded[0]
    candidates = [{**c, "name": f"{m['meta']['judge']}:{c['name']}"} for m in loaded for c in m["candidates"]]
    scores = np.vstack([m["scores"][:, :n] for m in loaded])
    # the first matrix's default is the default LM judge
    meta = {**first["meta"], "judge": "+".join(m["meta"]["judge"] for m in loaded),
            "complete": all(m["meta"]["complete"] for m in loaded)}
    return {"meta": meta, "candidates": candidates, "scores": scores, "gold": first["gold"][:n],
            "groups": None if first["groups"] is None else first["groups"][:n], "all_groups": first["all_groups"][:n],
            "n": n}


def signal_features(dataset: str, ids: list[str], pool_ids: list[str]) -> tuple[np.ndarray, list[str]]:
    """The hybrid judge's signal features of the matrix items (BM25's corpus statistics from the demo pool)."""
    loaded, label_range = datasets.load_data(dataset)
    examples = {e.id: e for e in loaded}
    pool = [examples[i] for i in pool_ids]
    hybrid = build(JudgeSpec("hybrid", {}), BuildContext(demo_pool=pool, label_range=label_range))
    kept = [n for n in hybrid.signals if n not in hybrid.dropped_]
    x, names, _, _ = hybrid.usable_features([examples[i] for i in ids], kept, keep_failing=True)
    return x, names


def ridge_scores(x: np.ndarray, gold: np.ndarray, lab: np.ndarray, test: np.ndarray) -> np.ndarray:
    model = HybridModel([f"f{i}" for i in range(x.shape[1])], model="ridge", alpha=1.0)
    model.fit(x[lab], gold[lab], ["g"] * len(lab))
    return model.predict(x[test], ["g"] * len(test))[0]


def calibrated(raw_lab: np.ndarray, gold_lab: np.ndarray, raw_test: np.ndarray, label_range) -> np.ndarray:
    """``raw_test`` on the human scale by the calibrator form the labeled items' cross-validation picks."""
    raw_lab, raw_test = filled(raw_lab), filled(raw_test, float(np.nanmedian(raw_lab)))
    _, kind, _ = cross_fitted(raw_lab, gold_lab, label_range=label_range, seed=0)
    return CALIBRATORS[kind](label_range).fit(raw_lab, gold_lab).predict(raw_test)


def standardized(row: np.ndarray, lab: np.ndarray, test: np.ndarray) -> np.ndarray:
    """``row``'s test scores on the scale of its labeled scores (mean 0, sd 1): the same ranks within a draw, and
    comparable across folds when the chosen candidate differs between them."""
    fit = filled(row[lab])
    return (row[test] - fit.mean()) / (fit.std() or 1.0)


def ranks(scores: np.ndarray) -> np.ndarray:
    """Each row's scores as ranks in [0, 1] (a failure in the middle)."""
    return np.stack([(rankdata(filled(r)) - 1) / max(1, len(r) - 1) for r in scores])


def judges_on_draw(m: dict[str, Any], x: np.ndarray, lab: np.ndarray, test: np.ndarray,
                   label_range) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, str]]:
    """Every judge's test predictions (human scale) and test raw scores (for Spearman), fitted on ``lab``."""
    scores, gold = m["scores"], m["gold"]
    gl = gold[lab]
    fig = np.nan_to_num(figures(scores[:, lab], gl), nan=-np.inf)
    best = int(np.argmax(fig))
    top3 = np.argsort(-fig, kind="stable")[:3]
    lm_cols = np.column_stack([filled(r) for r in scores])
    defaults = [j for j, c in enumerate(m["candidates"]) if c["name"].split(":")[-1] == "default"]
    rank_all = ranks(scores)
    raw = {"signals": ridge_scores(x, gold, lab, test),
           "stacked": ridge_scores(np.hstack([x, lm_cols]), gold, lab, test),
           "stacked-default": ridge_scores(np.hstack([x, lm_cols[:, :1]]), gold, lab, test),
           "stacked-defaults": ridge_scores(np.hstack([x, lm_cols[:, defaults]]), gold, lab, test),
           "lm": standardized(scores[best], lab, test), "lm-default": scores[0, test],
           "panel": rank_all[top3][:, test].mean(axis=0), "panel-all": rank_all[:, test].mean(axis=0)}
    panel_lab = {"panel": rank_all[top3][:, lab].mean(axis=0), "panel-all": rank_all[:, lab].mean(axis=0)}
    names = [c["name"] for c in m["candidates"]]
    for j, name in enumerate(names):
        raw[name] = scores[j, test]
    for name, members in (("panel-z", top3), ("panel-all-z", range(len(scores)))):
        raw[name] = np.mean([standardized(scores[j], lab, test) for j in members], axis=0)
        panel_lab[name] = np.mean([standardized(scores[j], lab, lab) for j in members], axis=0)
    pred = {}
    for name, r in raw.items():
        if name.startswith("signals") or name.startswith("stacked"):
            pred[name] = np.clip(r, *label_range)
        elif name in panel_lab:
            pred[name] = calibrated(panel_lab[name], gl, r, label_range)
        else:
            j = best if name == "lm" else 0 if name == "lm-default" else names.index(name)
            pred[name] = calibrated(scores[j, lab], gl, r, label_range)
    chosen = {"lm": names[best], "panel": "+".join(names[i] for i in top3), "best_member": names[best]}
    return {k: filled(v) for k, v in raw.items()}, pred, chosen


def fold_splits(all_groups: list[str], labels: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every item tested once: the items cut into ``ceil(n / (n - labels))`` parts of whole questions; each part is
    a fold's test items and about ``labels`` items drawn from the others (whole questions) its labeled items."""
    n = len(all_groups)
    folds = int(np.ceil(n / max(1, n - labels)))
    keys = list(dict.fromkeys(all_groups))
    order = np.random.default_rng([seed, 999]).permutation(len(keys))
    part = {keys[i]: r % folds for r, i in enumerate(order)}
    splits = []
    for k in range(folds):
        test = np.array([i for i, g in enumerate(all_groups) if part[g] == k])
        rest = np.array([i for i, g in enumerate(all_groups) if part[g] != k])
        sub, _ = split_units([all_groups[i] for i in rest], labels, np.random.default_rng([seed, 1000 + k]))
        splits.append((np.sort(rest[sub]), test))
    return splits


def split_interval(differences: np.ndarray, test_fraction: float, level: float = 0.95) -> dict[str, Any]:
    """The mean of a judge's Spearman minus another's over ``J`` repeated random splits (each judge fitted on a
    split's labeled items, both scored on the rest), with a ``level`` interval by Nadeau and Bengio's corrected
    resampled t (``corrected_lower``): the splits share items, so the mean's variance is taken as
    ``(1 / J + n_test / n_train) * s^2`` rather than ``s^2 / J`` (``test_fraction``: ``n_test / n_train``), on
    ``J - 1`` degrees of freedom. The interval is for the expected difference of the two procedures fitted on that
    many labels. On synthetic pairs of equally good fitted judges (300 labels, 20 splits) it held 0 in 143 and 144
    of 150 seeds on 400 and 900 items, where the plain t over the same splits held it in 80 and 42
    (tests/test_stacking_interval.py)."""
    test = corrected_lower(np.asarray(differences, dtype=float), test_fraction)
    out = {"value": test["mean"], "low": None, "high": None, "splits": test["units"], "test_fraction": test_fraction,
           "method": "corrected resampled t over random splits (Nadeau and Bengio)"}
    if test["lower"] is None:  # fewer than two finite differences, or no spread
        return out
    low, high = sps.t.interval(level, test["units"] - 1, loc=test["mean"], scale=test["se"])
    return {**out, "low": float(low), "high": float(high)}


def crossfit_rows(m: dict[str, Any], x: np.ndarray, labels: int, seed: int, label_range) -> dict[str, Any]:
    """Each judge fitted and chosen on a fold's labeled items and scored on its test items, every item tested once;
    Spearman over the pooled test scores, paired differences with bootstrap intervals over all the items."""
    gold = m["gold"]
    splits = fold_splits(m["all_groups"], labels, seed)
    raw: dict[str, np.ndarray] = {}
    pred: dict[str, np.ndarray] = {}
    chosen_per_fold = []
    for lab, test in splits:
        r, p, chosen = judges_on_draw(m, x, lab, test, label_range)
        chosen_per_fold.append(chosen)
        for name in r:
            raw.setdefault(name, np.full(len(gold), np.nan))[test] = r[name]
            pred.setdefault(name, np.full(len(gold), np.nan))[test] = p[name]
    best = [c["best_member"] for c in chosen_per_fold]
    groups = m["groups"]
    rows = []
    for name in raw:
        ci = bootstrap_interval(correlation, raw[name], gold, groups, seed=seed)
        row: dict[str, Any] = {"judge": name, "spearman": correlation(raw[name], gold), "spearman_ci": [ci.low, ci.high],
                               "mae": mae(pred[name], gold)}
        for key, other in (("vs_signals", "signals"), ("vs_lm", "lm")):
            if other != name:
                d = paired_difference(correlation, raw[name], raw[other], gold, groups, seed=seed)
                row[key] = difference_record(d)
        if name.startswith("panel"):  # the best member if one candidate in every fold, else the per-fold best
            best_member = best[0] if len(set(best)) == 1 else "lm"
            d = paired_difference(correlation, raw[name], raw[best_member], gold, groups, seed=seed)
            row["vs_best_member"] = difference_record(d)
        rows.append(row)
    return {"folds": len(splits), "labels_per_fold": [int(len(lab)) for lab, _ in splits], "items": int(len(gold)),
            "chosen": chosen_per_fold, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("matrix", type=Path, nargs="+")
    parser.add_argument("--labels", type=int, default=300)
    parser.add_argument("--draws", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    m = load_matrices(args.matrix)
    meta = m["meta"]
    full = json.loads(args.matrix[0].read_text())
    ids = full["items"]["ids"][:m["n"]]
    x, names = signal_features(meta["dataset"], ids, meta["demo_pool"])
    label_range = tuple(meta["label_range"])
    gold = m["gold"]
    rows = []
    lab, test = split_units(m["all_groups"], args.labels, np.random.default_rng([args.seed, 0]))
    raw, pred, chosen = judges_on_draw(m, x, lab, test, label_range)
    g = gold[test]
    for name in raw:
        ci = bootstrap_interval(correlation, raw[name], g, seed=args.seed)
        row: dict[str, Any] = {"judge": name, "spearman": correlation(raw[name], g),
                               "spearman_ci": [ci.low, ci.high], "mae": mae(pred[name], g)}
        for key, other in (("vs_signals", "signals"), ("vs_lm", "lm"), ("vs_best_member", chosen["best_member"])):
            if other != name:
                d = paired_difference(correlation, raw[name], raw[other], g, seed=args.seed)
                row[key] = difference_record(d)
        rows.append(row)
    constant = np.full(len(test), float(np.median(gold[lab])))
    constant_ci = bootstrap_interval(mae, constant, g, seed=args.seed)
    rows.append({"judge": "constant", "spearman": None, "mae": mae(constant, g),
                 "mae_ci": [constant_ci.low, constant_ci.high]})
    over: dict[str, list[float]] = {name: [] for name in raw}
    shares = []  # each split's n_test / n_train
    for d in range(args.draws):
        lab_d, test_d = split_units(m["all_groups"], args.labels, np.random.default_rng([args.seed, d + 1]))
        raw_d, _, _ = judges_on_draw(m, x, lab_d, test_d, label_range)
        base = correlation(raw_d["signals"], gold[test_d])
        shares.append(len(test_d) / len(lab_d))
        for name, r in raw_d.items():
            over[name].append(correlation(r, gold[test_d]) - base)
    for row in rows:
        if row["judge"] not in over:
            continue
        diffs = np.asarray(over[row["judge"]])
        row["draws_vs_signals_mean"] = float(diffs.mean())
        row["draws_ahead_of_signals"] = float((diffs > 0).mean())
        if row["judge"] != "signals":
            row["draws_vs_signals"] = split_interval(diffs, float(np.mean(shares)))
    crossfit = crossfit_rows(m, x, args.labels, args.seed, label_range)
    record = {"meta": {"lm": meta["lm"], "dataset": meta["dataset"], "judge": meta["judge"],
                       "matrix": [p.name for p in args.matrix],
                       "commit": meta.get("commit"), "command": "python " + " ".join(sys.argv),
                       "complete": bool(meta["complete"]), "labels": int(len(lab)), "test_items": int(len(test)),
                       "signal_features": names, "draws": args.draws, "chosen": chosen},
              "rows": rows, "crossfit": crossfit}
    out = args.out or args.matrix[0].parent / f"stacking-{lm_name(meta['lm'])}-{meta['dataset']}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{meta['dataset']} ({meta['lm']}, {meta['judge']}): {len(lab)} labels, {len(test)} test items; "
          f"chosen {chosen}")
    for row in rows:
        if row["spearman"] is None:
            print(f"  {row['judge']:16} mae {row['mae']:.3f}")
            continue
        vs, over_splits = row.get("vs_signals") or {}, row.get("draws_vs_signals") or {}
        interval = ("" if over_splits.get("low") is None
                    else f" [{over_splits['low']:+.3f}, {over_splits['high']:+.3f}], corrected t")
        print(f"  {row['judge']:16} spearman {row['spearman']:.3f}  mae {row['mae']:.3f}  vs signals "
              f"{vs.get('value', 0):+.3f} [{vs.get('low', 0):+.3f}, {vs.get('high', 0):+.3f}]  "
              f"{args.draws} splits: {row['draws_vs_signals_mean']:+.3f}{interval}, "
              f"ahead {row['draws_ahead_of_signals']:.0%}")
    print(f"cross-fitted: {crossfit['folds']} folds of ~{args.labels} labels, every one of {crossfit['items']} items "
          "tested once")
    for row in crossfit["rows"]:
        vs, vb = row.get("vs_signals") or {}, row.get("vs_best_member")
        extra = f"  vs best member {vb['value']:+.3f} [{vb['low']:+.3f}, {vb['high']:+.3f}]" if vb else ""
        print(f"  {row['judge']:16} spearman {row['spearman']:.3f}  vs signals {vs.get('value', 0):+.3f} "
              f"[{vs.get('low', 0):+.3f}, {vs.get('high', 0):+.3f}]{extra}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
