"""The ``judgetune`` command: a thin layer over the public API, one small function per command."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from judgetune import datasets, judges, reproduce
from judgetune.calibration import evaluate
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


def _param(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _load_data(name_or_file: str, mirror: Path | None) -> list[datasets.Example]:
    if name_or_file in datasets.CATALOG:
        return datasets.load(name_or_file, mirror=mirror)
    if not Path(name_or_file).exists():
        raise JudgetuneError(f"--data {name_or_file!r} is neither a catalog source ({', '.join(datasets.CATALOG)}) "
                             "nor an existing file")
    return datasets.read_examples(name_or_file)


def _label_range(name_or_file: str, examples: list[datasets.Example]) -> tuple[float, float]:
    if name_or_file in datasets.CATALOG:
        scale = datasets.CATALOG[name_or_file].scale
        return float(scale.low), float(scale.high)
    return evaluate.label_range_of(examples)


def _print_prompts(transcript: list[dict]) -> None:
    for i, entry in enumerate(transcript, 1):
        print(f"--- prompt {i} ({entry['op']}) ---", file=sys.stderr)
        for message in entry["messages"]:
            print(f"[{message['role']}]\n{message['content']}", file=sys.stderr)
        if entry.get("prefix"):
            print(f"[assistant, prefilled]\n{entry['prefix']}", file=sys.stderr)
        if entry.get("labels"):
            print(f"(label distribution read over {entry['labels']})", file=sys.stderr)


def _evaluate(args: argparse.Namespace) -> None:
    from judgetune.judges import LM_JUDGES
    from judgetune.lm import load_lm

    examples = _load_data(args.data, args.mirror)
    splits = datasets.split_examples(examples, seed=args.seed)
    if not splits[args.split]:
        raise JudgetuneError(f"{args.data}: the {args.split} split is empty")
    test = evaluate.limit_by_group(splits[args.split], args.limit, seed=args.seed)
    label_range = _label_range(args.data, examples)
    lm = load_lm(args.lm, api_base=args.api_base, use_cache=not args.no_cache) if args.judge in LM_JUDGES else None
    try:
        judge = evaluate.make_judge(args.judge, lm, train=splits["train"], pool=splits[args.split],
                                    label_range=label_range, params=dict(args.param or []), seed=args.seed)
    except ValueError as err:  # a bad --param
        raise JudgetuneError(str(err)) from None
    if args.show_prompt and lm is not None:
        lm.transcript = []
        judge(test[0])
        _print_prompts(lm.transcript)
        lm.transcript = None
    result = evaluate.evaluate_judge(judge, test, train=splits["train"], label_range=label_range,
                                     n_resamples=args.resamples, seed=args.seed, progress=not args.json)
    if args.json:
        print(json.dumps({"judge": judge.settings(), "data": args.data, "split": args.split,
                          "label_range": result["label_range"], "rows": result["rows"]}, indent=2))
        return
    low, high = label_range
    print(f"{args.judge} on {args.data} ({args.split}, {len(test)} items; human scale {low:g}-{high:g})")
    print(evaluate.format_rows(result["rows"]))


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

    ev = commands.add_parser("evaluate", help="score a split with a judge and compare it with human labels and baselines")
    ev.add_argument("--judge", required=True, choices=judges.KINDS)
    ev.add_argument("--data", required=True, metavar="NAME|FILE", help="a catalog source or a JSONL/CSV/TSV file")
    ev.add_argument("--split", default="test", choices=("train", "dev", "test"))
    ev.add_argument("--lm", default="local:smollm2", help="LM spec (default: the embedded local:smollm2)")
    ev.add_argument("--api-base", help="server URL for an openai/MODEL spec")
    ev.add_argument("--limit", type=int, help="judge at most N items (whole groups, in a seeded order)")
    ev.add_argument("--seed", type=int, default=0, help="seeds the split, the demos, the references and the bootstrap")
    ev.add_argument("--param", type=_param, action="append", metavar="KEY=VALUE",
                    help="a judge setting, e.g. k=4, reasoning=true, scale=0-5 (repeatable)")
    ev.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples for the intervals")
    ev.add_argument("--show-prompt", action="store_true", help="print the prompts sent for the first item (stderr)")
    ev.add_argument("--no-cache", action="store_true", help="compute every LM answer afresh")
    ev.add_argument("--mirror", type=Path, help="local copy to fetch catalog data from when it is missing")
    ev.add_argument("--json", action="store_true", help='print {"rows": [{name, n, mae, spearman, ...}]}')
    ev.set_defaults(run=_evaluate)

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
