"""Another judge family's default judge scored on a score matrix's items: the column ``tune --also KIND`` adds.

The family's default is built as ``tune`` builds an ``--also`` candidate (``tuning.family_candidates``: its settings
fitted to the data, its data defaults), with no demo pool and no LM, so only families that need neither (the
embedding judge, the lexical ones) are taken. ``benchmarks/replay.py MATRIX --families FILE`` then puts each column
beside the run's own candidates in every draw.

    python benchmarks/family_columns.py benchmarks/results/matrix-qwen1.5b-likelihood-sts2012-msrpar.json \\
        [--family embedding] [--out FILE]

Writes ``benchmarks/results/families-<matrix>.json``: ``{"meta", "matrix", "families": {KIND: {"params",
"scores"}}}``, the scores in the matrix's item order (``null`` where the judge failed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)
from _matrix import load_matrix

from judgetune import datasets
from judgetune.judges import judge_class
from judgetune.tuning import RunSpec, default_params, judge_for
from judgetune.tuning._splits import fit_space


def family_column(kind: str, dataset: str, ids: list[str]) -> tuple[dict, list[float | None]]:
    """The default settings of ``kind`` on the matrix's items and its raw score on each."""
    if judge_class(kind).needs_lm:
        raise SystemExit(f"{kind}: a family that needs an LM is scored by score_matrix.py, not here")
    examples = {e.id: e for e in datasets.load(dataset)}
    items = [examples[i] for i in ids]
    labels = [e.judgment for e in items]
    scale = (min(labels), max(labels))
    spec = RunSpec(name="family", judge=kind, data=dataset)
    fixed = fit_space(spec, items)
    params = {**default_params(spec, fixed, label_range=scale), **fixed}
    judge = judge_for(params, kind, None, seed=0, demo_pool=[], label_range=scale)
    return params, [v.score if v.parsed else None for v in judge.judge_all(items)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("matrix", type=Path)
    parser.add_argument("--family", action="append", default=None, help="a judge family (repeatable; default "
                        "embedding)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    m = load_matrix(args.matrix)
    families = {}
    for kind in args.family or ["embedding"]:
        params, scores = family_column(kind, m["meta"]["dataset"], m["ids"])
        families[kind] = {"params": params, "scores": scores}
        print(f"{kind}: {sum(s is not None for s in scores)} of {len(scores)} items scored", file=sys.stderr)
    out = args.out or args.matrix.with_name(args.matrix.name.replace("matrix-", "families-", 1))
    _results.write_result(out, {"matrix": args.matrix.name, "families": families}, sys.argv)


if __name__ == "__main__":
    main()
