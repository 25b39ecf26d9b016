"""A score matrix made of candidates taken from other matrices of the same items: no LM time.

When the kind's default changes, the matrices scored before hold the new default as an ablation column
(``score_matrix.py --candidate``) beside the old draws. This puts such columns together, the first one as
the default, so that ``rules.py`` measures the rules against the untuned judge as it now is. Every source
must hold the same items, labels, groups, LM, judge, data defaults, demo pool and instruction texts.

    python benchmarks/matrix_columns.py FILE:NAME [FILE:NAME ...] --out PATH

``NAME`` is a candidate's ``name`` in ``FILE`` (``default``, ``c1``, ...); the first column given becomes
candidate 0 (``default``), the others ``c1``, ``c2``, ... in order; each keeps its params and ``from``
says where it came from.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from _results import meta  # benchmarks/ is on sys.path when a benchmark runs

__all__ = ["combine"]

SAME = ("lm", "judge", "dataset", "seed", "per_question", "label_range", "demo_pool", "texts", "data_fixed")


def combine(columns: list[tuple[Path, str]]) -> dict[str, Any]:
    """One matrix holding the named candidates of ``columns``, in order; refuses sources that differ."""
    sources = {path: json.loads(path.read_text()) for path in dict.fromkeys(path for path, _ in columns)}
    first = next(iter(sources.values()))
    for path, matrix in sources.items():
        if matrix["items"] != first["items"] or matrix["scored"] != first["scored"]:
            sys.exit(f"{path}: other items than {next(iter(sources))}")
        for key in SAME:
            if matrix["meta"].get(key) != first["meta"].get(key):
                sys.exit(f"{path}: meta.{key} differs from {next(iter(sources))}")
    out = {"meta": {**meta(sys.argv), **{k: first["meta"].get(k) for k in SAME},
                    "complete": all(m["meta"]["complete"] for m in sources.values())},
           "candidates": [], "items": first["items"], "scored": first["scored"],
           "scores": [], "failures": [], "seconds": []}
    for i, (path, name) in enumerate(columns):
        names = [c["name"] for c in sources[path]["candidates"]]
        if name not in names:
            sys.exit(f"{path}: no candidate named {name!r} (it has {', '.join(names)})")
        j = names.index(name)
        out["candidates"].append({"name": "default" if i == 0 else f"c{i}",
                                  "params": sources[path]["candidates"][j]["params"], "from": f"{path.name}:{name}"})
        for key in ("scores", "failures", "seconds"):
            out[key].append(sources[path][key][j])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("columns", nargs="+", metavar="FILE:NAME")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    columns = [(Path(c.rsplit(":", 1)[0]), c.rsplit(":", 1)[1]) for c in args.columns]
    args.out.write_text(json.dumps(combine(columns), separators=(",", ":")))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
