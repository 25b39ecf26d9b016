"""The likelihood judge on the embedded SmolLM2-135M, beside the label-distribution rubric
judge, the embedding (MiniLM) and ROUGE-L baselines and the constant and random predictors.

Parts:
- ``msrpar``: MSRpar's official test split (a seeded subset with ``--test-items``). ``likelihood
  tuned`` is judgetune's tuner (``judgetune.tuning.tune``, judge ``likelihood``) searching on training
  items, calibrated on dev, scored once on test; every other judge is calibrated on the same dev
  items (the calibrator judgetune picks by cross-validated MAE) and scored once on the same test items.
  ``likelihood untuned`` is the default judge: one plain instruction, k=0, answer given reference.
- ``recipes``: recipe changes toward MSRpar's goal, on dev items only (``RECIPES``).
- ``linkage``: TREC-DL-NF and ANTIQUE under the LINKAGE protocol (references drawn by grade and
  removed from the candidates, Spearman per question averaged, ``judgetune.evaluation``) on a seeded
  subset of ``--questions`` qualifying questions per dataset: the likelihood judge alone (settings
  fixed in advance: the ``answer`` instruction pair, k=0, chat template, source = the question; each
  direction and their mean), MiniLM cosine(question) and random beside it, and the hybrid (z + ridge,
  all signals, 5 folds over questions) without and with the likelihood score as one more feature,
  on the same candidates. Constant is undefined within a question.
- ``cost``: milliseconds per item of the likelihood judge with the prompt prefix kept in the KV cache
  and items decoded side by side, without (every item from an empty cache), and of the rubric
  label-distribution judge; no response cache.

Rows: ``{dataset, method, spearman, low, high, mae, bracket_accuracy, lm_calls, seconds}`` (95%
bootstrap interval of Spearman in ``low``/``high``).

    python benchmarks/likelihood.py [--quick] [--json] [--parts msrpar recipes linkage cost] [--trials N]
                                    [--questions N] [--per-question N]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from typing import Any

import numpy as np

from judgetune.calibration import fit_calibrator
from judgetune.datasets import Example
from judgetune.judges import ConstantJudge, RandomJudge, build_judge, make_judge
from judgetune.lm import load_lm
from judgetune.stats import evaluate_predictions
from judgetune.tuning import RunSpec, prepare_splits, tune

PARTS = ("msrpar", "recipes", "linkage", "cost")
# recipes tried toward MSRpar's 0.60 goal, scored on dev only (never test); demos come from training items
RECIPES = {"untuned (respond, k=0, answer given reference, chat)": {},
           "paraphrase, both directions, chat, k=0": {"instruction": "paraphrase", "direction": "both"},
           "paraphrase, both directions, chat, k=4": {"instruction": "paraphrase", "direction": "both", "k": 4},
           "paraphrase, both directions, plain text, k=4": {"instruction": "paraphrase", "direction": "both", "k": 4,
                                                            "chat": False}}
LINKAGE = ("linkage-trec-dl-nf", "linkage-antique")
# the likelihood settings for LINKAGE, fixed before measuring: both directions, so each one is read from detail
LINKAGE_SETTINGS = {"instruction": "answer", "k": 0, "direction": "both", "source": "question", "chat": True}


def calls(lm) -> int:
    return 0 if lm is None else lm.label_calls + lm.engine.calls


def calibrated_row(dataset: str, method: str, judge, dev: list[Example], test: list[Example],
                   label_range: tuple[float, float], lm, *, seed: int) -> dict[str, Any]:
    """Fit judgetune's calibrator on the judge's dev scores, then score test once."""
    calls0, start = calls(lm), time.perf_counter()
    dev_v, test_v = judge.judge_all(dev), judge.judge_all(test)
    seconds = time.perf_counter() - start
    pairs = [(v.score, e.label) for v, e in zip(dev_v, dev) if v.parsed]
    calibrator, _ = fit_calibrator([p for p, _ in pairs], [g for _, g in pairs], label_range=label_range, seed=seed)
    kept = [(v.score, e.label) for v, e in zip(test_v, test) if v.parsed]
    pred = calibrator.predict([p for p, _ in kept])
    return row(dataset, method, evaluate_predictions(pred, [g for _, g in kept], label_range=label_range, seed=seed),
               calls(lm) - calls0, seconds, failures=len(test) - len(kept))


def row(dataset: str, method: str, metrics: dict, lm_calls: int, seconds: float, **extra: Any) -> dict[str, Any]:
    low, high = metrics.get("spearman_ci", [None, None])
    return {"dataset": dataset, "method": method, "spearman": metrics.get("spearman"), "low": low, "high": high,
            "mae": metrics.get("mae"), "bracket_accuracy": metrics.get("bracket_accuracy"), "lm_calls": lm_calls,
            "seconds": round(seconds, 1), **extra}


def msrpar(args: argparse.Namespace) -> list[dict[str, Any]]:
    dataset = "sts2012-msrpar"
    spec = RunSpec(also=[], name=f"likelihood-msrpar-{args.seed}-{args.trials}-{args.search_items}", judge="likelihood",
                   data=dataset, seed=args.seed, n_trials=args.trials, search_items=args.search_items,
                   dev_items=args.dev_items, test_items=args.test_items)
    splits = prepare_splits(spec)
    dev, test, label_range = splits.dev, splits.test, splits.label_range
    rows = []
    with tempfile.TemporaryDirectory() as runs:
        start = time.perf_counter()
        config, _, study = tune(spec, runs_dir=runs)
        test_metrics = config.metrics["test"]
        lm_calls = sum(int(t.user_attrs.get("lm_calls", 0)) for t in study.trials)
        rows.append(row(dataset, "likelihood tuned", test_metrics, lm_calls, time.perf_counter() - start,
                        chosen={"params": config.params, "instruction": config.instruction,
                                "calibrator": config.calibrator["kind"]},
                        note="lm_calls: the search's trials (dev and test scoring not counted)"))
    lm = load_lm("local:smollm2")
    try:
        untuned = make_judge("likelihood", lm, train=splits.demo_pool, label_range=label_range)
        rows.append(calibrated_row(dataset, "likelihood untuned", untuned, dev, test, label_range, lm, seed=args.seed))
        rubric = build_judge("rubric", lm, scale="0-5")
        rows.append(calibrated_row(dataset, "rubric label distribution (untuned)", rubric, dev, test, label_range, lm,
                                   seed=args.seed))
    finally:
        lm.close()
    for name, judge in (("embedding (MiniLM)", build_judge("embedding")), ("ROUGE-L", build_judge("rougeL"))):
        rows.append(calibrated_row(dataset, name, judge, dev, test, label_range, None, seed=args.seed))
    train_labels = [e.label for e in splits.train]
    gold = [e.label for e in test]
    for name, judge in (("constant (training median)", ConstantJudge.from_labels(train_labels, label_range)),
                        ("random (training labels)", RandomJudge(labels=train_labels, score_range=label_range,
                                                                 seed=args.seed))):
        pred = [v.score for v in judge.judge_all(test)]
        rows.append(row(dataset, name, evaluate_predictions(pred, gold, label_range=label_range, seed=args.seed),
                        0, 0.0))
    return rows


def recipes(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Fixed recipes on MSRpar dev (global Spearman with interval); plus the mean of the recipes' z-scored
    scores over instructions (``respond``, ``paraphrase``, ``faithful``; both directions, chat, k=0)."""
    from judgetune.stats import bootstrap_interval, correlation

    spec = RunSpec(also=[], name="recipes", judge="likelihood", data="sts2012-msrpar", seed=args.seed,
                   dev_items=args.dev_items)
    splits = prepare_splits(spec)
    dev, gold = splits.dev, [e.label for e in splits.dev]
    lm = load_lm("local:smollm2")
    rows = []

    def rho_row(method: str, scores: list[float], seconds: float) -> dict[str, Any]:
        ci = bootstrap_interval(lambda a, b: correlation(a, b), np.asarray(scores), np.asarray(gold),
                                n_resamples=args.resamples, seed=0)
        return {"dataset": "sts2012-msrpar", "method": f"dev: {method}", "spearman": correlation(scores, gold),
                "low": ci.low, "high": ci.high, "items": len(dev), "seconds": round(seconds, 1)}

    try:
        for method, params in RECIPES.items():
            start = time.perf_counter()
            judge = make_judge("likelihood", lm, train=splits.demo_pool, label_range=splits.label_range,
                               params=params, seed=args.seed)
            rows.append(rho_row(method, [v.score for v in judge.judge_all(dev)], time.perf_counter() - start))
        start, columns = time.perf_counter(), []
        for instruction in ("respond", "paraphrase", "faithful"):
            judge = make_judge("likelihood", lm, train=splits.demo_pool, label_range=splits.label_range,
                               params={"instruction": instruction, "direction": "both"}, seed=args.seed)
            values = np.asarray([v.score for v in judge.judge_all(dev)])
            columns.append((values - values.mean()) / values.std())
        rows.append(rho_row("mean of 3 instructions (z-scored), both directions, chat, k=0",
                            list(np.mean(columns, axis=0)), time.perf_counter() - start))
    finally:
        lm.close()
    return rows


