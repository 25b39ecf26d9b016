"""What tuning buys over the default judge, run by run, with intervals.

For each catalog set and judge: ``judgetune.tuning.tune`` with its default settings (the gate on),
and once more with ``gate="off"`` (the old rule: the front re-scored on the dev split alone, the
best dev figure wins; the default is no candidate). Each row reads the run's judge.json metrics:
the default judge and the shipped one on the same test items, ``metrics.gain`` (shipped minus
default, paired grouped-bootstrap 95% interval; Spearman per group where the data has groups),
the MAE gain (negative is better), the shipped MAE beside the constant predictor's (training
median), whether the default shipped (``gated``), LM calls (answers computed; the old-rule run
reuses the first run's cached answers, so its count is lower) and wall seconds (inflated on a
shared machine).

Testbeds (deterministic LMs, ``judgetune.testing.planted.TESTBEDS``): ``null`` (every instruction equal up
to noise; 40 dev items) and ``null-grouped`` (20 questions of 12 answers, 4 of them in dev) count the runs where
the default shipped (goal: at least 95%); ``planted`` (a truly better instruction; 40 dev items) and
``planted-150`` (150 dev items) the runs where the gate passed and the test gain's interval is above 0
(goals: 90% and 99%); ``planted-weak`` (a smaller planted gain at a user's sizes: 60 search, 80 dev, 150
test items) measures the gate's power where it is not a certainty (no goal: a figure to compare gates by).

    python benchmarks/tuning_gain.py [--quick | --user] [--json] [--out PATH] [--sets ...] [--judges ...]
        [--trials N ...] [--testbeds NAME=N ...] [--gate on|nested] [--no-sets] [--lm SPEC [--api-base URL]]
        [--fix KEY=VALUE ...] [--panel]
        [--search-items N] [--dev-items N] [--test-items N] [--proposals N [--rounds R]] [--criterion TEXT]

``--user`` runs a user's sizes (60 search, 80 dev, 150 test items; a set with fewer labels gives fewer);
``--lm SPEC`` the LM judges on that model, ``--proposals N`` has that model write N instructions per
round (``RunSpec.proposals``; the proposer is the judge's LM), e.g. the grading model:

    python benchmarks/tuning_gain.py --user --no-testbeds --lm local:qwen1.5b --sets sts2012-msrpar stsb \\
        --judges rubric --fix reasoning=false --out benchmarks/results/tuning_gain-user-qwen1.5b.json

JSON: ``{"meta", "rows": [...], "testbeds": {NAME: {"runs", "default_shipped", "gain_detected", "refused",
"..._rate", "details"}}}``; with ``--out`` the file is rewritten after every row and testbed run
(``"complete": false`` until the last).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)
import numpy as np  # noqa: E402
import optuna  # noqa: E402
from scipy.stats import t as student_t  # noqa: E402

from judgetune.stats import (
    correlation,  # noqa: E402
    jackknife_spearman,  # noqa: E402
)
from judgetune.testing.planted import TESTBEDS, gate_testbed  # noqa: E402
from judgetune.tuning import RunSpec, tune  # noqa: E402

# the sets of the issue, each with the judges that apply (embedding: the cheap control)
GRADED = ("hybrid", "rubric", "embedding")
SETS = {**{name: ("likelihood", *GRADED) for name in ("sts2012-msrpar", "stsb")},
        **{name: ("likelihood", *GRADED, "factcheck") for name in ("summac-summeval", "summac-xsumfaith")},
        "llmbar-natural": ("likelihood", *GRADED, "pairwise"),
        "linkage-antique": ("likelihood", *GRADED),  # P(question | answer) ranks answers (its score matrix)
        **{name: GRADED for name in ("linkage-webglm", "linkage-trec-dl-nf", "ragchecker")}}
# sizes: --quick (minutes per set on 2 cores), the default (full), --user (what a user with 300-500 labels has:
# at least 60 dev items); --search-items / --dev-items / --test-items override any of them
SIZES = {"quick": (16, 40, 100), "full": (40, 150, 300), "user": (60, 80, 150)}


def figure(metrics: dict[str, Any] | None, grouped: bool) -> float | None:
    if not metrics:
        return None
    return metrics.get("spearman_per_group") if grouped else metrics.get("spearman")


def gain_row(dataset: str, judge: str, rule: str, trials: int, config, seconds: float) -> dict[str, Any]:
    m = config.metrics
    gain = m["gain"]
    grouped = gain.get("spearman_per_group") is not None
    spearman = gain.get("spearman_per_group" if grouped else "spearman") or {}
    mae = gain.get("mae") or {}
    default = m.get("default_test", m["test"])
    test = m["selection"].get("gate_result") or {}
    return {"dataset": dataset, "judge": judge, "rule": rule, "trials": trials, "test_items": gain["n"],
            "spearman_kind": "per group" if grouped else "global",
            "default_spearman": figure(default, grouped), "tuned_spearman": figure(m["test"], grouped),
            "gain": spearman.get("value"), "gain_low": spearman.get("low"), "gain_high": spearman.get("high"),
            "mae_gain": mae.get("value"), "mae_gain_low": mae.get("low"), "mae_gain_high": mae.get("high"),
            "tuned_mae": m["test"].get("mae"), "constant_mae": m["baselines"]["constant"].get("mae"),
            "mae_vs_constant": m["vs_constant"].get("mae"), "worse_than_constant": m["vs_constant"]["worse"],
            "gated": gain["default_shipped"], "calibrator": config.calibrator["kind"] if config.calibrator else None,
            "shipped_trial": m["selection"].get("chosen_trial"), "gate_winner_trial": _winner_trial(m["selection"]),
            "panel_shipped": config.judge == "panel",
            "panel_members": len(config.fitted["members"]) if config.judge == "panel" else None,
            "gate_advantage": test.get("winner_advantage"),
            "gate_low": test.get("lower_bound"), "gate_level": test.get("level"), "gate_refused": test.get("refused"),
            "gate_panel": test.get("panel"), "gate_nested": test.get("nested"),  # panel_gate's two tests (--panel)
            "warning": gain.get("warning"),
            "gain_vs_lm": m.get("gain_vs_lm"),  # a --stack run: the shipped judge against the LM judge alone
            "proposed": sum(i.get("round") is not None for i in m.get("proposals", {}).get("instructions", [])),
            "lm": config.lm["spec"] if config.lm else None,
            "lm_calls": m["study"]["lm_calls"] + m["selection"].get("lm_calls", 0), "seconds": round(seconds, 1)}


def _winner_trial(selection: dict[str, Any]) -> int | None:
    """The trial the gate tested (chosen on the search items), or None."""
    winner = (selection.get("gate_result") or {}).get("winner")
    return None if winner is None else selection["rows"][winner]["number"]


def _winner_interval(selection: dict[str, Any]) -> list[float | None] | None:
    """The gate's interval of the tested challenger's dev advantage (both ends: the test at another level can
    be read off them, the t interval being symmetric), or None."""
    winner = (selection.get("gate_result") or {}).get("winner")
    return None if winner is None else selection["rows"][winner].get("advantage_confirming_ci")


GATE_RULES = {"on": "gate", "nested": "nested"}  # --gate -> the rows' rule name


def set_rows(dataset: str, judge: str, trials: int, args: argparse.Namespace, runs: str):
    """The gate's row, then the old rule's (a generator: each row as its run ends)."""
    gated = "panel-gate" if args.panel else GATE_RULES[args.gate]  # the rule's name in benchmarks/rules.py
    for rule, gate in ((gated, args.gate), ("old", "off")):
        lm = {"lm": args.lm, "api_base": args.api_base} if args.lm else {}
        spec = RunSpec(also=[], name=f"gain-{dataset}-{judge}-{trials}-{gate}", judge=judge, data=dataset, seed=args.seed,
                       n_trials=trials, search_items=args.search_items, dev_items=args.dev_items,
                       test_items=args.test_items, fit_items=args.fit_items, gate=gate,
                       per_question=args.per_question, fixed=dict(args.fix or {}), proposals=args.proposals,
                       criterion=args.criterion, panel=args.panel and gate != "off",
                       rounds=args.rounds, stack=args.stack, **lm)
        start = time.perf_counter()
        config, _, _ = tune(spec, runs_dir=runs, progress=False, n_resamples=args.resamples)
        yield gain_row(dataset, judge, rule, trials, config, time.perf_counter() - start)


def run_testbed(name: str, seed: int, folder, *, reject=None, gate: str = "nested", panel: bool = False) -> dict:
    """One seeded run of the gate testbed ``name`` (``TESTBEDS``), its study in memory: judge.json's metrics."""
    spec, lm = gate_testbed(name, seed, folder)
    config, _, _ = tune(RunSpec(**{**spec, "gate": gate, "panel": panel}), runs_dir=folder,
                        storage=optuna.storages.InMemoryStorage(), lm=lm,
                        progress=False, reject=reject, n_resamples=200)
    return config.metrics


