"""Hybrid judges against single signals, the constant predictor and the LINKAGE paper.

LINKAGE data (TREC-DL-NF, ANTIQUE) under the paper's protocol (``judgetune.evaluation``):
references drawn by grade and removed from the candidates, questions without enough answers of every
grade skipped, Spearman per question averaged; 3 seeds (each seed draws new references and new folds).
Hybrids are cross-fitted over questions (5 folds): a question is scored by a model fitted on the other
questions only. The main hybrid recipe is fixed in advance (all signals, z-score within the question,
ridge); the other normalizations and models, and the ablation (the main recipe minus one signal),
are reported beside it, not chosen on these figures.

Also: every question kept (``all``: each answer a candidate, no references; the hybrid's z-normalization
compares a question's candidates by their texts under the ``group`` protocol, reading no label of a
scored answer; before 2026-11-23 this part drew each answer's references from its question's *other*
answers, whose labels it read while they were candidates: rows produced with sibling labels),
transfer (fit on one dataset, score the other), MSRpar (official train/test, no groups) and the
RAGChecker pairs (5 folds over queries), and seconds per item.
``lm`` (not in the default parts: about 0.3 s per answer) adds the embedded LM's label
distribution (a 1-5 rubric on question and answer, its expected value) as one more hybrid feature,
on the first ``--lm-questions`` qualifying ANTIQUE questions, and compares the hybrid with and without it.
Figures of LM judges are quoted, not recomputed (see the README's measured tables).

    python benchmarks/hybrid.py [--quick] [--json] [--seeds N] [--only DATASET] [--parts PART ...]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from dataclasses import replace

import _results  # benchmarks/ is on sys.path when a benchmark runs
import numpy as np

from judgetune import datasets
from judgetune.datasets import Example
from judgetune.evaluation import cross_fit, draw_references, question_folds
from judgetune.judges import SIGNALS, BM25Judge, HybridJudge, HybridModel, build_judge
from judgetune.judges._encoders import load_encoder
from judgetune.stats import bootstrap_mean_interval, correlation

LINKAGE = ("linkage-trec-dl-nf", "linkage-antique")
PARTS = ("linkage", "all", "transfer", "msrpar", "ragchecker", "cost", "published", "lm")
SHORT = {"linkage-trec-dl-nf": "TREC-DL-NF", "linkage-antique": "ANTIQUE", "sts2012-msrpar": "MSRpar",
         "ragchecker": "RAGChecker"}
SINGLE = {  # single signals scored as they are (no fit)
    "minilm cosine(question)": ("embedding", {"model": "minilm", "target": "question"}),
    "mpnet cosine(question)": ("embedding", {"model": "mpnet", "target": "question"}),
    "BM25(question)": ("bm25", {"target": "question"}),
    "overlap(question)": ("overlap", {"target": "question"}),
    "length": ("length", {}),
    "refsim minilm (expected grade)": ("refsim", {"model": "minilm"}),
    "refsim mpnet (expected grade)": ("refsim", {"model": "mpnet"}),
    "refsim mpnet (best grade)": ("refsim", {"model": "mpnet", "readout": "best"}),
}
MAIN = {"normalization": "z", "model": "ridge", "alpha": 1.0}
VARIANTS = {"hybrid rank + ridge": {"normalization": "rank", "model": "ridge"},
            "hybrid z + pairwise": {"normalization": "z", "model": "pairwise"},
            "hybrid z + logistic": {"normalization": "z", "model": "logistic"},
            "hybrid global + ridge": {"normalization": "global", "model": "ridge"},
            "hybrid z + ridge + pairwise products (alpha 100)": {"interactions": True, "alpha": 100.0}}
PUBLISHED = [("linkage-trec-dl-nf", "published: LINKAGE few-shot Mistral-7B", 0.4725),
             ("linkage-antique", "published: LINKAGE few-shot Mistral-7B", 0.4200),
             ("linkage-trec-dl-nf", "published: ROUGE-L", 0.2721), ("linkage-antique", "published: ROUGE-L", 0.2463),
             ("linkage-trec-dl-nf", "published: BERTScore", 0.2824), ("linkage-antique", "published: BERTScore", 0.1938),
             ("ragchecker", "published: RAGChecker overall (vs each annotator)", 0.6090),
             ("ragchecker", "published: human vs human", 0.6889)]
QUOTED = [  # README, benchmarks/judges_table.py --quick: SmolLM2-135M, leave-one-out references, test split only
    ("linkage-trec-dl-nf", "quoted: LINKAGE judge, SmolLM2-135M (judges issue; 12 test questions x 6)", 0.04),
    ("linkage-antique", "quoted: LINKAGE judge, SmolLM2-135M (judges issue; 93 test questions x 3)", -0.10)]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def per_question(scores, examples: list[Example]) -> dict[str, float]:
    """Spearman per question (groups with constant labels or scores left out)."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(examples):
        if scores[i] is not None:
            by_group[e.group_key].append(i)
    out = {}
    for group, rows in by_group.items():
        rho = correlation([scores[i] for i in rows], [examples[i].label for i in rows]) if len(rows) > 1 else None
        if rho is not None:
            out[group] = rho
    return out


