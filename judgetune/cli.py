"""The ``judgetune`` command: a thin layer over the public API, one small function per command."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from judgetune import datasets, reproduce
from judgetune.errors import JudgetuneError


def _data_list(args: argparse.Namespace) -> None:
    rows = [{"name": s.name, "task": s.task, "label": s.target, "scale": s.scale.description,
             "title": s.title, "license": s.license} for s in datasets.CATALOG.values()]
    if args.json:
        print(json.dumps({"sources": rows}, indent=2))
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name']:<{width}}  {r['task']:<10}  {r['title']}")


def _data_show(args: argparse.Namespace) -> None:
    info = datasets.summary(args.name, datasets.load(args.name, mirror=args.mirror))
    if args.json:
        print(json.dumps(info, indent=2))
        return
    print(f"{info['name']}: {info['title']}")
    print(f"  task {info['task']}; {info['examples']} examples, {info['labeled']} with a human {info['label_field']}, "
          f"{info['groups']} groups" + (f"; splits {info['splits']}" if info["splits"] else ""))
    print(f"  scale: {info['scale']['description']}")
    total = max(1, sum(info["histogram"].values()))
    for key, count in info["histogram"].items():
        print(f"  {key:>6} {count:>6}  {'#' * round(40 * count / total)}")
    print(f"  location: {info['location']}\n  license: {info['license']}\n  cite: {info['citation']}")


def _data_fetch(args: argparse.Namespace) -> None:
    names = list(datasets.CATALOG) if args.name == "all" else [args.name]
    for name in names:
        placed = datasets.fetch(name, root=args.dir, mirror=args.mirror)
        print(f"{name}: {len(placed)} file(s) in {args.dir or datasets.data_dir()}")


def _reproduce(args: argparse.Namespace) -> None:
    table = reproduce.TABLES[args.table]()
    if args.json:
        print(json.dumps(table, indent=2))
        return
    print(f"{'figure':<58} {'published':>9} {'computed':>9}  match")
    for r in table["rows"]:
        print(f"{r['name']:<58} {r['published']:>9} {r['computed']:>9.4f}  {'yes' if r['matches'] else 'NO'}")
    for r in table.get("computed_only", []):
        print(f"{r['name']:<58} {'-':>9} {r['computed']:>9.4f}  (no published figure)")
    for r in table["rows"]:
        if r["note"]:
            print(f"\nnote on {r['name']}: {r['note']}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="judgetune", description="Tune, calibrate and freeze LLM judges.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    commands = parser.add_subparsers(dest="command", required=True)

    data = commands.add_parser("data", help="the catalog of human-labeled data").add_subparsers(
        dest="data_command", required=True)
    listing = data.add_parser("list", help="list the catalog's sources")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=_data_list)
    show = data.add_parser("show", help="counts, label histogram, scale and license of a source")
    show.add_argument("name", choices=sorted(datasets.CATALOG), metavar="NAME")
    show.add_argument("--mirror", type=Path, help="local copy to fetch from when the data is missing")
    show.add_argument("--json", action="store_true")
    show.set_defaults(run=_data_show)
    fetch = data.add_parser("fetch", help="download a source (checksummed) or copy it from a mirror folder")
    fetch.add_argument("name", choices=[*sorted(datasets.CATALOG), "all"], metavar="NAME|all")
    fetch.add_argument("--mirror", type=Path, help="folder laid out like the catalog (default $JUDGETUNE_DATA_MIRROR)")
    fetch.add_argument("--dir", type=Path, help="where data lands (default $JUDGETUNE_DATA_DIR or ./datasets)")
    fetch.set_defaults(run=_data_fetch)

    repro = commands.add_parser("reproduce", help="recompute a published table from the raw data (self-check)")
    repro.add_argument("table", choices=sorted(reproduce.TABLES))
    repro.add_argument("--json", action="store_true", help='print {"rows": [{name, published, computed, ...}]}')
    repro.set_defaults(run=_reproduce)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        args.run(args)
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        sys.stdout = None
        return 0
    except (JudgetuneError, FileNotFoundError) as err:
        print(f"judgetune: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
