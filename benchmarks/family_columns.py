"""Another judge family's default judge scored on a score matrix's items: the column ``tune --also KIND`` adds.

The family's default is built as ``tune`` builds an ``--also`` candidate (``tuning.family_candidates``: its settings
fitted to the data, its data defaults), with no LM, so only families that need none are taken (the embedding
judge, the hybrid, the lexical ones). A family that fits (the hybrid) is cross-fitted as the gate fits it on a
file's demo pool: the matrix's questions fall in ``FOLDS`` seeded folds and each fold is scored by the judge
fitted on ``--fit-rows`` seeded items of the other folds (200: about the demo pool of a 300-row file).
``benchmarks/replay.py MATRIX --families FILE`` then puts each column beside the run's own candidates in every draw.

    python benchmarks/family_columns.py benchmarks/results/matrix-qwen1.5b-likelihood-sts2012-msrpar.json \\
        [--family embedding --family hybrid] [--fit-rows 200] [--out FILE]

Writes ``benchmarks/results/families-<matrix>.json``: ``{"meta", "matrix", "families": {KIND: {"params",
"scores"}}}``, the scores in the matrix's item order (``null`` where the judge failed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)
import numpy as np
from _matrix import load_matrix, split_units

from judgetune import datasets
from judgetune.judges import judge_class
from judgetune.tuning import RunSpec, default_params, judge_for
from judgetune.tuning._splits import fit_space

FOLDS = 5  # a fitted family's folds of the matrix's questions


def family_column(kind: str, dataset: str, ids: list[str], groups: list[str], *,
                  fit_rows: int = 200) -> tuple[dict, list[float | None]]:
    """The default settings of ``kind`` on the matrix's items and its raw score on each (cross-fitted when the
    family fits)."""
    cls = judge_class(kind)
    if cls.needs_lm:
        raise SystemExit(f"{kind}: a family that needs an LM is scored by score_matrix.py, not here")
    examples = {e.id: e for e in datasets.load(dataset)}
    items = [examples[i] for i in ids]
    labels = [e.judgment for e in items]
    scale = (min(labels), max(labels))
    spec = RunSpec(name="family", judge=kind, data=dataset)
    fixed = fit_space(spec, items)
    params = {**default_params(spec, fixed, label_range=scale), **fixed}
    if not getattr(cls, "fits", False):
        judge = judge_for(params, kind, None, seed=0, demo_pool=[], label_range=scale)
        return params, [v.score if v.parsed else None for v in judge.judge_all(items)]
    keys = list(dict.fromkeys(groups))
    fold_of = dict(zip(keys, np.random.default_rng(0).permutation(len(keys)) % FOLDS))
    scores: list[float | None] = [None] * len(items)
    for fold in range(FOLDS):
        inside = [i for i, g in enumerate(groups) if fold_of[g] == fold]
        others = [i for i, g in enumerate(groups) if fold_of[g] != fold]
        other_groups = [groups[i] for i in others]
        taken, _ = split_units(other_groups, fit_rows, np.random.default_rng([0, fold]))
        pool = [items[others[i]] for i in taken]
        judge = judge_for(dict(params), kind, None, seed=0, demo_pool=pool, label_range=scale)
        for i, verdict in zip(inside, judge.judge_all([items[i] for i in inside])):
            scores[i] = verdict.score if verdict.parsed else None
    return params, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("matrix", type=Path)
    parser.add_argument("--family", action="append", default=None, help="a judge family (repeatable; default "
                        "embedding)")
    parser.add_argument("--fit-rows", type=int, default=200, help="items a fitted family fits on, of the other "
                        "folds (default 200)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    m = load_matrix(args.matrix)
    families = {}
    for kind in args.family or ["embedding"]:
        params, scores = family_column(kind, m["meta"]["dataset"], m["ids"], m["all_groups"],
                                       fit_rows=args.fit_rows)
        families[kind] = {"params": params, "scores": scores}
        print(f"{kind}: {sum(s is not None for s in scores)} of {len(scores)} items scored", file=sys.stderr)
    out = args.out or args.matrix.with_name(args.matrix.name.replace("matrix-", "families-", 1))
    _results.write_result(out, {"matrix": args.matrix.name, "families": families}, sys.argv)


if __name__ == "__main__":
    main()