def summarize(dataset: str, method: str, per_seed: list[dict[str, float]], *, resamples: int, **extra) -> dict:
    """Mean over seeds of the per-question mean; the interval bootstraps questions (seed-averaged values)."""
    if not per_seed or not any(per_seed):
        return {"dataset": dataset, "method": method, "spearman": None, "low": None, "high": None, "questions": 0,
                **extra}
    by_question: dict[str, list[float]] = defaultdict(list)
    for seed_values in per_seed:
        for q, v in seed_values.items():
            by_question[q].append(v)
    values = [float(np.mean(v)) for v in by_question.values()]
    ci = bootstrap_mean_interval(values, n_resamples=resamples, seed=0)
    return {"dataset": dataset, "method": method, "spearman": float(np.mean([np.mean(list(s.values()))
                                                                            for s in per_seed if s])),
            "low": ci.low, "high": ci.high, "questions": len(values), **extra}


def hybrid_judge(settings: dict, *, signals=None):
    def make(train):
        off = {f"use_{n}": (signals is None or n in signals) for n in SIGNALS}
        return HybridJudge(**{**MAIN, **settings, **off}).fit(train)
    return make


def feature_matrix(examples: list[Example], *, keep_all: bool = False) -> tuple[np.ndarray, list[str],
                                                                              dict[str, list[int]]]:
    """Every signal's features once (the benchmark fits ablations and variants on column subsets); a
    signal failing on most examples is left out unless ``keep_all`` (its gaps are imputed in the fit).
    BM25's corpus statistics here are those of all ``examples``' answers (texts, no labels), where the
    judge itself (``cross_fit``) freezes those of its training folds."""
    judge = HybridJudge()
    judge.bm25_ = BM25Judge(None).fit(examples).fitted_
    x, names, columns, _ = judge.usable_features(examples, list(SIGNALS), keep_failing=keep_all)
    return x, names, columns


def model_cross_fit(x, names, examples, settings: dict, *, seed: int, folds: int = 5,
                    extra: tuple[np.ndarray, list[Example]] | None = None) -> list[float]:
    """The same cross-fit as ``protocol.cross_fit``, on a precomputed feature matrix. ``extra``
    (features, examples of other questions) joins every training fold and is never scored."""
    groups = [e.group_key for e in examples]
    y = [e.label if e.judgment is None else e.judgment for e in examples]
    out = np.zeros(len(examples))
    for held_out in question_folds(groups, folds, seed=seed):
        held = set(held_out)
        train = [i for i, g in enumerate(groups) if g not in held]
        test = [i for i, g in enumerate(groups) if g in held]
        x_train, y_train, g_train = x[train], [y[i] for i in train], [groups[i] for i in train]
        if extra is not None:
            x_train = np.vstack([x_train, extra[0]])
            y_train += [e.label for e in extra[1]]
            g_train += [e.group_key for e in extra[1]]
        model = HybridModel(names, seed=seed, **{**MAIN, **settings}).fit(x_train, y_train, g_train)
        out[test] = model.predict(x[test], [groups[i] for i in test])[0]
    return out.tolist()