def testbed(name: str, runs: int, folder: str, into: dict[str, Any], save=None, gate: str = "nested",
            panel: bool = False) -> dict[str, Any]:
    """``runs`` seeded runs of the gate testbed ``name`` (``TESTBEDS``): how often the default shipped, and how
    often the gate passed with a test gain whose interval is above 0. The figures are ``into[name]``, updated
    (and ``save`` called) as each run ends."""
    out: dict[str, Any] = {"runs": 0, "settings": TESTBEDS[name], "gate": gate, "panel": panel, "default_shipped": 0,
                           "panel_shipped": 0, "gain_detected": 0, "refused": 0, "details": []}
    into[name] = out
    start = time.perf_counter()
    for seed in range(runs):
        metrics = run_testbed(name, seed, folder, gate=gate, panel=panel)
        gain, test = metrics["gain"], metrics["selection"]["gate_result"]
        shipped_panel = any(r.get("panel") and r["chosen"] for r in metrics["selection"]["rows"])
        out["runs"] += 1
        out["panel_shipped"] += shipped_panel
        out["default_shipped"] += gain["default_shipped"]
        out["gain_detected"] += (not gain["default_shipped"]) and (gain["spearman"] or {}).get("low", 0) > 0
        out["refused"] += test.get("refused") is not None
        out["details"].append({"seed": seed, "gated": gain["default_shipped"], "dev_items": test.get("items"),
                               "dev_groups": test.get("groups"), "winner_advantage": test.get("winner_advantage"),
                               "lower_bound": test.get("lower_bound"), "level": test.get("level"),
                               "winner_interval": _winner_interval(metrics["selection"]),
                               "refused": test.get("refused"), "panel_shipped": shipped_panel,
                               "gain": gain["spearman"]})
        out["default_shipped_rate"] = out["default_shipped"] / out["runs"]
        out["gain_detected_rate"] = out["gain_detected"] / out["runs"]
        out["seconds_per_run"] = round((time.perf_counter() - start) / out["runs"], 1)
        if save is not None:
            save()
    return out


