"""Per-subset tables on SummaC and LLMBar: the untuned LM judge beside judges without an LM, per
subset, next to the published figures we could find.

SummaC (the four validation subsets in the catalog): the binary fact check's P(consistent) against the 0/1
labels, as ROC AUC (threshold-free) and balanced accuracy, SummaC's own measure, with the threshold chosen on
one half of the sample and applied to the other (two stratified halves, swapped, averaged: SummaC chooses its
threshold on validation data and reports test). Each subset's sample is stratified, half consistent and half
not (balanced accuracy and AUC do not depend on the class ratio; polytope is 5% consistent). LLMBar: natural
and the four adversarial subsets (by the items' ids), the order-swapped pairwise judge's pair accuracy.

Beside the LM judge: the embedding and ROUGE-L baselines (no fit) and the signal hybrid, fitted on the subset's
items outside the sample (what a user with that subset's labels would fit on). Intervals: 95% bootstrap over
the sample's items. Answers go through the shared answer cache, so a stopped run resumes; with ``--out`` the
file is rewritten as each row finishes (``"complete": false`` until the end).

    python benchmarks/subsets.py [--lm local:smollm2] [--items 40] [--only SUBSET ...] [--seed 0] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)
import numpy as np  # noqa: E402
from sklearn.metrics import balanced_accuracy_score, roc_auc_score, roc_curve  # noqa: E402

from judgetune import datasets  # noqa: E402
from judgetune.evaluation import pair_accuracy  # noqa: E402
from judgetune.judges import LM_JUDGES, make_judge  # noqa: E402
from judgetune.lm import load_lm  # noqa: E402
from judgetune.stats import bootstrap_interval  # noqa: E402

# (catalog set, subset id prefix or None for the whole set)
SUBSETS = {"summac-summeval": ("summac-summeval", None), "summac-factcc": ("summac-factcc", None),
           "summac-polytope": ("summac-polytope", None), "summac-xsumfaith": ("summac-xsumfaith", None),
           "llmbar-natural": ("llmbar-natural", None),
           **{f"llmbar-{s.lower()}": ("llmbar-adversarial", f"Adversarial_{s}")
              for s in ("Neighbor", "GPTInst", "GPTOut", "Manual")}}
LM_JUDGE = {"summac": ("factcheck", {"mode": "binary"}), "llmbar": ("pairwise", {})}
NO_LM = ("embedding", "rougeL", "hybrid")
# Published figures on the same subsets (other splits, stronger models); each row says where it is from.
PUBLISHED = [
    *[(f"summac-{s}", "published: SummaC-ZS (NLI, test split)", "balanced_accuracy", v)
      for s, v in (("xsumfaith", 0.584), ("polytope", 0.620), ("factcc", 0.838), ("summeval", 0.787))],
    *[(f"summac-{s}", "published: SummaC-Conv (NLI, test split)", "balanced_accuracy", v)
      for s, v in (("xsumfaith", 0.664), ("polytope", 0.627), ("factcc", 0.895), ("summeval", 0.817))],
]
SOURCES = {"summac": "Laban et al., SummaC (TACL 2022), Table 2: balanced accuracy on each subset's test split",
           "llmbar": "Zeng et al., LLMBar (ICLR 2024): expert annotators agree on 94% of items; the best evaluator "
                     "(GPT-4 with the paper's prompting) about 83% on the adversarial set; chance is 50%"}


def sample(name: str, n: int, seed: int) -> tuple[list, list]:
    """(the sample, the rest of the subset): stratified by label for SummaC, uniform for LLMBar."""
    catalog, prefix = SUBSETS[name]
    items = [e for e in datasets.load(catalog) if prefix is None or e.id.startswith(prefix + "_")]
    rng = np.random.default_rng(seed)
    if catalog.startswith("summac"):
        chosen = []
        for label in (0.0, 1.0):
            pool = [e for e in items if e.judgment == label]
            chosen += [pool[i] for i in rng.permutation(len(pool))[:n // 2]]
    else:
        chosen = [items[i] for i in rng.permutation(len(items))[:n]]
    ids = {e.id for e in chosen}
    return chosen, [e for e in items if e.id not in ids]


def crossfit_balanced_accuracy(scores: np.ndarray, gold: np.ndarray, seed: int) -> float | None:
    """Balanced accuracy with the threshold chosen on one stratified half (Youden's J) and applied to the other,
    both ways, averaged."""
    rng = np.random.default_rng(seed)
    half = np.zeros(len(gold), bool)
    for label in (0, 1):
        where = np.flatnonzero(gold == label)
        half[rng.permutation(where)[:len(where) // 2]] = True
    values = []
    for fit in (half, ~half):
        if len(set(gold[fit])) < 2 or len(set(gold[~fit])) < 2:
            return None
        fpr, tpr, thresholds = roc_curve(gold[fit], scores[fit])
        cut = thresholds[int(np.argmax(tpr - fpr))]
        values.append(balanced_accuracy_score(gold[~fit] == 1, scores[~fit] >= cut))
    return float(np.mean(values))


def binary_figures(scores: list[float | None], examples: list, seed: int) -> dict[str, Any]:
    kept = [(s, e.judgment) for s, e in zip(scores, examples) if s is not None]
    s, g = np.array([k[0] for k in kept], float), np.array([k[1] for k in kept], int)
    ci = bootstrap_interval(_auc, s, g, seed=seed)
    return {"auc": _auc(s, g), "auc_ci": [ci.low, ci.high], "balanced_accuracy": crossfit_balanced_accuracy(s, g, seed)}


def _auc(scores: np.ndarray, gold: np.ndarray) -> float | None:
    return float(roc_auc_score(gold, scores)) if len(set(gold)) == 2 else None


def pair_figures(scores: list[float | None], examples: list, seed: int) -> dict[str, Any]:
    kept = [(s, e.judgment) for s, e in zip(scores, examples) if s is not None]
    s, g = np.array([k[0] for k in kept], float), np.array([k[1] for k in kept], float)
    ci = bootstrap_interval(pair_accuracy, s, g, seed=seed)
    return {"pair_accuracy": pair_accuracy(s, g), "pair_accuracy_ci": [ci.low, ci.high]}


def subset_rows(name: str, args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    chosen, rest = sample(name, args.items, args.seed)
    family = name.split("-")[0]
    label_range = (0.0, 1.0) if family == "summac" else (-1.0, 1.0)
    lm_kind, lm_params = LM_JUDGE[family]
    for kind, params in [(lm_kind, lm_params), *[(k, {}) for k in NO_LM]]:
        lm = load_lm(args.lm) if kind in LM_JUDGES else None
        judge = make_judge(kind, lm, train=rest, label_range=label_range, params=params, seed=args.seed)
        start = time.perf_counter()
        verdicts = judge.judge_all(chosen, progress=sys.stderr.isatty())
        seconds = time.perf_counter() - start
        if lm is not None:
            lm.close()
        scores = [v.score for v in verdicts]
        figures = (binary_figures if family == "summac" else pair_figures)(scores, chosen, args.seed)
        row = {"subset": name, "judge": "lm" if lm else kind, "kind": kind, "lm": args.lm if lm else None,
                     "n": len(chosen), "positives": sum(e.judgment == 1.0 for e in chosen),
                     "failed": sum(s is None for s in scores), "fit_items": len(rest) if kind == "hybrid" else 0,
                     "seconds_per_item": round(seconds / len(chosen), 3), **figures}
        print(f"  {name} {row['judge']}: {json.dumps({k: row[k] for k in figures})}", file=sys.stderr)
        yield row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm", default="local:smollm2")
    parser.add_argument("--items", type=int, default=40, help="items per subset (SummaC: half consistent)")
    parser.add_argument("--only", nargs="+", choices=list(SUBSETS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    meta = {**_results.meta(sys.argv), "lm": args.lm, "items_per_subset": args.items, "seed": args.seed,
            "published_sources": SOURCES}
    names = args.only or list(SUBSETS)
    rows: list[dict[str, Any]] = [{"subset": s, "judge": j, "published": True, m: v}
                                  for s, j, m, v in PUBLISHED if s in names]

    def write(complete: bool) -> None:
        if args.out:
            args.out.write_text(json.dumps({"meta": {**meta, "complete": complete}, "rows": rows}, indent=1) + "\n")

    for name in names:
        for row in subset_rows(name, args):
            rows.append(row)
            write(False)
    write(True)
    if not args.out:
        print(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