def linkage(args: argparse.Namespace) -> list[dict[str, Any]]:
    from hybrid import feature_matrix, model_cross_fit, per_question, summarize  # benchmarks/hybrid.py

    from judgetune import datasets
    from judgetune.evaluation import draw_references

    rows: list[dict[str, Any]] = []
    lm = load_lm("local:smollm2")
    try:
        judge = build_judge("likelihood", lm, **LINKAGE_SETTINGS)
        for name in LINKAGE:
            examples, _ = datasets.load_data(name)
            draw = draw_references(examples, per_grade=1, seed=args.seed)
            qualified = sorted(draw.qualified)
            random.Random(args.seed).shuffle(qualified)
            chosen = set(qualified[:args.questions])
            cands = [e for e in draw.candidates if e.group_key in chosen]
            if args.per_question:
                cands = datasets.sample_per_group(cands, args.per_question, seed=args.seed)
            start = time.perf_counter()
            verdicts = judge.judge_all(cands)
            seconds = time.perf_counter() - start
            failed = sum(not v.parsed for v in verdicts)
            columns = {"likelihood p(answer | question), mean log-prob": [
                           v.detail["a_answer"]["mean"] if v.parsed else None for v in verdicts],
                       "likelihood p(question | answer), mean log-prob": [
                           v.detail["a_source"]["mean"] if v.parsed else None for v in verdicts],
                       "likelihood both directions (the judge's score)": [
                           v.score if v.parsed else None for v in verdicts]}
            rng = random.Random(args.seed)
            results = {method: per_question(scores, cands) for method, scores in columns.items()}
            results["minilm cosine(question)"] = per_question(
                [v.score for v in build_judge("embedding", model="minilm", target="question").judge_all(cands)], cands)
            results["random"] = per_question([rng.random() for _ in cands], cands)
            x, names, _ = feature_matrix(cands)
            results["hybrid z + ridge (all signals)"] = per_question(
                model_cross_fit(x, names, cands, {}, seed=args.seed), cands)
            feature = np.asarray([[np.nan if s is None else s] for s in columns[
                "likelihood both directions (the judge's score)"]])
            results["hybrid z + ridge + likelihood"] = per_question(
                model_cross_fit(np.hstack([x, feature]), [*names, "likelihood"], cands, {}, seed=args.seed), cands)
            protocol = (f"linkage per_grade=1, {len(chosen)} of {len(qualified)} qualifying questions, "
                        f"{len(cands)} candidates (at most {args.per_question or 'all'} per question; seed {args.seed})")
            for method, values in results.items():
                extra = {"seconds": round(seconds, 1), "failures": failed} if method.startswith("likelihood") else {}
                rows.append(summarize(name, method, [values], resamples=args.resamples, protocol=protocol, **extra))
    finally:
        lm.close()
    return rows


