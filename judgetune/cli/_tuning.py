"""The commands that tune: tune (one label column or several), worker (another process on a shared study) and
demo (three judge families tuned on the embedded defaults)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from judgetune import datasets
from judgetune._files import make_folder, write_text
from judgetune.cli._judging import check_label_position
from judgetune.cli._options import (
    DEFAULT_CONCURRENCY,
    DEFAULT_RATE_LIMIT_WAIT,
    _audit_bounds,
    _cost_free,
    _mapping,
    _protocol_field,
    _read_instructions,
    _run_name,
    _text_or_file,
    evaluation,
    tuning,
)
from judgetune.errors import JudgetuneError, NothingJudgedError, shown


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
                              gate_items=args.gate_items,
                              gate=args.gate, audit_max=_audit_bounds(args.audit_max), stack=args.stack,
                              panel=args.panel, pooled=args.pooled, also=args.also, screen=not args.no_screen,
                              **_mapping(args, label), **_protocol_field(args))
    except ValueError as err:
        raise JudgetuneError(str(err)) from None


def _tune_one(spec: tuning.RunSpec, args: argparse.Namespace):
    """One tuning run and its report, made as ``judgetune.tune`` makes it: the frozen config and the run folder."""
    from judgetune._api import run_tuning

    check_label_position(spec.lm, args.label_position)
    lm = None  # run_tuning loads the run's LM, unless a label position or a server's pace is asked for
    if (args.label_position or args.rate_limit_wait != DEFAULT_RATE_LIMIT_WAIT or args.rps
            or args.concurrency != DEFAULT_CONCURRENCY):
        lm = tuning.load_run_lm(spec, timeout=args.timeout, label_position=args.label_position,
                                rate_limit_wait=args.rate_limit_wait, concurrency=args.concurrency, rps=args.rps)
    try:
        config, run_dir, _ = run_tuning(spec, runs_dir=args.runs_dir, storage=args.storage, heartbeat=args.heartbeat,
                                        timeout=args.timeout, lm=lm)
    except ValueError as err:
        raise JudgetuneError(str(err)) from None
    finally:
        if lm is not None:
            lm.close()
    test = config.metrics["test"]
    if test.get("items") and test.get("parse_failures", 0) >= test["items"]:
        raise NothingJudgedError(f"{spec.name}: not one of the {test['items']} test items could be judged "
                                 f"(see {run_dir / 'test_predictions.jsonl'})")
    return config, run_dir


def _trial_count(by_state: dict[str, int]) -> str:
    """``"8 trials"``, or ``"8 trials (6 complete, 2 pruned)"`` when not every trial completed."""
    total = sum(by_state.values())
    words = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running", "WAITING": "waiting"}
    if set(by_state) <= {"COMPLETE"}:
        return f"{total} trial{'s' * (total != 1)}"
    parts = ", ".join(f"{n} {words.get(state, state.lower())}" for state, n in by_state.items() if n)
    return f"{total} trial{'s' * (total != 1)} ({parts})"


def _tune_and_print(spec: tuning.RunSpec, args: argparse.Namespace) -> None:
    config, run_dir = _tune_one(spec, args)
    test, search = config.metrics["test"], config.metrics["study"]
    if args.json:
        print(json.dumps({"run": str(run_dir), "config": str(run_dir / "judge.json"), "metrics": config.metrics},
                         indent=2))
        return
    from judgetune.stats import candidate_name  # scipy and scikit-learn: loaded only once a run is made

    chosen = next((r for r in (config.metrics.get("selection") or {}).get("rows", []) if r.get("chosen")), None)
    shipped = candidate_name(chosen) if chosen else f"trial {search['chosen_trial']}"
    if chosen and chosen.get("family"):
        shipped += f", in place of the {spec.judge} judge's default"
    if spec.scale is None and spec.data not in datasets.CATALOG:
        low, high = config.label_range
        print(f"human scale {low:g}-{high:g}, inferred from the labels of {shown(spec.data)} (state it with --scale "
              "LOW-HIGH)")
    print(f"{spec.name}: {_trial_count(search['trials'])}, {search['lm_calls']} LM calls, chosen: {shown(shipped)}")
    print(f"  settings: {json.dumps(config.params)}; calibrator {config.calibrator['kind']}")
    baselines = [{"name": f"{n} (test)", **_cost_free(r)} for n, r in config.metrics["baselines"].items()]
    print(evaluation.format_rows([{"name": "test (calibrated)", **_cost_free({**test, **config.metrics["cost"]["test"]})},
                                  *baselines]))
    print(tuning.gain_line(config.metrics))
    timing = tuning.seconds_line(config.metrics)
    if timing:
        print(timing)
    versus_lm = tuning.lm_line(config.metrics)
    if versus_lm:
        print(versus_lm)
    print(f"frozen judge: {shown(run_dir / 'judge.json')}\nreport: {shown(run_dir / 'report.html')}")


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
                         "judge": config.judge, "params": config.params, "test": test, "baselines": baselines,
                         "gain": config.metrics.get("gain"), "vs_constant": config.metrics.get("vs_constant")})
        shipped = "tuned" if config.judge == args.judge else f"{config.judge} (another family)"
        rows += [{"name": f"{label}: {shipped} (test)", **_cost_free(test)},
                 *({"name": f"{label}: {b}", **_cost_free(r)} for b, r in baselines.items())]
    summary_dir = make_folder(args.runs_dir / name)
    summary = {"data": args.data, "judge": args.judge, "criteria": criteria}
    write_text(summary_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    if args.json:
        print(json.dumps({"summary": str(summary_dir / "summary.json"), **summary}, indent=2))
        return
    print(f"{len(criteria)} criteria tuned on {shown(args.data)} with the {args.judge} judge "
          "(test split, calibrated)")
    print(evaluation.format_rows(rows))
    for c in criteria:
        print(f"{c['label']}: " + tuning.gain_line({"gain": c["gain"], "vs_constant": c["vs_constant"]}))
    print("frozen judges: " + ", ".join(shown(c["config"]) for c in criteria)
          + f"\nsummary: {shown(summary_dir / 'summary.json')}")


def sibling_mirror() -> Path:
    """``shared/data`` beside the checkout judgetune runs from (``../shared/data`` of the folder holding the
    ``judgetune`` package): the demo reads the catalog's data there when nothing else names a copy."""
    return Path(__file__).resolve().parents[3] / "shared" / "data"


