"""RAG claim metrics (the RAGChecker issue's benchmark), with the embedded model by default.

1. RAGChecker's two example inputs: our metrics beside the outputs shipped with them (extracted
   and checked by Llama3-70B), and RAGChecker's own claim matrices put through our metric functions.
2. The meta-evaluation: both responses of a seeded sample of the 280 human-labeled instances are
   scored (precision, recall, F1; the human data has no retrieved context), and the difference
   model2 - model1 is correlated with both annotators' labels exactly as ``judgetune reproduce
   ragchecker`` does (min-max to [-2, 2]), beside RAGChecker's published row, its released scores on
   the same instances and the human-human row. Intervals: 95% bootstrap over instances.

Answers are cached (``--cache``, default the judgetune cache), so an interrupted run resumes.

    python benchmarks/ragcheck.py [--instances N | --all] [--seed 0] [--lm local:smollm2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from judgetune import ragcheck, reproduce  # noqa: E402
from judgetune.datasets import RagItem, ensure_fetched  # noqa: E402
from judgetune.lm import ResponseCache, load_lm  # noqa: E402
from judgetune.stats import bootstrap_interval, correlation  # noqa: E402

DIMENSIONS = {"correctness": "precision", "completeness": "recall", "overall": "f1"}


def examples(checker, threshold: float) -> dict:
    root = ensure_fetched("ragchecker")
    shipped = ragcheck.read_ragchecker_outputs(root / ragcheck.RAGCHECKER_EXAMPLE_OUTPUTS)
    recomputed = sum(abs(ragcheck.item_metrics(checks)[name] - theirs[name]) < 1e-12
                     for _, checks, theirs in shipped for name in ragcheck.METRICS)
    items = ragcheck.read_items("ragchecker-examples")
    start = time.perf_counter()
    results = ragcheck.check_claims(items, checker, progress=True)
    seconds = time.perf_counter() - start
    rows = []
    for (item, their_checks, theirs), result in zip(shipped, results):
        rows.append({"id": item.id, "ragchecker_70b": theirs,
                     "ours": None if result.checks is None else ragcheck.item_metrics(result.checks, threshold=threshold),
                     "ours_probabilities": None if result.checks is None else ragcheck.item_metrics(result.checks,
                                                                                                  threshold=None),
                     "claims": None if result.checks is None else [len(result.checks.response_claims),
                                                                   len(result.checks.gold_claims)],
                     "ragchecker_claims": [len(their_checks.response_claims), len(their_checks.gold_claims)],
                     "error": result.error})
    return {"rows": rows, "recomputed_equal": recomputed, "recomputed_total": len(shipped) * len(ragcheck.METRICS),
            "seconds": seconds}


def meta_evaluation(checker, instances: list[int], threshold: float, resamples: int, seed: int) -> dict:
    labels = reproduce.ragchecker_labels()
    items = []
    for i in instances:
        e = labels[1][i]
        for model, response in (("model1", e.answer), ("model2", e.answer_b)):
            items.append(RagItem(f"{i}-{model}", e.question, e.references[0].text, response))
    start = time.perf_counter()
    results = ragcheck.check_claims(items, checker, progress=True)
    seconds = time.perf_counter() - start
    by_id = {r.item.id: r for r in results}
    failed = sorted({int(r.item.id.split("-")[0]) for r in results if r.checks is None})
    theirs = reproduce.ragchecker_deltas()
    rows = [_published_row("RAGChecker, published (Llama3-70B, 280 instances)", human=False),
            _row("RAGChecker's released scores, same instances", {d: {i: theirs[d][i] for i in instances}
                                                                    for d in DIMENSIONS}, labels, resamples, seed)]
    # An empty response has recall 0 and every human prefers the other one: those few instances alone
    # can make a correlation, so every row is also computed without them.
    answered = [i for i in instances if labels[1][i].answer.strip() and labels[1][i].answer_b.strip()]
    for name, t in ((f"ours, entailed at p >= {threshold:g}", threshold), ("ours, probabilities", None)):
        for subset, suffix in ((instances, ""), (answered, f", both responses non-empty ({len(answered)})")):
            deltas, undefined = {}, {}
            for dimension, metric in DIMENSIONS.items():
                deltas[dimension], undefined[dimension] = {}, 0
                for i in subset:
                    one, two = by_id[f"{i}-model1"], by_id[f"{i}-model2"]
                    if one.checks is None or two.checks is None:
                        continue
                    a = ragcheck.item_metrics(one.checks, threshold=t)[metric]
                    b = ragcheck.item_metrics(two.checks, threshold=t)[metric]
                    if a is None or b is None:
                        undefined[dimension] += 1
                    else:
                        deltas[dimension][i] = b - a
            rows.append({**_row(name + suffix, deltas, labels, resamples, seed), "undefined": undefined})
    rows.append(_published_row("annotator 1 vs annotator 2, published (280 instances)", human=True))
    rows.append({"name": "annotator 1 vs annotator 2, same instances",
                 **{f"{d}_{m}": _x100(reproduce.annotator_agreement(labels, d, instances, m))
                    for d in DIMENSIONS for m in ("pearson", "spearman")}})
    return {"rows": rows, "instances": len(instances), "failed_instances": failed, "seconds": seconds,
            "claims_per_response": _mean([len(r.checks.response_claims) for r in results if r.checks]),
            "claims_per_gold_answer": _mean([len(r.checks.gold_claims) for r in results if r.checks])}


def _row(name: str, deltas: dict[str, dict[int, float]], labels, resamples: int, seed: int) -> dict:
    row = {"name": name}
    for dimension in DIMENSIONS:
        values = list(deltas[dimension].values())
        row[f"{dimension}_instances"] = len(values)
        if len(values) < 2 or max(values) == min(values):  # no correlation: say so instead of a number
            row.update({f"{dimension}_{m}": None for m in ("pearson", "spearman")})
            if len(values) >= 2:
                row[f"{dimension}_constant"] = values[0]
            continue
        pred, gold, groups = reproduce.preference_pairs(deltas[dimension], labels, dimension)
        for method in ("pearson", "spearman"):
            interval = bootstrap_interval(lambda p, g, m=method: correlation(p, g, m), pred, gold, groups,
                                          n_resamples=resamples, seed=seed)
            row[f"{dimension}_{method}"] = _x100(correlation(pred, gold, method))
            row[f"{dimension}_{method}_interval"] = [_x100(interval.low), _x100(interval.high)]
    return row


def _published_row(name: str, *, human: bool) -> dict:
    row = {"name": name}
    for dimension, (_, metric_row, human_row) in reproduce.RAGCHECKER_TABLE.items():
        row[f"{dimension}_pearson"], row[f"{dimension}_spearman"] = human_row if human else metric_row
    return row


def _x100(value: float | None) -> float | None:
    return None if value is None else round(100 * value, 2)


def _mean(values: list[int]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_report(out: dict) -> None:
    ex = out["examples"]
    print(f"\n## RAGChecker's example inputs ({out['lm']}, {ex['seconds']:.0f} s; x100, entailed at p >= "
          f"{out['threshold']:g})")
    print(f"RAGChecker's own claim matrices through our metric functions: {ex['recomputed_equal']} of "
          f"{ex['recomputed_total']} per-item metrics equal to the shipped values")
    for row in ex["rows"]:
        if row["error"]:
            print(f"item {row['id']}: FAILED: {row['error']}")
            continue
        print(f"\nitem {row['id']}: claims (response, gold) ours {row['claims']}, RAGChecker {row['ragchecker_claims']}")
        print(f"  {'metric':<30} {'RAGChecker 70B':>14} {'ours':>6} {'ours, p':>8}")
        for name in ragcheck.METRICS:
            print(f"  {name:<30} {_fmt(100 * row['ragchecker_70b'][name]):>14} "
                  f"{_fmt(None if row['ours'][name] is None else 100 * row['ours'][name]):>6} "
                  f"{_fmt(None if row['ours_probabilities'][name] is None else 100 * row['ours_probabilities'][name]):>8}")
    me = out["meta_evaluation"]
    print(f"\n## Meta-evaluation: {me['instances']} instances x 2 annotators ({me['seconds'] / 60:.1f} min; "
          f"failed instances {me['failed_instances'] or 'none'}; claims per response {me['claims_per_response']}, "
          f"per gold answer {me['claims_per_gold_answer']})")
    header = " | ".join(f"{d} ({m}) P / S" for d, m in DIMENSIONS.items())
    print(f"| row | {header} |\n|---|---|---|---|")
    for row in me["rows"]:
        cells = []
        for d in DIMENSIONS:
            if f"{d}_constant" in row:
                cells.append(f"undefined: every difference is {row[f'{d}_constant']:g}")
                continue
            cell = f"{_fmt(row.get(f'{d}_pearson'))} / {_fmt(row.get(f'{d}_spearman'))}"
            interval = row.get(f"{d}_spearman_interval")
            if interval:
                cell += f" [{_fmt(interval[0])}, {_fmt(interval[1])}]"
            cells.append(cell)
        undefined = ", ".join(f"{d} {n}" for d, n in row.get("undefined", {}).items() if n)
        extra = f" (instances left out, a metric undefined: {undefined})" if undefined else ""
        print(f"| {row['name']}{extra} | {' | '.join(cells)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--instances", type=int, default=40, help="seeded sample of the 280 instances (default 40)")
    size.add_argument("--all", action="store_true", help="all 280 instances")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lm", default="local:smollm2")
    parser.add_argument("--api-base")
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--max-claims", type=int, default=12)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--cache", help="answer cache folder (default: the judgetune cache)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    lm = load_lm(args.lm, api_base=args.api_base, cache=ResponseCache(args.cache) if args.cache else None)
    checker = ragcheck.default_checker(lm, max_claims=args.max_claims)
    instances = sorted(reproduce.ragchecker_labels()[1])
    if not args.all:
        instances = sorted(random.Random(args.seed).sample(instances, min(args.instances, len(instances))))
    out = {"lm": args.lm, "threshold": args.threshold, "max_claims": args.max_claims, "seed": args.seed,
           "examples": examples(checker, args.threshold)}
    out["meta_evaluation"] = meta_evaluation(checker, instances, args.threshold, args.resamples, args.seed)
    out["meta_evaluation"]["instance_ids"] = instances
    lm.close()
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        print_report(out)


if __name__ == "__main__":
    main()