# the cross-fitting simulation: a default and 4 challengers whose scores are the truth times a signal, noise
# they share and their own noise; scenarios by the challengers' signals (the default's is 0.6)
SIM_SCENARIOS = {"null": (0.6, 0.6, 0.6, 0.6), "one better": (0.6, 0.6, 0.6, 0.85),
                 "two better": (0.6, 0.6, 0.8, 0.85), "weak": (0.6, 0.6, 0.6, 0.75),
                 "a family, weak": (0.6, 0.75, 0.75, 0.75)}


def _lower_ends(pseudo: np.ndarray, estimate: float) -> dict[str, bool]:
    """Whether the t lower bound of ``estimate`` over ``pseudo`` is above 0, two-sided 95% and one-sided 95%."""
    se = pseudo.std(ddof=1) / np.sqrt(pseudo.size)
    return {level: bool(estimate - student_t.ppf(q, pseudo.size - 1) * se > 0)
            for level, q in (("two-sided 95%", 0.975), ("one-sided 95%", 0.95))}


def _holm_passes(raws: np.ndarray, gold: np.ndarray, search: np.ndarray, dev: np.ndarray, advantage) -> bool:
    """Whether any challenger ahead of the default on the search items passes a one-sided 5% t test on dev
    under Holm's step-down correction over those challengers (a candidate rule, simulated beside the gate)."""
    on_search = [correlation(r[search], gold[search]) for r in raws]
    ahead = [j for j in range(1, len(raws)) if on_search[j] > on_search[0]]
    p_values = []
    for j in ahead:
        estimate, pseudo = advantage(j, dev)
        se = pseudo.std(ddof=1) / np.sqrt(pseudo.size)
        p_values.append(float(student_t.sf(estimate / se, pseudo.size - 1)) if se > 0 else 1.0)
    return bool(p_values) and min(p_values) <= 0.05 / len(p_values)  # Holm's first step decides whether any passes


