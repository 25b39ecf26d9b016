"""The commands that use a frozen judge on new data: score, pick, export."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from judgetune import datasets
from judgetune._files import clashes
from judgetune.cli._options import _mapping, _some_judged, _tuned_mapping, judges
from judgetune.errors import JudgetuneError, printable, shown


def _score(args: argparse.Namespace) -> None:
    from judgetune import scoring
    from judgetune.config import JudgeConfig
    from judgetune.scoring import load_config_lm, out_format

    out = args.out.resolve()
    catalog = args.data in datasets.CATALOG
    if clashes(args.out, [args.config, *([] if catalog else [args.data])]):  # links too
        raise JudgetuneError(f"--out {shown(args.out)}: that is an input of this command; write the scores elsewhere")
    if out.is_dir() or not out.parent.is_dir():
        raise JudgetuneError(f"--out {shown(args.out)}: expected a file to write in an existing folder")
    out_format(out)  # a suffix that names no format is refused before any work
    if args.engine == "ray" and (args.max_tokens is not None or args.prompt_price is not None
                                 or args.completion_price is not None):
        raise JudgetuneError("--engine ray does not meter tokens: --max-tokens and the price options work with the "
                             "in-process engine (drop --engine ray, or drop them)")
    if args.engine == "ray" and (args.protocol or catalog):
        raise JudgetuneError("--engine ray scores a data file without --protocol (a protocol compares the items "
                             "of a question, which one process must hold)")
    config = _with_label_position(JudgeConfig.load(args.config), args)
    mapping = _mapping(args, stored=_tuned_mapping(config, args.config))
    if mapping != _mapping(args):
        columns = ", ".join(f"{t}={shown(c)}" for t, c in datasets.FieldMap(**mapping).targets.items())
        print(f"reading {shown(args.data)} with the columns {shown(args.config)} was tuned on: {columns} "
              "(--field/--label replace them)", file=sys.stderr)
    prices = None
    if args.prompt_price is not None or args.completion_price is not None:
        prices = (args.prompt_price or 0.0, args.completion_price or 0.0)
    server = {"concurrency": args.concurrency, "rps": args.rps, "rate_limit_wait": args.rate_limit_wait}
    if not (args.force or args.protocol or catalog) and out.exists() and scoring.finished_before(
            out, config, scoring.file_source(args.data, **mapping)):
        print(f"{shown(args.out)}: already complete (a finished run of this judge and input); nothing to do "
              "(--force scores it again)")
        return
    if args.engine == "ray":
        from judgetune.scoring import ray_engine

        run = ray_engine.score_on_ray(args.config, args.data, out, fields=mapping["fields"], label=mapping["label"],
                                      chunk_size=args.chunk_size, force=args.force, address=args.ray_address,
                                      workers=args.workers, timeout=args.timeout, progress=True,
                                      server={**server, "api_base": args.api_base, "where": str(args.config)})
    elif args.protocol or catalog:  # in memory: a protocol compares the items of a question; the catalog is small
        run = _score_in_memory(args, config, mapping, out, server)
    else:
        lm = load_config_lm(config, timeout=args.timeout, api_base=args.api_base, where=str(args.config), **server)
        try:
            run = scoring.score_stream(config, config.build_judge(lm, where=shown(args.config)), lm, None, out,
                                       source=scoring.file_source(args.data, **mapping), chunk_size=args.chunk_size,
                                       force=args.force, max_tokens=args.max_tokens, prices=prices, progress=True)
        finally:
            if lm is not None:
                lm.close()
    _score_summary(run, args.out)


def _with_label_position(config, args: argparse.Namespace):
    """The config with ``--label-position`` applied: equal to the one judge.json records, or the way to read labels of
    a judge.json that records none (written before it was recorded); refused otherwise, in one line."""
    asked = args.label_position
    frozen = (config.lm or {}).get("label_position")
    if asked is None or asked == frozen:
        return config
    if config.lm is None or not str(config.lm.get("spec", "")).startswith("openai/"):
        raise JudgetuneError(f"--label-position {asked}: {shown(args.config)} runs no model behind a server")
    if frozen is not None:
        raise JudgetuneError(f"--label-position {asked}: {shown(args.config)} was tuned reading labels at {frozen}, "
                             f"and scores only that way (drop --label-position, or tune it again)")
    if args.engine == "ray":
        raise JudgetuneError("--label-position with --engine ray: the Ray workers read labels as judge.json records; "
                             "score this judge.json with the local engine")
    return config.model_copy(update={"lm": {**config.lm, "label_position": asked}})


def _score_in_memory(args: argparse.Namespace, config, mapping: dict, out: Path, server: dict):
    from judgetune import scoring
    from judgetune.scoring import load_config_lm, score_protocol

    if args.data in datasets.CATALOG:
        examples, _ = datasets.load_data(args.data, mirror=args.mirror, **mapping)
    else:
        examples = datasets.read_examples(args.data, require_label=False, **mapping)
    lm = load_config_lm(config, timeout=args.timeout, api_base=args.api_base, where=str(args.config),
                         **server)
    try:
        if not args.protocol:
            source = {"catalog": args.data, **mapping}
            return scoring.score_stream(config, config.build_judge(lm, where=shown(args.config)), lm, examples, out,
                                        source=source,
                                        chunk_size=args.chunk_size, force=args.force, max_tokens=args.max_tokens,
                                        progress=True)
        scored = score_protocol(config, examples, lm, protocol=args.protocol, per_grade=args.per_grade,
                                seed=args.seed, progress=True)
    finally:
        if lm is not None:
            lm.close()
    print(f"protocol {args.protocol}: {json.dumps({k: v for k, v in scored.protocol.items() if k != 'qualified'})}",
          file=sys.stderr)
    return scoring.write_scored(out, scored.items, scored.verdicts, scored.scores, force=args.force)


def _score_summary(run, out: Path) -> None:
    """The lines a score run ends with; exit 3 when not one item could be judged."""
    resumed = f"; {run.resumed} kept from the interrupted run" if run.resumed else ""
    if run.stopped == "budget":
        raise JudgetuneError(f"--max-tokens: stopped before the budget would be passed, with {run.rows} of "
                             f"{run.total if run.total is not None else 'the'} items scored ({_usage_text(run)}); they "
                             f"are kept in {shown(run.out)}.part/rows.jsonl: re-run with a larger --max-tokens to go on")
    print(f"{run.rows} items scored into {shown(out)} ({run.failed} failed judgments, score null"
          + (f"; the first because: {printable(run.first_failure)}" if run.first_failure else "") + f"{resumed})"
          + (f"; {run.degraded} scored without some of their signals (\"degraded\" in the output; the first: "
             f"{printable(run.first_degraded or '')})" if run.degraded else ""))
    if run.usage:
        print(_usage_text(run), file=sys.stderr)
    _some_judged([run.first_failure or ""] * run.failed, run.rows, what="judgments")


def _usage_text(run) -> str:
    usage = run.usage or {}
    text = (f"tokens: {usage.get('prompt_tokens', 0):,} prompt + {usage.get('completion_tokens', 0):,} completion"
            + (f" in {usage['requests']:,} requests" if usage.get("requests") else ""))
    return text + (f", cost {run.cost:.4f}" if run.cost is not None else "")


def check_pick_paths(args: argparse.Namespace) -> None:
    """``pick``'s --out and --data, refused in one line each: an input, a folder, an existing file without --force,
    a missing data file."""
    inputs = [args.data, *([args.labeled] if args.labeled else [])]
    if clashes(args.out, inputs):
        raise JudgetuneError(f"--out {shown(args.out)}: that is an input of this command; write the picks elsewhere")
    if args.out.resolve().is_dir() or not args.out.resolve().parent.is_dir():
        raise JudgetuneError(f"--out {shown(args.out)}: expected a file to write in an existing folder")
    if args.out.exists() and not args.force:
        raise JudgetuneError(f"--out {shown(args.out)}: the file exists; pass --force to replace it")
    if not args.data.is_file():
        raise JudgetuneError(f"--data {shown(args.data)}: no such data file (pick reads a JSONL, CSV or TSV file)")


def _pick(args: argparse.Namespace) -> None:
    from judgetune.lm import load_lm
    from judgetune.picking import pick_file

    check_pick_paths(args)
    lm = load_lm(args.lm, api_base=args.api_base) if args.lm and judges.judge_class(args.judge).needs_lm else None
    try:
        picks = pick_file(args.data, args.n, out=args.out, labeled=args.labeled, judge=args.judge, lm=lm,
                          seed=args.seed, **_mapping(args))
    finally:
        if lm is not None:
            lm.close()
    if args.json:
        print(json.dumps({**picks.summary(), "out": str(args.out),
                          "picks": [{"id": p.id, "score": p.score, "group": p.group, "reason": p.reason}
                                    for p in picks.picks]}, indent=1))
        return
    summary = picks.summary()
    low, high = summary["score_range"]
    how = ("first round: one item per stratum of the default judge's score, spread over groups" if picks.round == "first"
           else f"next round: where the calibrator is least sure, given {picks.labeled} labels")
    print(f"{len(picks.picks)} of {picks.pool} unlabeled items written to {shown(args.out)} ({how}; {args.judge} scores "
          f"{low:.3f} to {high:.3f}, {summary['groups']} groups or clusters"
          + (f"; {summary['unscored']} item(s) the judge could not score placed at the median" if summary["unscored"]
             else "") + ")")
    print("label them, then tune: judgetune tune --data LABELED --judge checklist (or hybrid); or pick more with "
          "--labeled LABELED", file=sys.stderr)


def _export(args: argparse.Namespace) -> None:
    from judgetune import integrations

    if clashes(args.out, [args.config]):
        raise JudgetuneError(f"--out {shown(args.out)}: that is the judge config; write elsewhere")
    if args.out.resolve().is_dir() or not args.out.resolve().parent.is_dir():
        raise JudgetuneError(f"--out {shown(args.out)}: expected a file to write in an existing folder")
    if args.out.exists() and not args.force:
        raise JudgetuneError(f"--out {shown(args.out)}: the file exists; pass --force to replace it")
    suffix = ".py" if args.to == "promptfoo" else None
    if suffix and args.out.suffix != suffix:
        raise JudgetuneError(f"--out {shown(args.out)}: --to promptfoo writes a Python assertion: name it with {suffix}")
    if args.to != "promptfoo" and args.threshold is not None:
        raise JudgetuneError(f"--threshold: only --to promptfoo takes a threshold (--to {args.to} exports the judge's "
                             "predictors, which score without one)")
    if args.to == "promptfoo":
        if args.threshold is None:
            raise JudgetuneError("--to promptfoo needs --threshold SCORE (on the judge's human scale): an output "
                                 "passes when its calibrated score is at least this")
        integrations.write_promptfoo_assertion(args.config, args.out, threshold=args.threshold)
        print(f"written: {shown(args.out)} (use it in promptfooconfig.yaml as `type: python`, "
              f"`value: file://{shown(args.out)}`, the path as seen from promptfooconfig.yaml's folder)")
    else:
        integrations.save_dspy_program(args.config, args.out)
        print(f"written: {shown(args.out)} (DSPy's JSON state of the judge's predictors; load with program.load)")
