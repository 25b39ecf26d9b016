"""Panels and stacked judges on a saved score matrix (issue 48): what the LM adds beside the signals, with no LM time.

From a matrix (``benchmarks/score_matrix.py``) and the signal judges' features of its items (sentence embeddings,
BM25, overlap, length: no LM, computed here in seconds), one seeded draw of ``--labels`` labeled items (whole
questions; the rest test) fits and chooses every judge on the labeled items alone and scores it on the test items:

- ``signals``: the hybrid of the signals (the hybrid judge's ridge model on its default signals);
- ``stacked``: the same model with the LM candidates' raw scores beside the signals (``stacked-default``: only the
  untuned LM judge's);
- ``lm``: the best LM-only candidate on the labeled items (what tuning the LM judge alone ships, untested);
  ``lm-default``: the untuned LM judge;
- ``panel``: the mean of the within-draw ranks of the three candidates best on the labeled items (``panel-all``:
  every candidate);
- each member (``default``, ``c1``, ...).

Rows give test Spearman (global) and MAE (LM-only and panel scores calibrated on the labeled items by the
calibrator form their cross-validation picks), and paired differences with 95% bootstrap intervals over the test
items: ``vs_signals``, ``vs_lm``, ``vs_best_member`` (the member best on the labeled items). ``draws`` repeats the
whole comparison on that many seeded draws and reports each judge's mean Spearman difference against the signals
and the share of draws it was ahead.

    python benchmarks/stacking.py benchmarks/results/matrix-smollm2-likelihood-sts2012-msrpar.json [--labels 300]
        [--draws 50] [--seed 0] [--out PATH]

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
from rules import _split_units, load_matrix
from scipy.stats import rankdata

from judgetune import datasets
from judgetune.calibration import CALIBRATORS, cross_fitted
from judgetune.judges import BuildContext, build
from judgetune.judges._hybrid_model import HybridModel
from judgetune.judges._spec import JudgeSpec
from judgetune.stats import bootstrap_interval, correlation, figures, filled, mae, paired_difference


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
    rank_all = ranks(scores)
    raw = {"signals": ridge_scores(x, gold, lab, test),
           "stacked": ridge_scores(np.hstack([x, lm_cols]), gold, lab, test),
           "stacked-default": ridge_scores(np.hstack([x, lm_cols[:, :1]]), gold, lab, test),
           "lm": scores[best, test], "lm-default": scores[0, test],
           "panel": rank_all[top3][:, test].mean(axis=0), "panel-all": rank_all[:, test].mean(axis=0)}
    panel_lab = {"panel": rank_all[top3][:, lab].mean(axis=0), "panel-all": rank_all[:, lab].mean(axis=0)}
    names = [c["name"] for c in m["candidates"]]
    for j, name in enumerate(names):
        raw[name] = scores[j, test]
    pred = {}
    for name, r in raw.items():
        if name in ("signals", "stacked", "stacked-default"):
            pred[name] = np.clip(r, *label_range)
        elif name in panel_lab:
            pred[name] = calibrated(panel_lab[name], gl, r, label_range)
        else:
            j = best if name == "lm" else 0 if name == "lm-default" else names.index(name)
            pred[name] = calibrated(scores[j, lab], gl, r, label_range)
    chosen = {"lm": names[best], "panel": "+".join(names[i] for i in top3), "best_member": names[best]}
    return {k: filled(v) for k, v in raw.items()}, pred, chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("matrix", type=Path)
    parser.add_argument("--labels", type=int, default=300)
    parser.add_argument("--draws", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    m = load_matrix(args.matrix)
    meta = m["meta"]
    full = json.loads(args.matrix.read_text())
    ids = full["items"]["ids"][:m["n"]]
    x, names = signal_features(meta["dataset"], ids, meta["demo_pool"])
    label_range = tuple(meta["label_range"])
    gold = m["gold"]
    rows = []
    lab, test = _split_units(m["all_groups"], args.labels, np.random.default_rng([args.seed, 0]))
    raw, pred, chosen = judges_on_draw(m, x, lab, test, label_range)
    g = gold[test]
    for name in raw:
        ci = bootstrap_interval(correlation, raw[name], g, seed=args.seed)
        row: dict[str, Any] = {"judge": name, "spearman": correlation(raw[name], g),
                               "spearman_ci": [ci.low, ci.high], "mae": mae(pred[name], g)}
        for key, other in (("vs_signals", "signals"), ("vs_lm", "lm"), ("vs_best_member", chosen["best_member"])):
            if other != name:
                d = paired_difference(correlation, raw[name], raw[other], g, seed=args.seed)
                row[key] = {"value": d["difference"], "low": d["ci"][0], "high": d["ci"][1]}
        rows.append(row)
    constant = np.full(len(test), float(np.median(gold[lab])))
    constant_ci = bootstrap_interval(mae, constant, g, seed=args.seed)
    rows.append({"judge": "constant", "spearman": None, "mae": mae(constant, g),
                 "mae_ci": [constant_ci.low, constant_ci.high]})
    over: dict[str, list[float]] = {name: [] for name in raw}
    for d in range(args.draws):
        lab_d, test_d = _split_units(m["all_groups"], args.labels, np.random.default_rng([args.seed, d + 1]))
        raw_d, _, _ = judges_on_draw(m, x, lab_d, test_d, label_range)
        base = correlation(raw_d["signals"], gold[test_d])
        for name, r in raw_d.items():
            over[name].append(correlation(r, gold[test_d]) - base)
    for row in rows:
        if row["judge"] not in over:
            continue
        diffs = np.asarray(over[row["judge"]])
        row["draws_vs_signals_mean"] = float(diffs.mean())
        row["draws_ahead_of_signals"] = float((diffs > 0).mean())
    record = {"meta": {"lm": meta["lm"], "dataset": meta["dataset"], "judge": meta["judge"], "matrix": args.matrix.name,
                       "commit": meta.get("commit"), "command": "python " + " ".join(sys.argv),
                       "complete": bool(meta["complete"]), "labels": int(len(lab)), "test_items": int(len(test)),
                       "signal_features": names, "draws": args.draws, "chosen": chosen},
              "rows": rows}
    lm = meta["lm"].split(":", 1)[-1]
    out = args.out or args.matrix.parent / f"stacking-{lm}-{meta['dataset']}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{meta['dataset']} ({meta['lm']}, {meta['judge']}): {len(lab)} labels, {len(test)} test items; "
          f"chosen {chosen}")
    for row in rows:
        if row["spearman"] is None:
            print(f"  {row['judge']:16} mae {row['mae']:.3f}")
            continue
        vs = row.get("vs_signals") or {}
        print(f"  {row['judge']:16} spearman {row['spearman']:.3f}  mae {row['mae']:.3f}  vs signals "
              f"{vs.get('value', 0):+.3f} [{vs.get('low', 0):+.3f}, {vs.get('high', 0):+.3f}]  "
              f"draws: {row['draws_vs_signals_mean']:+.3f} mean, ahead {row['draws_ahead_of_signals']:.0%}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