def sibling_references(examples: list[Example], *, per_grade: int, seed: int) -> list[Example]:
    """Every labeled answer, its references drawn from its question's *other* answers (whose labels it reads while
    they are candidates themselves: no scoring protocol, only this benchmark's extra training data)."""
    from judgetune.judges._references import ReferencePool

    by_group: dict[str, list[Example]] = defaultdict(list)
    for ex in sorted((e for e in examples if e.label is not None), key=lambda e: e.id):
        by_group[ex.group_key].append(ex)
    out = []
    for group in sorted(by_group):
        pool = ReferencePool(by_group[group])
        out.extend(replace(ex, references=pool.sample(ex, per_grade=per_grade, seed=seed)) for ex in by_group[group])
    return out


def skipped_questions_features(examples: list[Example], draw, columns: list[str]) -> tuple[np.ndarray, list[Example]]:
    """Features of the questions the protocol skipped (each answer with references drawn from its question's
    other answers), restricted to ``columns``: extra training data that no evaluated question shares."""
    skipped = sibling_references([e for e in examples if e.group_key in draw.skipped], per_grade=draw.per_grade,
                                 seed=draw.seed)
    x, names, _ = feature_matrix(skipped, keep_all=True)
    return x[:, [names.index(c) for c in columns]], skipped


def linkage_rows(name: str, *, per_grade: int, seeds: int, resamples: int, ablation: bool) -> list[dict]:
    examples, _ = datasets.load_data(name)
    results: dict[str, list[dict[str, float]]] = defaultdict(list)
    qualified = skipped = 0
    for seed in range(seeds):
        draw = draw_references(examples, per_grade=per_grade, seed=seed)
        cands = draw.candidates
        qualified, skipped = len(draw.qualified), len(draw.skipped)
        log(f"{name} per_grade={per_grade} seed={seed}: {qualified} questions qualify, {skipped} skipped, "
            f"{len(cands)} candidates")
        for method, (kind, params) in SINGLE.items():
            verdicts = build_judge(kind, **params).judge_all(cands)
            results[method].append(per_question([v.score for v in verdicts], cands))
        rng = random.Random(seed)
        results["random"].append(per_question([rng.random() for _ in cands], cands))
        results["constant (training median): undefined within a question"].append({})
        start = time.perf_counter()
        verdicts = cross_fit(hybrid_judge({}), cands, seed=seed)
        log(f"  hybrid (end to end, 5 folds): {time.perf_counter() - start:.0f} s")
        results["hybrid z + ridge (all signals)"].append(per_question([v.score for v in verdicts], cands))
        x, names, columns = feature_matrix(cands)
        check = model_cross_fit(x, names, cands, {}, seed=seed)
        if not np.allclose(check, [v.score for v in verdicts]):
            log("  warning: the precomputed-feature cross-fit disagrees with the judge's (a signal dropped in a fold?)")
        for method, settings in VARIANTS.items():
            results[method].append(per_question(model_cross_fit(x, names, cands, settings, seed=seed), cands))
        if draw.skipped:
            extra = skipped_questions_features(examples, draw, names)
            scores = model_cross_fit(x, names, cands, {}, seed=seed, extra=extra)
            results["hybrid z + ridge, trained also on the skipped questions"].append(per_question(scores, cands))
        if ablation:
            for left_out in columns:
                keep = [c for n, cols in columns.items() if n != left_out for c in cols]
                scores = model_cross_fit(x[:, keep], [names[c] for c in keep], cands, {}, seed=seed)
                results[f"ablation: without {left_out}"].append(per_question(scores, cands))
    protocol = f"linkage per_grade={per_grade}"
    return [summarize(name, method, values, resamples=resamples, protocol=protocol, skipped=skipped)
            for method, values in results.items()]