def _demo(args: argparse.Namespace) -> None:

    from judgetune._demo import run_demo

    mirror = sibling_mirror()
    if not os.environ.get("JUDGETUNE_DATA_MIRROR") and mirror.is_dir():  # unset or empty: nothing names a copy
        os.environ["JUDGETUNE_DATA_MIRROR"] = str(mirror)  # the checkout's sibling copy of the catalog
    summary = run_demo(name=args.run, runs_dir=args.runs_dir, seed=args.seed)
    if args.json:
        print(json.dumps({key: summary[key] for key in ("chosen", "moved", "rows", "versus", "gain", "python",
                                                        "seconds")},
                         indent=2))
        return
    notes = [f"best LM-only judge: {summary['best_lm_only']}"] if summary["best_lm_only"] else []
    notes += [f"the {family} run's gate shipped the {kind} judge's default" for family, kind in summary["moved"].items()]
    print(f"\nHeld-out MSRpar test ({summary['rows'][0]['n']} pairs), calibrated on dev; chosen on dev: "
          f"{summary['chosen_label']} ({'; '.join(notes) or 'no LM-only judge'}). Random: mean and 2.5-97.5% spread "
          f"over 200 seeds; others: 95% bootstrap intervals.")
    print(evaluation.format_rows([_cost_free(r) for r in summary["rows"]]))
    signed = lambda x: "-" if x is None else f"{x:+.3f}"  # noqa: E731
    for other, diff in summary["versus"].items():
        figures = ", ".join(f"{label} {signed(diff[key])} [{', '.join(signed(v) for v in diff[key + '_ci'])}]"
                            for label, key in (("Spearman", "spearman"), ("MAE", "mae")))
        print(f"{summary['chosen_label']} minus {other} on the same {diff['n']} pairs (paired bootstrap, 95%): {figures}")
    for family, line in summary["gain_lines"].items():
        print(f"{family} judge, tuned vs its default settings: {line}")
        if summary.get("seconds_lines", {}).get(family):
            print(f"{family} judge, {summary['seconds_lines'][family]}")
    print(f"frozen judge: {shown(Path(args.runs_dir) / args.run / 'judge.json')}  (each family: "
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
        raise JudgetuneError(f"--api-base {shown(args.api_base)}: study {shown(spec.name)} runs on "
                             f"{shown(spec.api_base or 'no server')}; "
                             "name that endpoint (to send it your key) or leave --api-base out")
    lm = tuning.load_run_lm(spec, timeout=args.timeout, trusted=named)
    try:
        tuning.run_trials(study, spec, lm, tuning.prepare_splits(spec))
    finally:
        if lm is not None:
            lm.close()
    print(f"worker done: study {shown(spec.name)} has {tuning.finished_trials(study)} finished trials")