def cost(args: argparse.Namespace) -> list[dict[str, Any]]:
    spec = RunSpec(also=[], name="cost", judge="likelihood", data="sts2012-msrpar", seed=args.seed)
    splits = prepare_splits(spec)
    items = splits.test[:args.cost_items]
    lm = load_lm("local:smollm2", use_cache=False)
    rows = []
    try:
        settings = {"k": 2, "instruction": "paraphrase"}
        def judge(kind: str, params: dict[str, Any]):
            return make_judge(kind, lm, train=splits.train, label_range=splits.label_range, params=params)

        judges = [("likelihood k=2, prefix cached + batched", judge("likelihood", settings), True),
                  ("likelihood k=2, every item from scratch", judge("likelihood", settings), False),
                  ("rubric label distribution k=2", judge("rubric", {"k": 2, "scale": "0-5"}), True)]
        judges[0][1].judge_all(items[:2])  # load the scoring context once, outside the timing
        for name, judge, reuse in judges:
            lm.model.reuse_prefix = reuse
            tokens0, start = lm.model.evaluated_tokens, time.perf_counter()
            verdicts = judge.judge_all(items)
            seconds = time.perf_counter() - start
            scores = [v.score for v in verdicts]
            rows.append({"dataset": "sts2012-msrpar", "method": f"cost: {name}", "ms_per_item":
                         round(1000 * seconds / len(items), 1), "tokens_evaluated_per_item":
                         round((lm.model.evaluated_tokens - tokens0) / len(items), 1), "items": len(items),
                         "seconds": round(seconds, 1), "lm_calls": len(items),
                         "spearman": float(np.corrcoef(np.argsort(np.argsort(scores)),
                                                       np.argsort(np.argsort([e.label for e in items])))[0, 1])})
    finally:
        lm.model.reuse_prefix = True
        lm.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (minutes on 2 cores)")
    parser.add_argument("--json", action="store_true", help="one JSON row per line")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--questions", type=int, default=None,
                        help="LINKAGE questions per dataset (seeded subset; default 12, 8 with --quick)")
    parser.add_argument("--per-question", type=int, default=None,
                        help="LINKAGE candidates per question (seeded sample; default all)")
    args = parser.parse_args()
    args.trials = args.trials or (8 if args.quick else 20)
    args.search_items = 40 if args.quick else 80
    args.dev_items = 60 if args.quick else 150
    args.test_items = 100 if args.quick else None
    args.cost_items = 20 if args.quick else 60
    args.questions = args.questions or (8 if args.quick else 12)
    args.resamples = 200 if args.quick else 1000
    rows = []
    for part in args.parts:
        rows.extend({"msrpar": msrpar, "recipes": recipes, "linkage": linkage, "cost": cost}[part](args))
    for r in rows:
        if args.json:
            print(json.dumps(r))
        else:
            text = "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items())
            print(text)


if __name__ == "__main__":
    main()