def lm_signal_rows(name: str, *, questions: int, seeds: int, resamples: int, spec: str = "local:smollm2") -> list[dict]:
    """The hybrid with and without the LM's rubric score as a feature, on a fixed subset of questions.
    The rubric sees the question and the answer only, so an answer's prompt (and cache entry) is the
    same in every seed; a seed only changes which answers are candidates."""
    from judgetune.lm import load_lm

    examples, _ = datasets.load_data(name)
    judge = build_judge("rubric", load_lm(spec), instruction="helpful", scale="1-5")
    results: dict[str, list[dict[str, float]]] = defaultdict(list)
    for seed in range(seeds):
        draw = draw_references(examples, per_grade=1, seed=seed)
        chosen = set(sorted(draw.qualified)[:questions])
        cands = [e for e in draw.candidates if e.group_key in chosen]
        log(f"{name} LM signal, seed={seed}: {len(chosen)} questions, {len(cands)} candidates")
        start = time.perf_counter()
        verdicts = judge.judge_all([replace(e, references=()) for e in cands], progress=True)
        log(f"  LM rubric: {time.perf_counter() - start:.0f} s, {sum(not v.parsed for v in verdicts)} failed")
        lm_column = np.asarray([[v.score if v.parsed else np.nan] for v in verdicts])
        results["LM rubric 1-5 (SmolLM2-135M, question + answer)"].append(
            per_question([v.score if v.parsed else None for v in verdicts], cands))
        x, names, _ = feature_matrix(cands)
        results["hybrid z + ridge (all signals)"].append(per_question(model_cross_fit(x, names, cands, {}, seed=seed),
                                                                      cands))
        scores = model_cross_fit(np.hstack([x, lm_column]), [*names, "lm-rubric"], cands, {}, seed=seed)
        results["hybrid z + ridge + LM rubric"].append(per_question(scores, cands))
    protocol = f"linkage per_grade=1, first {questions} qualifying questions"
    return [summarize(name, method, values, resamples=resamples, protocol=protocol)
            for method, values in results.items()]


def keep_all_rows(name: str, *, resamples: int) -> list[dict]:
    """Every question and every labeled answer a candidate, carrying no references (protocol ``group``)."""
    examples, _ = datasets.load_data(name)
    cands = [replace(e, references=()) for e in examples if e.label is not None]
    log(f"{name} keep every question: {len({e.group_key for e in cands})} questions, {len(cands)} answers")
    rows = []
    protocol = "every question, no references (protocol group: no label of a scored answer read)"
    verdicts = build_judge("embedding", model="minilm", target="question").judge_all(cands)
    rows.append(summarize(name, "minilm cosine(question)", [per_question([v.score for v in verdicts], cands)],
                          resamples=resamples, protocol=protocol))
    minilm_only = [n for n in SIGNALS if "mpnet" not in n]  # mpnet embeddings were computed for qualifying questions
    verdicts = cross_fit(hybrid_judge({}, signals=minilm_only), cands, seed=0)
    rows.append(summarize(name, "hybrid z + ridge (MiniLM signals)", [per_question([v.score for v in verdicts], cands)],
                          resamples=resamples, protocol=protocol))
    return rows


def transfer_rows(*, seeds: int, resamples: int) -> list[dict]:
    rows = []
    for source, target in (LINKAGE, LINKAGE[::-1]):
        per_seed = []
        for seed in range(seeds):
            train = draw_references(datasets.load_data(source)[0], per_grade=1, seed=seed).candidates
            test = draw_references(datasets.load_data(target)[0], per_grade=1, seed=seed).candidates
            verdicts = hybrid_judge({})(train).judge_all(test)
            per_seed.append(per_question([v.score for v in verdicts], test))
        rows.append(summarize(target, f"transfer: hybrid fitted on {SHORT[source]}", per_seed, resamples=resamples,
                              protocol="linkage per_grade=1"))
    return rows