def _sim_draw(signal: tuple[float, ...], rng: np.random.Generator, n_search: int, n_dev: int) -> dict[str, bool]:
    """One draw: the gate (choose on the search items, confirm on dev) and cross-fitting within dev (choose on
    the search items and one half of dev, confirm on the other half, and the other way round; every dev item
    confirms once, the held-out advantages pooled), each at both levels."""
    n = n_search + n_dev
    gold, shared = rng.normal(size=n), rng.normal(size=n)
    raws = np.stack([gold * s + shared + rng.normal(size=n) * 0.8 for s in (0.6, *signal)])

    def chosen(idx: np.ndarray) -> int | None:
        rho = [correlation(r[idx], gold[idx]) for r in raws]
        best = int(np.argmax(rho[1:])) + 1
        return best if rho[best] > rho[0] else None

    def advantage(j: int, idx: np.ndarray) -> tuple[float, np.ndarray]:
        whole, pseudo = jackknife_spearman(np.stack([raws[0][idx], raws[j][idx]]), gold[idx])
        return float(whole[1] - whole[0]), pseudo[:, 1] - pseudo[:, 0]

    search, dev = np.arange(n_search), np.arange(n_search, n)
    out = dict.fromkeys(["gate " + k for k in ("two-sided 95%", "one-sided 95%")]
                        + ["cross-fit " + k for k in ("two-sided 95%", "one-sided 95%")]
                        + ["holm one-sided 95%"], False)
    if (j := chosen(search)) is not None:
        estimate, pseudo = advantage(j, dev)
        out.update({"gate " + k: v for k, v in _lower_ends(pseudo, estimate).items()})
    out["holm one-sided 95%"] = _holm_passes(raws, gold, search, dev, advantage)
    halves = np.array_split(rng.permutation(dev), 2)
    picks = [chosen(np.concatenate([search, halves[1 - h]])) for h in (0, 1)]
    if None not in picks:
        parts = [advantage(j, halves[h]) for h, j in enumerate(picks)]
        estimate = float(np.mean([p[0] for p in parts]))
        out.update({"cross-fit " + k: v for k, v in _lower_ends(np.concatenate([p[1] for p in parts]), estimate).items()})
    return out


def crossfit_simulation(draws: int, *, n_search: int = 60, n_dev: int = 80, seed: int = 0) -> dict[str, Any]:
    """How often each rule ships a challenger (a pass) in ``draws`` simulated runs of each scenario."""
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"draws": draws, "n_search": n_search, "n_dev": n_dev, "scenarios": {}}
    for name, signal in SIM_SCENARIOS.items():
        runs = [_sim_draw(signal, rng, n_search, n_dev) for _ in range(draws)]
        out["scenarios"][name] = {"signals": signal, **{k: sum(r[k] for r in runs) / draws for k in runs[0]}}
    return out


