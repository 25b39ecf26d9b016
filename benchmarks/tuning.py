"""What tuning buys: on MSRpar (rubric) and TREC-DL-NF (LINKAGE), with the
embedded model, held-out test figures of
  - the untuned method-faithful prompt with k=0 (raw score mapped linearly onto the human scale),
  - the tuned and calibrated judge (`judgetune tune`),
  - DSPy's BootstrapFewShotWithRandomSearch on a plain dspy.Predict program, given about the same
    number of LM calls as the tuner's search (its parse failures are counted, not scored),
  - the constant predictor (training median).
LM calls are answers actually computed (each method starts from an empty cache).
For TREC-DL-NF "spearman" is per question, averaged (the LINKAGE protocol), over questions that keep
4 (--quick) or 8 answers each.

    python benchmarks/tuning.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import dspy  # noqa: E402

from judgetune.config import JudgeConfig  # noqa: E402
from judgetune.datasets import groups_of  # noqa: E402
from judgetune.evaluation import agreement  # noqa: E402
from judgetune.judges import LM_JUDGES, defaults  # noqa: E402
from judgetune.lm import ResponseCache, load_lm  # noqa: E402
from judgetune.lm._adapter import PrefillChatAdapter  # noqa: E402
from judgetune.stats import constant_baseline  # noqa: E402
from judgetune.tuning import (  # noqa: E402
    RunSpec,
    judge_for,
    prepare_splits,
    tune,  # noqa: E402
)

CASES = [("sts2012-msrpar", "rubric", "reference, answer -> score: float",
          "How similar in meaning are the two sentences? Score from 0 (unrelated) to 5 (same meaning)."),
         ("linkage-trec-dl-nf", "linkage", "question, answer -> relevance: float",
          "How well does the passage answer the question? 0 (not relevant) to 3 (perfectly relevant).")]


def row(dataset: str, method: str, metrics: dict, calls: int, seconds: float) -> dict:
    grouped = metrics.get("spearman_per_group") is not None
    key = "spearman_per_group" if grouped else "spearman"
    return {"dataset": dataset, "method": method, "n": metrics.get("n"), "parse_failures": metrics.get("parse_failures"),
            "mae": metrics.get("mae"), "mae_ci": metrics.get("mae_ci"), "bracket_accuracy": metrics.get("bracket_accuracy"),
            "spearman": metrics.get(key), "spearman_ci": metrics.get(f"{key}_ci"), "lm_calls": calls,
            "seconds": round(seconds, 1)}


def cache_size(path: Path) -> int:
    cache = ResponseCache(path)
    n = cache.answers()  # every stored answer was computed once
    cache.close()
    return n


def untuned(spec: RunSpec, splits, cache_dir: Path) -> tuple[dict, int, float]:
    lm = load_lm(spec.lm, cache=ResponseCache(cache_dir))
    params = {**defaults(LM_JUDGES[spec.judge].space()), **spec.fixed, "k": 0}
    judge = judge_for(params, spec.judge, lm, seed=spec.seed, demo_pool=splits.demo_pool, label_range=splits.label_range)
    start = time.perf_counter()
    verdicts = judge.judge_all(splits.test)
    seconds = time.perf_counter() - start
    config = JudgeConfig.from_judge(judge, lm=None, calibrator=None, label_range=splits.label_range)
    scores = config.calibrated(verdicts, judge, splits.test)  # no calibrator: linear map of the judge's range
    lm.close()
    return agreement(scores, splits.test, splits.label_range), cache_size(cache_dir), seconds


def bootstrap_random_search(signature: str, instruction: str, splits, budget: int, cache_dir: Path):
    lm = load_lm("local:smollm2", cache=ResponseCache(cache_dir))
    output = signature.split("->")[1].split(":")[0].strip()
    inputs = [f.strip() for f in signature.split("->")[0].split(",")]

    def as_dspy(e):
        values = {"reference": e.references[0].text if e.references else "", "question": e.question or "",
                  "answer": e.answer}
        return dspy.Example(**{k: values[k] for k in inputs}, **{output: float(e.judgment)}).with_inputs(*inputs)

    span = splits.label_range[1] - splits.label_range[0]

    def metric(example, prediction, trace=None):  # DSPy scores a failed parse 0: make that the worst value
        try:
            return max(0.0, span - abs(float(getattr(prediction, output)) - float(getattr(example, output))))
        except (TypeError, ValueError):
            return 0.0

    train = [as_dspy(e) for e in splits.search]
    valset = train
    candidates = max(1, budget // max(1, len(valset)) - 3)
    program = dspy.Predict(dspy.Signature(signature, instruction))
    start = time.perf_counter()
    with dspy.context(lm=lm.dspy_lm, adapter=PrefillChatAdapter()):
        optimizer = dspy.BootstrapFewShotWithRandomSearch(metric=metric, max_bootstrapped_demos=4, max_labeled_demos=4,
                                                          num_candidate_programs=candidates, num_threads=1,
                                                          max_errors=10**6)  # parse failures must not abort it
        compiled = optimizer.compile(program, trainset=train, valset=valset)
        scores = []
        for e in splits.test:
            try:
                value = float(re.findall(r"-?\d+(?:\.\d+)?", str(getattr(compiled(**as_dspy(e).inputs()), output)))[0])
                scores.append(min(max(value, splits.label_range[0]), splits.label_range[1]))
            except Exception:  # noqa: BLE001 - any failure to produce a number is a parse failure, counted
                scores.append(None)
    seconds = time.perf_counter() - start
    lm.close()
    return agreement(scores, splits.test, splits.label_range), cache_size(cache_dir), seconds, candidates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", choices=[c[0] for c in CASES], action="append")
    args = parser.parse_args()
    trials, search, dev, test = (6, 16, 40, 60) if args.quick else (12, 32, 100, 200)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for dataset, kind, signature, instruction in CASES:
            if args.only and dataset not in args.only:
                continue
            listwise = kind == "linkage"  # many questions, a few answers each: per-question Spearman needs them
            # LINKAGE with 8 references or 3 draws costs minutes per trial on 2 cores: one reference per grade
            fixed = {"reasoning": False, **({"samples": 1, "per_grade": 1} if listwise else {})}
            spec = RunSpec(also=[], name=f"bench-{kind}", judge=kind, data=dataset, n_trials=trials, search_items=search,
                           chunk=8, dev_items=dev, test_items=test, fixed=fixed,
                           per_question=(4 if args.quick else 8) if listwise else None)
            splits = prepare_splits(spec)
            print(f"{dataset}: search {len(splits.search)}, dev {len(splits.dev)}, test {len(splits.test)}",
                  file=sys.stderr)
            metrics, calls, seconds = untuned(spec, splits, tmp / f"{kind}-untuned")
            rows.append(row(dataset, "untuned faithful prompt, k=0", metrics, calls, seconds))
            os.environ["JUDGETUNE_CACHE_DIR"] = str(tmp / f"{kind}-tuned")
            start = time.perf_counter()
            config, _, _ = tune(spec, runs_dir=tmp / "runs")
            seconds = time.perf_counter() - start
            search_calls = config.metrics["study"]["lm_calls"]
            rows.append(row(dataset, f"tuned + {config.calibrator['kind']} calibration", config.metrics["test"],
                            cache_size(tmp / f"{kind}-tuned"), seconds))
            metrics, calls, seconds, candidates = bootstrap_random_search(signature, instruction, splits, search_calls,
                                                                          tmp / f"{kind}-bfsrs")
            rows.append(row(dataset, f"DSPy BootstrapFewShotWithRandomSearch ({candidates} candidates)", metrics, calls,
                            seconds))
            gold = [e.judgment for e in splits.test]
            const = constant_baseline([e.judgment for e in splits.train], len(gold)).tolist()
            rows.append(row(dataset, "constant (training median)", agreement(const, splits.test, splits.label_range),
                            0, 0.0))
            print(f"  tuner search: {search_calls} LM calls; groups in test: {len(set(groups_of(splits.test) or []))}",
                  file=sys.stderr)
            for r in rows[-4:]:  # partial results survive an interrupted run
                print("  " + json.dumps(r), file=sys.stderr)
    if args.json:
        print(json.dumps({"rows": rows}, indent=2))
        return
    print(f"{'dataset':<19} {'method':<52} {'n':>4} {'fail':>4} {'MAE':>18} {'bracket':>7} {'Spearman':>20} "
          f"{'LM calls':>8} {'seconds':>8}")
    for r in rows:
        mae = "-" if r["mae"] is None else f"{r['mae']:.3f} [{r['mae_ci'][0]:.2f},{r['mae_ci'][1]:.2f}]"
        rho = "-" if r["spearman"] is None else f"{r['spearman']:.3f} [{r['spearman_ci'][0]:.2f},{r['spearman_ci'][1]:.2f}]"
        bracket = "-" if r["bracket_accuracy"] is None else f"{r['bracket_accuracy']:.3f}"
        print(f"{r['dataset']:<19} {r['method']:<52} {r['n']:>4} {r['parse_failures']:>4} {mae:>18} {bracket:>7} "
              f"{rho:>20} {r['lm_calls']:>8} {r['seconds']:>8}")


if __name__ == "__main__":
    main()