def global_row(dataset: str, method: str, scores, gold, *, resamples: int, **extra) -> dict:
    from judgetune.stats import bootstrap_interval

    kept = [(s, g) for s, g in zip(scores, gold) if s is not None]
    pred, human = np.asarray([k[0] for k in kept]), np.asarray([k[1] for k in kept])
    rho = correlation(pred, human)
    ci = bootstrap_interval(lambda a, b: correlation(a, b), pred, human, n_resamples=resamples, seed=0)
    return {"dataset": dataset, "method": method, "spearman": rho, "low": ci.low, "high": ci.high,
            "questions": len(kept), **extra}


def msrpar_rows(*, resamples: int) -> list[dict]:
    examples, label_range = datasets.load_data("sts2012-msrpar")
    splits = datasets.split_examples(examples, seed=0)
    train, test = splits["train"] + splits["dev"], splits["test"]
    gold = [e.label for e in test]
    rows = []
    for method, (kind, params) in {"minilm cosine(reference)": ("embedding", {"model": "minilm", "target": "reference"}),
                                   "mpnet cosine(reference)": ("embedding", {"model": "mpnet", "target": "reference"}),
                                   "BM25(reference)": ("bm25", {"target": "reference"}),
                                   "overlap(reference)": ("overlap", {"target": "reference"})}.items():
        verdicts = build_judge(kind, **params).judge_all(test)
        rows.append(global_row("sts2012-msrpar", method, [v.score for v in verdicts], gold, resamples=resamples,
                               protocol="official test, global Spearman"))
    for method, settings in (("hybrid global + ridge", {"normalization": "global"}),
                             ("hybrid global + pairwise", {"normalization": "global", "model": "pairwise"})):
        judge = hybrid_judge(settings)(train)
        verdicts = judge.judge_all(test)
        row = global_row("sts2012-msrpar", method, [v.score for v in verdicts], gold, resamples=resamples,
                         protocol="official test, global Spearman", signals=judge.signals)
        if settings.get("model", "ridge") == "ridge":
            row["mae"] = float(np.mean([abs(np.clip(v.score, *label_range) - g) for v, g in zip(verdicts, gold)]))
        rows.append(row)
    median = float(np.median([e.label for e in train]))
    rows.append({**global_row("sts2012-msrpar", "constant (training median)", [median] * len(gold), gold,
                              resamples=resamples, protocol="official test"),
                 "mae": float(np.mean([abs(median - g) for g in gold]))})
    return rows


def ragchecker_rows(*, resamples: int) -> list[dict]:
    examples, _ = datasets.load_data("ragchecker")
    gold = [e.preference for e in examples]
    rows = []
    for method, (kind, params) in {"minilm cosine(reference), b - a": ("embedding", {"target": "reference"}),
                                   "mpnet cosine(reference), b - a": ("embedding", {"model": "mpnet",
                                                                                    "target": "reference"}),
                                   "length, b - a": ("length", {})}.items():
        verdicts = build_judge(kind, **params).judge_all(examples)
        rows.append(global_row("ragchecker", method, [v.score for v in verdicts], gold, resamples=resamples,
                               protocol="all 560 labels, global Spearman"))
    for method, settings in (("hybrid global + ridge (5 folds over queries)", {"normalization": "global"}),):
        verdicts = cross_fit(hybrid_judge(settings), examples, seed=0)
        rows.append(global_row("ragchecker", method, [v.score for v in verdicts], gold, resamples=resamples,
                               protocol="all 560 labels, global Spearman"))
    return rows


def cost_rows(n: int = 100) -> list[dict]:
    """Seconds per item of each signal on n TREC-DL-NF candidates, embeddings computed cold (no cache)."""
    examples, _ = datasets.load_data("linkage-trec-dl-nf")
    cands = draw_references(examples, per_grade=1, seed=0).candidates[:n]
    rows = []
    total = 0.0
    for model in ("minilm", "mpnet"):
        encoder = load_encoder(model)
        texts = sorted({t for e in cands for t in [e.answer, e.question, *(r.text for r in e.references)]})
        start = time.perf_counter()
        encoder.encode(texts, batch_size=32, normalize_embeddings=True)
        seconds = (time.perf_counter() - start) / len(cands)
        total += seconds
        rows.append(cost_row(f"cost: {model} embeddings (answer, question, references; cold)", seconds))
    for kind in ("bm25", "overlap", "length"):
        start = time.perf_counter()
        build_judge(kind).judge_all(cands)
        seconds = (time.perf_counter() - start) / len(cands)
        total += seconds
        rows.append(cost_row(f"cost: {kind}", seconds))
    rows.append(cost_row("cost: hybrid (sum of its signals, 2 shared cores)", total))
    return rows


