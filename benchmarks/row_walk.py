"""One row's walk, measured: the judgetune modules a CSV row passes through in ``judgetune tune``.

A small real run from the command line (``judgetune tune --data rows.csv``: the rubric judge on SmolLM2, 2
trials, 40 search and 40 dev items, 20 test items, from 100 MSRpar rows written as a CSV) under
``sys.setprofile``. A function call in a judgetune module *holds* a row when one of its arguments or locals is
that row: its ``Example``, a list or tuple of Examples holding it, or the CSV record (a dict with its id). For each
row the distinct modules that held it are counted, in the order first entered, and the modules on the call stack
whenever one did (a module entered again is not counted again). Values made from the row (its prompt's text, its
score, its group key) are not followed: docs/architecture.md's hand count follows those for one search row.

    JUDGETUNE_DATA_MIRROR=../shared/data python benchmarks/row_walk.py [--rows 100]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path

from judgetune import datasets
from judgetune.cli._main import main as cli_main
from judgetune.datasets import Example


def held_ids(frame) -> set[str]:
    """The ids of the rows a frame holds."""
    ids: set[str] = set()
    for value in frame.f_locals.values():
        if isinstance(value, Example):
            ids.add(getattr(value, "id", None))  # None inside Example's own __init__
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], Example):
            ids.update(getattr(v, "id", None) for v in value if isinstance(v, Example))
        elif isinstance(value, dict) and isinstance(value.get("id"), str):
            ids.add(value["id"])
    return ids


def stack_modules(frame) -> list[str]:
    """The judgetune modules on the call stack down to ``frame``, outermost first."""
    modules = []
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("judgetune") and module not in modules:
            modules.append(module)
        frame = frame.f_back
    return modules[::-1]


def walks(argv: list[str], ids: set[str]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """For each row id, the judgetune modules that held it, and the modules on the stack whenever one held it
    (the calls that brought the row there), each in the order first entered."""
    held: dict[str, list[str]] = {i: [] for i in ids}
    path: dict[str, list[str]] = {i: [] for i in ids}

    def profile(frame, event, arg) -> None:
        module = frame.f_globals.get("__name__", "")
        if event != "call" or not module.startswith("judgetune"):
            return
        rows = held_ids(frame) & ids
        if not rows:
            return
        stack = stack_modules(frame)
        for row in rows:
            if module not in held[row]:
                held[row].append(module)
            path[row].extend(m for m in stack if m not in path[row])

    sys.setprofile(profile)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the run's JSON: not what this measures
            cli_main(argv)
    except SystemExit as stop:
        if stop.code:
            raise
    finally:
        sys.setprofile(None)
    return held, path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100)
    args = parser.parse_args()
    examples, _ = datasets.load_data("sts2012-msrpar")
    rows = examples[:args.rows]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "rows.csv"
        with data.open("w", newline="") as handle:
            out = csv.writer(handle)
            out.writerow(["id", "answer", "reference", "label"])
            for ex in rows:
                out.writerow([ex.id, ex.answer, ex.references[0].text, ex.judgment])
        argv = ["tune", "--data", str(data), "--judge", "rubric", "--lm", "local:smollm2", "--trials", "2",
                "--search-items", "40", "--dev-items", "40", "--test-items", "20", "--runs-dir", str(Path(tmp) / "runs"),
                "--run", "walk", "--json"]
        held, path = walks(argv, {ex.id for ex in rows})
        predictions = Path(tmp) / "runs" / "walk" / "test_predictions.jsonl"
        test = {json.loads(line)["id"] for line in predictions.read_text().splitlines()}
    for name, walk in (("held it", held), ("on the stack while one held it (the call path)", path)):
        counts = {row: len(modules) for row, modules in walk.items()}
        labeled = sorted((n, row) for row, n in counts.items() if row not in test and n)
        tested = sorted(n for row, n in counts.items() if row in test)
        n, row = labeled[len(labeled) // 2]
        print(f"modules that {name}: a labeled row, the median of {len(labeled)}: {row}, {n} modules, {n - 1} hops")
        for module in walk[row]:
            print(f"  {module}")
        print(f"  labeled rows {labeled[0][0]}-{labeled[-1][0]} modules; test rows {min(tested)}-{max(tested)} "
              f"(median {statistics.median(tested)})")


if __name__ == "__main__":
    main()