def meta(args: argparse.Namespace) -> dict[str, Any]:
    info = _results.meta(sys.argv)
    return {**info, "machine": f"{info['machine']} (shared: timings inflated)", "quick": args.quick, "user": args.user,
            "lm": args.lm, "sizes": {"search": args.search_items, "dev": args.dev_items, "test": args.test_items},
            "per_question": args.per_question, "proposals": args.proposals, "rounds": args.rounds,
            "criterion": args.criterion, "nested_folds": args.nested_folds, "panel": args.panel,
            "stack": args.stack}


def _fixed(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _gate_testbeds(text: str) -> tuple[str, int]:
    name, _, runs = text.partition("=")
    if name not in TESTBEDS or not runs.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=N with NAME one of {', '.join(TESTBEDS)}")
    return name, int(runs)


def _use_nested_folds(folds: int) -> None:
    """Make tune's nested gate use ``folds`` folds in this process (the least units it needs stay the default's)."""
    import functools

    from judgetune.stats import nested_gate
    from judgetune.tuning import _selection

    _selection.nested_gate = functools.partial(nested_gate, folds=folds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (minutes per set and judge on 2 cores)")
    parser.add_argument("--user", action="store_true",
                        help="a user's sizes: 60 search, 80 dev, 150 test items (fewer where the set has fewer)")
    parser.add_argument("--search-items", type=int)
    parser.add_argument("--dev-items", type=int)
    parser.add_argument("--test-items", type=int)
    parser.add_argument("--lm", help="the LM spec of the LM judges (default: RunSpec's, local:smollm2)")
    parser.add_argument("--api-base", help="the server of an --lm that needs one")
    parser.add_argument("--fix", nargs="+", type=_fixed, metavar="KEY=VALUE",
                        help="fixed judge settings of every run, as `judgetune tune --fix` (e.g. reasoning=false)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("--out", type=Path, help="write the JSON here (rewritten after every row)")
    parser.add_argument("--runs-dir", type=Path, help="keep the runs' folders here (judge.json, the test predictions; "
                        "default: a temporary folder, removed at the end)")
    parser.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS))
    parser.add_argument("--judges", nargs="+", help="only these judges (of those that apply to each set)")
    parser.add_argument("--trials", type=int, nargs="+", help="trial budgets (default: 4 quick, 12 full)")
    parser.add_argument("--testbeds", nargs="+", metavar="NAME=N", type=_gate_testbeds,
                        default=[("null", 200), ("null-grouped", 200), ("planted", 100), ("planted-150", 100),
                                 ("planted-weak", 100)],
                        help=f"seeded runs per gate testbed, of {', '.join(TESTBEDS)} (N=0: skip)")
    parser.add_argument("--no-sets", action="store_true", help="run the testbeds only")
    parser.add_argument("--crossfit-sim", type=int, default=0, metavar="DRAWS",
                        help="simulate the gate against cross-fitting within dev (DRAWS runs per scenario)")
    parser.add_argument("--no-testbeds", action="store_true", help="run the sets only")
    parser.add_argument("--proposals", type=int, default=0,
                        help="instructions the judge's LM proposes per round (default 0: no proposals)")
    parser.add_argument("--rounds", type=int, default=2, help="proposal rounds (with --proposals)")
    parser.add_argument("--criterion", help="the user's criterion (`judgetune tune --criterion`): the default judge's "
                        "instruction and what proposals are written from")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gate", choices=list(GATE_RULES), default="nested",
                        help="the gate of the gated runs and the testbeds (nested, the default as in tune: every "
                             "label; on: the dev gate)")
    parser.add_argument("--nested-folds", type=int, default=None,
                        help="with --gate nested: folds of the nested gate instead of judgetune.stats.FOLDS (a benchmark "
                             "knob: tune's own fold count is not a setting)")
    parser.add_argument("--fit-items", type=int, default=None)
    parser.add_argument("--panel", action="store_true", help="the gated runs and the testbeds with tune --panel")
    parser.add_argument("--stack", action="store_true", help="hybrid runs with tune --stack (the LM's features searched "
                        "beside the signals; the signal-only hybrid the default)")
    parser.add_argument("--per-question", type=int, default=None,
                        help="answers kept per question in every split (grouped sets: more questions, fewer answers each)")
    args = parser.parse_args()
    if args.nested_folds:
        _use_nested_folds(args.nested_folds)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    args.trials = args.trials or [4 if args.quick else 12]
    sizes = SIZES["quick" if args.quick else "user" if args.user else "full"]
    args.search_items, args.dev_items, args.test_items = (given if given is not None else size for given, size in zip(
        (args.search_items, args.dev_items, args.test_items), sizes))
    args.resamples = 200 if args.quick else 1000
    if args.quick and args.fit_items is None:
        args.fit_items = 400  # the hybrid's fit and demo pool: 400 training items (seeded) keep a quick run quick
    result: dict[str, Any] = {"meta": meta(args), "complete": False, "rows": [], "skipped": [], "testbeds": {}}

    def save() -> None:
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")

    if args.crossfit_sim:
        result["simulation"] = crossfit_simulation(args.crossfit_sim, n_search=args.search_items, n_dev=args.dev_items,
                                                   seed=args.seed)
        print(f"simulation: {json.dumps(result['simulation'])}", file=sys.stderr, flush=True)
        save()
    kept = contextlib.nullcontext(str(args.runs_dir)) if args.runs_dir else tempfile.TemporaryDirectory()
    with kept as folder:
        for name, runs in [] if args.no_testbeds else args.testbeds:
            if runs:
                bed = testbed(name, runs, folder, result["testbeds"], save, gate=args.gate, panel=args.panel)
                print(f"testbed {name}: {json.dumps({k: v for k, v in bed.items() if k != 'details'})}",
                      file=sys.stderr, flush=True)
                save()
        for dataset in [] if args.no_sets else args.sets:
            for judge in SETS[dataset]:
                if args.judges and judge not in args.judges:
                    continue
                for trials in args.trials:
                    try:
                        for row in set_rows(dataset, judge, trials, args, folder):
                            result["rows"].append(row)
                            print(json.dumps(row), file=sys.stderr, flush=True)
                            save()
                    except Exception as exc:  # a judge that does not fit this data: say so, keep the others
                        result["skipped"].append({"dataset": dataset, "judge": judge, "trials": trials,
                                                  "reason": f"{type(exc).__name__}: {exc}"[:500]})
                        print(f"skipped {dataset} {judge}: {exc}", file=sys.stderr, flush=True)
                        save()
    gated = [r for r in result["rows"] if r["rule"] in GATE_RULES.values()]
    gains = [r["gain"] for r in gated if r["gain"] is not None]
    result["summary"] = {
        "rows": len(gated), "significantly_worse": [f"{r['dataset']}/{r['judge']}/{r['trials']}" for r in gated
                                                    if r["gain_high"] is not None and r["gain_high"] < 0],
        "significantly_better": [f"{r['dataset']}/{r['judge']}/{r['trials']}" for r in gated
                                 if r["gain_low"] is not None and r["gain_low"] > 0],
        "mean_gain": sum(gains) / len(gains) if gains else None,
        "worse_than_constant": [f"{r['dataset']}/{r['judge']}/{r['trials']}" for r in gated if r["worse_than_constant"]]}
    result["complete"] = True
    save()
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for r in result["rows"]:
            print(r)
        print(result["testbeds"] and {k: {x: y for x, y in v.items() if x != "details"}
                                      for k, v in result["testbeds"].items()})
        print(result["summary"])


if __name__ == "__main__":
    main()