def cost_row(method: str, seconds: float) -> dict:
    return {"dataset": "linkage-trec-dl-nf", "method": method, "spearman": None, "low": None, "high": None,
            "questions": None, "seconds_per_item": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, one composition, no ablation or transfer")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seeds", type=int, help="seeds per composition (default 3, 1 with --quick)")
    parser.add_argument("--only", choices=LINKAGE, action="append", help="LINKAGE datasets for the linkage and all parts")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=[p for p in PARTS if p != "lm"],
                        help="which parts to run (default all but lm; transfer needs no --only)")
    parser.add_argument("--lm-questions", type=int, default=60, help="ANTIQUE questions for the lm part")
    parser.add_argument("--out", help="also write the rows, with the run's meta, to this JSON file")
    args = parser.parse_args()
    seeds = args.seeds or (1 if args.quick else 3)
    resamples = 200 if args.quick else 1000
    linkage = [n for n in LINKAGE if n in (args.only or LINKAGE)]
    parts = set(args.parts)
    rows: list[dict] = []
    for name in linkage:
        if "linkage" in parts:
            for per_grade in ((1,) if args.quick else (1, 2)):
                rows.extend(linkage_rows(name, per_grade=per_grade, seeds=seeds, resamples=resamples,
                                         ablation=not args.quick and per_grade == 1))
        if "all" in parts and not args.quick:
            rows.extend(keep_all_rows(name, resamples=resamples))
    if "lm" in parts:
        rows.extend(lm_signal_rows("linkage-antique", questions=args.lm_questions, seeds=seeds, resamples=resamples))
    if "transfer" in parts and not args.quick:
        rows.extend(transfer_rows(seeds=seeds, resamples=resamples))
    if "msrpar" in parts:
        rows.extend(msrpar_rows(resamples=resamples))
    if "ragchecker" in parts:
        rows.extend(ragchecker_rows(resamples=resamples))
    if "cost" in parts:
        rows.extend(cost_rows(30 if args.quick else 100))
    if "published" in parts:
        datasets_in = {*linkage, "sts2012-msrpar", "ragchecker"}
        rows.extend({"dataset": d, "method": m, "spearman": v, "low": None, "high": None, "questions": None,
                     "published": True} for d, m, v in [*PUBLISHED, *QUOTED] if d in datasets_in)
    if args.out:
        from pathlib import Path

        meta = _results.meta(sys.argv)
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps({"rows": rows}, indent=2))
        return
    print(f"{'data':<11} {'method':<62} {'Spearman':>8} {'95% interval':>16} {'n':>5}  protocol / cost")
    for r in rows:
        if "seconds_per_item" in r and r.get("spearman") is None:
            print(f"{SHORT[r['dataset']]:<11} {r['method']:<62} {'':>8} {'':>16} {'':>5}  "
                  f"{1000 * r['seconds_per_item']:.1f} ms/item")
            continue
        rho = "-" if r["spearman"] is None else f"{r['spearman']:.3f}"
        ci = f"[{r['low']:.3f}, {r['high']:.3f}]" if r.get("low") is not None else ""
        n = "" if r.get("questions") is None else str(r["questions"])
        note = r.get("protocol", "") + (f"; MAE {r['mae']:.3f}" if "mae" in r else "")
        print(f"{SHORT[r['dataset']]:<11} {r['method']:<62} {rho:>8} {ci:>16} {n:>5}  {note}")


if __name__ == "__main__":
    main()
