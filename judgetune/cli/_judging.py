"""The commands that judge with a given judge against human labels: evaluate, compare, regrade, audit."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from judgetune import datasets
from judgetune._progress import stage
from judgetune.cli._options import (
    _cost_free,
    _load_data,
    _mapping,
    _some_judged,
    _tuned_mapping,
    evaluation,
    judges,
)
from judgetune.errors import JudgetuneError, NothingJudgedError, printable, shown


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
FIT_PER_LIMIT = 3  # with --limit N, it fits on at most this many training items per item judged (each costs the
MIN_FIT_ITEMS = 12  # LM calls of an item judged) and at least these (a combiner fitted on 4 items says little)


def check_label_position(spec: str, position: str | None) -> None:
    """``--label-position`` is for a model behind a server; refused in one line for an in-process one."""
    if position is not None and not spec.strip().startswith("openai/"):
        raise JudgetuneError(f"--label-position {position}: applies to a model behind a server (--lm openai/MODEL); "
                             f"{shown(spec)} runs in this process, where labels are read at the label exactly")


def _evaluate(args: argparse.Namespace) -> None:
    from judgetune.lm import load_lm

    check_label_position(args.lm, args.label_position)
    examples, label_range = _load_data(args)
    splits = datasets.split_examples(examples, seed=args.seed)
    if not splits[args.split]:
        raise JudgetuneError(f"{shown(args.data)}: the {args.split} split is empty")
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
        raise JudgetuneError(f"judge {args.judge} with these settings ({shown(params)}) compares an item with the other "
                             "answers of its question: pass --protocol group (or linkage)")
    lm = (load_lm(args.lm, api_base=args.api_base, use_cache=not args.no_cache, timeout=args.timeout,
                  rate_limit_wait=args.rate_limit_wait, concurrency=args.concurrency, rps=args.rps,
                  label_position=args.label_position)
          if judges.judge_class(args.judge).needs_lm_with(params) else None)
    judge = _fitted_judge(args, lm, splits["train"], label_range, params)
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
    print(f"{args.judge} on {shown(args.data)} ({args.split}, {len(test)} items; human scale {low:g}-{high:g})")
    if "scoring_mode" in judge.params:
        knobs = {k: judge.params[k] for k in ("n_samples", "temperature") if k in judge.params}
        print(f"scoring mode {judge.params['scoring_mode']}" + "".join(f", {k} {v}" for k, v in knobs.items()))
    if lm is not None and lm.label_record():
        print(f"label position {lm.label_record()['label_position']}")
    if args.protocol == "linkage":
        print(f"protocol linkage, {draw.per_grade} reference(s) per grade: {len(draw.qualified)} questions "
              f"qualify, {len(draw.skipped)} skipped (--json lists them with the reason)")
    else:
        print(f"protocol {args.protocol or 'none (every item scored alone)'}")
    print(evaluation.format_rows(result["rows"]))


def _fit_bound(args: argparse.Namespace, lm) -> tuple[int | None, str]:
    """How many training items a fitted judge fits on (None: all), and why, for the line that says it: --fit-items;
    else with an LM at most ``FIT_PER_LIMIT`` per item --limit asks for (at least ``MIN_FIT_ITEMS``) and at most
    ``LM_FIT_ITEMS``, since every training item costs the LM calls of an item judged."""
    if args.fit_items is not None:
        return args.fit_items, "--fit-items"
    if lm is None:
        return None, "--fit-items N bounds it"
    scaled = LM_FIT_ITEMS if args.limit is None else max(MIN_FIT_ITEMS, FIT_PER_LIMIT * args.limit)
    if scaled < LM_FIT_ITEMS:
        return scaled, (f"{FIT_PER_LIMIT} per item of --limit {args.limit}, at least {MIN_FIT_ITEMS}; --fit-items N "
                        "sets it")
    return LM_FIT_ITEMS, f"at most {LM_FIT_ITEMS} with an LM; --fit-items N sets it"


def _fitted_judge(args: argparse.Namespace, lm, train: list, label_range: tuple[float, float], params: dict):
    """The judge to evaluate, fitted (a judge that fits) on a seeded, bounded share of the training items, said on
    stderr before the work (the LM calls of a fit with an LM cost as much per item as judging)."""
    fits = getattr(judges.judge_class(args.judge), "fits", False)
    bound, why = _fit_bound(args, lm)
    fit_on = datasets.limit_by_group(train, bound, seed=args.seed) if fits and bound and len(train) > bound else train
    if fits and not args.json:
        print(f"fitting the {args.judge} judge on {len(fit_on)} of {len(train)} training items"
              f"{' with the LM' if lm is not None else ''} ({why})", file=sys.stderr)
    try:
        with stage(f"fitting the {args.judge} judge", enabled=fits and not args.json):
            return judges.make_judge(args.judge, lm, train=fit_on, label_range=label_range, params=params,
                                     seed=args.seed)
    except ValueError as err:  # a bad --param
        raise JudgetuneError(str(err)) from None


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
        with warnings.catch_warnings():  # said once, by the log line on stderr
            warnings.simplefilter("ignore", UserWarning)
            evaluation.warn_other_data([config], args.data)
    _refuse_other_scale({str(args.config): config}, [e for e in examples if e.judgment is not None], args.data,
                        advice="audit the judge on data of its own task")
    demos = {d.get("id") for d in config.demos}  # the judge's own demos are not audited
    pool = [e for e in examples if e.id not in demos]
    examples = datasets.limit_by_group(pool, args.limit, seed=args.seed)
    lm = load_config_lm(config, timeout=args.timeout, api_base=args.api_base, where=str(args.config))
    result = audit.audit(config, examples, lm, probes=args.probe, n_resamples=args.resamples,
                         seed=args.seed, progress=not args.json)
    if not result["probes"]:
        skipped = result["not_applicable"]
        failed = all(r["why"].startswith("every one of") for r in skipped)  # the judge failed, not the request
        raise (NothingJudgedError if failed else JudgetuneError)(
            f"no probe ran on the {config.judge} judge {shown(args.config)}: "
            + "; ".join(f"{r['probe']}: {r['why']}" for r in skipped))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"audit of the {config.judge} judge {shown(args.config)} on {shown(args.data)} "
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
    if len({Path(path).resolve() for path in configs}) < len(args.configs):
        raise JudgetuneError(f"--configs {' '.join(map(shown, args.configs))}: expected two or more different judge "
                             "configs, found one given twice")
    _refuse_other_scale(configs, examples, args.data)
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
        rho, err = pair.get("spearman_difference"), pair.get("mae_difference_ci")
        figures = "" if rho is None or err is None else (
            f"Spearman difference {_signed(rho['value'])} [{_signed(rho['low'])}, {_signed(rho['high'])}], "
            f"MAE difference {_signed(err['value'])} [{_signed(err['low'])}, {_signed(err['high'])}] (paired, 95%); ")
        print(f"{shown(pair['a'])} minus {shown(pair['b'])} on {pair['items']} items: {figures}"
              f"Wilcoxon p on the errors = {'-' if p is None else f'{p:.3g}'}")


def _refuse_other_scale(configs: dict, examples: list, data: str, *,
                        advice: str = "compare judges tuned on this data's scale") -> None:
    """Refuse labels off a judge's scale: its errors would be measured across two scales (or the data is another
    task's)."""
    labels = [e.judgment for e in examples]
    for path, config in configs.items():
        low, high = config.label_range
        off = [x for x in labels if not low - 1e-9 <= x <= high + 1e-9]
        if off:
            raise JudgetuneError(f"{shown(data)}: {len(off)} of {len(labels)} labels lie outside the scale "
                                 f"{low:g}-{high:g} of {shown(path)} (labels {min(labels):g} to {max(labels):g}); "
                                 f"{advice}")


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


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
            raise JudgetuneError(f"--field: an eval log's fields are fixed (input, completion, target); {shown(args.data)} "
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
    print(f"regrading {result['items']} items of {shown(args.data)}: old {shown(result['old'])}, new {shown(result['new'])} "
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
