"""The commands that judge against human labels: evaluate, tune, demo, worker, compare, regrade, audit."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import warnings
from pathlib import Path

from judgetune import datasets
from judgetune._files import (
    make_folder,
    write_text,
)
from judgetune._progress import stage
from judgetune.cli._options import (
    _audit_bounds,
    _load_data,
    _mapping,
    _protocol_field,
    _read_instructions,
    _run_name,
    _some_judged,
    _text_or_file,
    _tuned_mapping,
    evaluation,
    judges,
    tuning,
)
from judgetune.errors import JudgetuneError, NothingJudgedError, printable


def _print_prompts(transcript: list[dict]) -> None:
    for i, entry in enumerate(transcript, 1):
        print(f"--- prompt {i} ({entry['op']}) ---", file=sys.stderr)
        for message in entry["messages"]:
            print(f"[{message['role']}]\n{printable(message['content'])}", file=sys.stderr)
        if entry.get("prefix"):
            print(f"[assistant, prefilled]\n{printable(entry['prefix'])}", file=sys.stderr)
        if entry.get("labels"):
            print(f"(label distribution read over {entry['labels']})", file=sys.stderr)


LM_FIT_ITEMS = 200  # a judge fitted with an LM (checklist) fits on at most this many training items unless told


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
    kind = judges.judge_class(args.judge)
    fit_on = splits["train"]
    bound = args.fit_items if args.fit_items is not None else LM_FIT_ITEMS if lm is not None else None
    if getattr(kind, "fits", False) and bound is not None and len(fit_on) > bound:
        fit_on = datasets.limit_by_group(fit_on, bound, seed=args.seed)
    fitting = getattr(kind, "fits", False) and not args.json
    how = f"{len(fit_on)} of {len(splits['train'])} training items{' with the LM' if lm is not None else ''}"
    if fitting:
        print(f"fitting the {args.judge} judge on {how} (--fit-items N sets how many)", file=sys.stderr)
    try:
        with stage(f"fitting the {args.judge} judge", enabled=fitting):
            judge = judges.make_judge(args.judge, lm, train=fit_on, label_range=label_range, params=params,
                                      seed=args.seed)
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
    print(f"{args.judge} on {printable(str(args.data))} ({args.split}, {len(test)} items; human scale {low:g}-{high:g})")
    if "scoring_mode" in judge.params:
        knobs = {k: judge.params[k] for k in ("n_samples", "temperature") if k in judge.params}
        print(f"scoring mode {judge.params['scoring_mode']}" + "".join(f", {k} {v}" for k, v in knobs.items()))
    if args.protocol == "linkage":
        print(f"protocol linkage, {draw.per_grade} reference(s) per grade: {len(draw.qualified)} questions "
              f"qualify, {len(draw.skipped)} skipped (--json lists them with the reason)")
    else:
        print(f"protocol {args.protocol or 'none (every item scored alone)'}")
    print(evaluation.format_rows(result["rows"]))


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
    """One tuning run and its report, made as ``judgetune.tune`` makes it: the frozen config and the run folder."""
    from judgetune._api import run_tuning

    try:
        config, run_dir, _ = run_tuning(spec, runs_dir=args.runs_dir, storage=args.storage, heartbeat=args.heartbeat,
                                        timeout=args.timeout)
    except ValueError as err:
        raise JudgetuneError(str(err)) from None
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
    print(f"{len(criteria)} criteria tuned on {printable(str(args.data))} with the {args.judge} judge "
          "(test split, calibrated)")
    print(evaluation.format_rows(rows))
    for c in criteria:
        print(f"{c['label']}: " + tuning.gain_line({"gain": c["gain"], "vs_constant": c["vs_constant"]}))
    print("frozen judges: " + ", ".join(c["config"] for c in criteria) + f"\nsummary: {summary_dir / 'summary.json'}")


def _demo(args: argparse.Namespace) -> None:

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


def _audit(args: argparse.Namespace) -> None:
    from judgetune import audit
    from judgetune.config import JudgeConfig
    from judgetune.scoring import load_config_lm

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
    result = audit.audit(config, examples, lm, probes=args.probe, n_resamples=args.resamples,
                         seed=args.seed, progress=not args.json)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"audit of the {config.judge} judge {printable(str(args.config))} on {printable(str(args.data))} "
          f"({len(examples)} items; effects with 95% intervals, q corrected across probes, MDE at power 0.8)")
    print(audit.format_audit(result))


def _compare(args: argparse.Namespace) -> None:
    from judgetune.config import JudgeConfig
    from judgetune.evaluation import compare_scores
    from judgetune.scoring import load_config_lm, score_examples

    if args.regrade:
        return _regrade(args)
    examples, label_range = _load_data(args)
    examples = [e for e in examples if e.judgment is not None]  # as tune and the Python compare: the same split
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


def _regrade_items(args: argparse.Namespace, configs: list) -> list:
    """The items to regrade: an inspect eval log's samples (``.eval``/``.json``), a data or output file's rows
    (labels optional) or a catalog source's ``--split`` of the judges' own split seed (as ``evaluate`` and
    ``compare`` take it: never a fresh random split, never items a judge was tuned on)."""
    if args.data in datasets.CATALOG:
        from judgetune import evaluation

        examples, _ = datasets.load_data(args.data, mirror=args.mirror, **_mapping(args))
        split = args.split if args.split != "all" else "test"
        return datasets.split_examples(examples, seed=evaluation.heldout_seed(configs, args.seed, split))[split]
    if Path(args.data).suffix in (".eval", ".json"):
        from judgetune.integrations import items_from_eval_log

        if args.field:
            raise JudgetuneError(f"--field: an eval log's fields are fixed (input, completion, target); {args.data} "
                                 "is read as one")

        return items_from_eval_log(args.data, scorer=args.label)
    return datasets.read_examples(args.data, require_label=False, **_mapping(args))


def _regrade(args: argparse.Namespace) -> None:
    """``compare --regrade OLD.json NEW.json``: regrading the same items with a new judge version."""
    from judgetune.config import JudgeConfig
    from judgetune.evaluation import regrade_scores
    from judgetune.scoring import load_config_lm, score_examples

    if len(args.configs) != 2:
        raise JudgetuneError(f"--regrade: expected two judge.json files, OLD NEW (found {len(args.configs)})")
    configs = [JudgeConfig.load(path) for path in args.configs]
    examples = datasets.limit_by_group(_regrade_items(args, configs), args.limit, seed=args.seed or 0)
    scores = []
    for path, config in zip(args.configs, configs):
        lm = load_config_lm(config, timeout=args.timeout, api_base=args.api_base, where=str(path))
        try:
            scores.append(score_examples(config, examples, lm, progress=not args.json)[1])
        finally:
            if lm is not None:
                lm.close()
    result = {"old": str(args.configs[0]), "new": str(args.configs[1]),
              **regrade_scores(*scores, examples, n_resamples=args.resamples, seed=args.seed or 0)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"regrading {result['items']} items of {printable(str(args.data))}: old {result['old']}, new {result['new']} "
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
