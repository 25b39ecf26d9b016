"""Every judge kind on held-out data with the embedded model, beside the embedding, lexical
and constant baselines (the judges issue's benchmark).

Rubric and correctness on MSRpar test; LINKAGE (and pairwise against graded references) on
TREC-DL-NF and ANTIQUE test questions under LINKAGE's protocol (per question one answer of every
grade drawn as the reference list and removed from the candidates; a question short of a grade is
skipped; Spearman per question, averaged, as the LINKAGE paper does; sizes there are candidates per
question); pairwise on LLMBar natural and the RAGChecker pairs; fact check on SummaC. Every row
records its protocol. (Before 2026-11-23 the listwise rows drew each candidate's references from the
labels of the other test answers, themselves candidates: rows produced with sibling labels.)
Every method gets a new, empty answer cache, so its seconds per item are real.

    python benchmarks/judges_table.py [--quick] [--json] [--only DATASET] [--lm SPEC] [--out FILE]

``--lm`` names the model of the LM judges (default the embedded local:smollm2; the grading model is
``local:qwen1.5b``); every row records it. With ``--out`` the file is rewritten as each row finishes
(``"complete": false`` until the end), so a long run on a slow model keeps what it has measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)

from judgetune import datasets  # noqa: E402
from judgetune.datasets import limit_by_group, sample_per_group  # noqa: E402
from judgetune.evaluation import draw_references, judge_row, timed_verdicts  # noqa: E402
from judgetune.judges import LM_JUDGES, ConstantJudge, make_judge  # noqa: E402
from judgetune.lm import ResponseCache, load_lm  # noqa: E402

BASELINES = ("embedding", "rougeL", "bleu")
# (dataset, label, judge kind, settings); quick sizes, then full sizes
PLAN = {
    "sts2012-msrpar": ((40, 200), [("rubric", "rubric", {}), ("rubric-reasoning", "rubric", {"reasoning": True}),
                                   ("rubric-4shot", "rubric", {"k": 4}), ("correctness", "correctness", {})]),
    "linkage-trec-dl-nf": ((6, 20), [("linkage", "linkage", {}),
                                       ("pairwise-vs-references", "pairwise", {"mode": "references"})]),
    "linkage-antique": ((3, 6), [("linkage", "linkage", {})]),
    "llmbar-natural": ((20, 100), [("pairwise", "pairwise", {}), ("pairwise-no-swap", "pairwise", {"swap": False})]),
    "ragchecker": ((20, 80), [("pairwise", "pairwise", {})]),
    "summac-factcc": ((20, 60), [("factcheck-iterative", "factcheck", {"max_facts": 4}),
                                 ("factcheck-binary", "factcheck", {"mode": "binary"})]),
    "summac-summeval": ((20, 100), [("factcheck-iterative", "factcheck", {"max_facts": 4}),
                                    ("factcheck-binary", "factcheck", {"mode": "binary"}),
                                    ("factcheck-binary-reasoning", "factcheck", {"mode": "binary", "reasoning": True}),
                                    ("factcheck-scale5", "factcheck", {"mode": "scale5"})]),
}
PUBLISHED = [  # LINKAGE paper, Spearman per question (its own question sets)
    ("linkage-antique", "published: ROUGE-L", 0.2463), ("linkage-trec-dl-nf", "published: ROUGE-L", 0.2721),
    ("linkage-antique", "published: BERTScore", 0.1938), ("linkage-trec-dl-nf", "published: BERTScore", 0.2824),
    ("linkage-antique", "published: LINKAGE few-shot Mistral-7B", 0.4200),
    ("linkage-trec-dl-nf", "published: LINKAGE few-shot Mistral-7B", 0.4725),
]


def rows_for(name: str, size: int, cache_root: str, seed: int, resamples: int,
             methods: list[str] | None = None, lm_spec: str = "local:smollm2", done=lambda row: None) -> list[dict]:
    source = datasets.get_source(name)
    label_range = (float(source.scale.low), float(source.scale.high))
    splits = datasets.split_examples(datasets.load(name), seed=seed)
    protocol = None
    if source.task == "listwise":  # LINKAGE's protocol: every qualifying test question, `size` candidates each
        draw = draw_references(splits["test"], per_grade=1, seed=seed)
        test = sample_per_group(draw.candidates, size, seed=seed)
        protocol = {**draw.summary(), "candidates": len(test)}
    else:
        test = limit_by_group(splits["test"], size, seed=seed)
    common = {"label_range": label_range, "n_resamples": resamples, "seed": seed}
    rows = []
    judges = [(label, kind, params) for label, kind, params in PLAN[name][1]] + [(b, b, {}) for b in BASELINES]
    judges = [j for j in judges if methods is None or j[0] in methods]
    for label, kind, params in judges:
        lm = load_lm(lm_spec, cache=ResponseCache(os.path.join(cache_root, name, label))) \
            if kind in LM_JUDGES else None
        judge = make_judge(kind, lm, train=splits["train"], label_range=label_range, params=params, seed=seed)
        verdicts, seconds = timed_verdicts(judge, test, progress=sys.stderr.isatty())
        if lm is not None:
            lm.close()
        rows.append({"dataset": name, "method": label, "protocol": protocol, "lm": lm_spec if lm else None,
                     **judge_row(label, verdicts, test, seconds=seconds, pred_range=judge.range_for(test), **common)})
        done(rows[-1])
        print(f"  {name} {label}: done in {seconds:.0f} s", file=sys.stderr)
    constant = ConstantJudge.from_labels([e.judgment for e in splits["train"]], label_range)
    verdicts, seconds = timed_verdicts(constant, test)
    rows.append({"dataset": name, "method": "constant", "protocol": protocol, "lm": None,
                 **judge_row("constant", verdicts, test, seconds=seconds, pred_range=label_range, **common)})
    done(rows[-1])
    return rows


def fmt(value, ci=None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" + (f" [{ci[0]:.2f},{ci[1]:.2f}]" if ci and ci[0] is not None else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small samples (a few minutes per dataset)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", choices=sorted(PLAN), action="append")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--methods", nargs="+", help="only these methods (labels of PLAN, or baselines)")
    parser.add_argument("--out", type=Path, help="write the JSON result (with its meta) to this file, row by row")
    parser.add_argument("--lm", default="local:smollm2", help="the LM judges' model (default local:smollm2)")
    args = parser.parse_args()
    resamples = 200 if args.quick else 1000
    rows = []
    meta = {**_results.meta(sys.argv), "lm": args.lm}

    def write(complete: bool) -> str:
        text = json.dumps({"meta": {**meta, "complete": complete}, "rows": rows}, indent=2)
        if args.out:
            args.out.write_text(text + "\n", encoding="utf-8")
        return text

    with tempfile.TemporaryDirectory() as cache_root:
        for name in args.only or PLAN:
            size = PLAN[name][0][0 if args.quick else 1]
            unit = "answers per test question" if datasets.get_source(name).task == "listwise" else "held-out items"
            print(f"{name}: {size} {unit}", file=sys.stderr)
            rows_for(name, size, cache_root, args.seed, resamples, args.methods, args.lm,
                     done=lambda row: (rows.append(row), write(False)))
    rows.extend({"dataset": d, "method": m, "spearman_per_group": v, "published": True} for d, m, v in PUBLISHED
                if d in (args.only or PLAN))
    if args.json or args.out:
        text = write(True)
        if args.json:
            print(text)
            return
    print(f"{'dataset':<19} {'method':<38} {'n':>4} {'fail%':>5} {'MAE':>17} {'bracket':>17} {'Spearman':>18} "
          f"{'Spearman/question':>18} {'pair acc':>8} {'s/item':>7}")
    for r in rows:
        fail = "" if r.get("published") else f"{100 * r['parse_failure_rate']:.0f}"
        sec = "" if r.get("published") else f"{r['seconds_per_item']:.2f}"
        print(f"{r['dataset']:<19} {r['method']:<38} {r.get('n', ''):>4} {fail:>5} "
              f"{fmt(r.get('mae'), r.get('mae_ci')):>17} {fmt(r.get('bracket_accuracy'), r.get('bracket_accuracy_ci')):>17} "
              f"{fmt(r.get('spearman'), r.get('spearman_ci')):>18} "
              f"{fmt(r.get('spearman_per_group'), r.get('spearman_per_group_ci')):>18} {fmt(r.get('pair_accuracy')):>8} "
              f"{sec:>7}")


if __name__ == "__main__":
    main()
