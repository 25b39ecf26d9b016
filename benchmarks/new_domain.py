"""A new domain from zero labels: ``judgetune pick`` against random picks, and the checklist
judge beside the rubric and hybrid judges on the same labelled items.

Simulated labelling on catalog sets whose labels are hidden: per set, the labelled data is split by
group (seeded) into a pool and a fixed test set (``--test-items``). For each seed, picker and budget
(``--budgets``), the picker chooses items from the pool with their labels hidden; only those items'
labels are revealed. ``pick`` runs ``judgetune.picking.pick_examples`` in ``--rounds`` rounds (the
first covers the embedding judge's score strata and the groups, each later round adds the items where
the calibrator is least sure given the labels revealed so far); ``random`` draws the same number
uniformly (seeded).

"Tune" on the revealed labels (``--trials 0``, the default) is what the labels buy a judge at its data
defaults: a fitted judge (hybrid, checklist) is fitted on them, and a calibrator
(``judgetune.calibration.fit_calibrator``, group-wise CV choosing its form) maps raw scores onto the human
scale; a fitted judge's calibrator learns from out-of-fold raw scores (5 group folds), never from scores of
items it was fitted on. The judge is then scored on the test set: Spearman of the raw score, MAE of the
calibrated one. With ``--trials N`` the tuner itself runs on the revealed labels (``judgetune.tuning.tune``:
its own train / dev / test split of them, N trials, the gate; ``--proposer SPEC`` adds proposed instructions
or checklists), and its frozen judge is scored on the test set.

Rows (one per set, judge, picker, budget and seed): ``{set, judge, lm, picker, budget, seed, n_test, spearman,
mae, mae_constant, seconds}`` (Spearman None: the judge gave every test item one score, e.g. a monotone
combiner whose weights all went to zero); summary rows average over the seeds with a 95% t-interval across
seeds (``flat_runs`` counts the seeds without a Spearman), and goal rows give ``pick`` at ``--goal-budget``
(default 50) labels minus ``random`` at 100, paired by seed, per set and averaged over the sets, with 95%
t-intervals across seeds. With ``--out`` the file is rewritten after every row (``"complete": false`` until
the end); ``--summarize FILE`` recomputes the summaries of a result file from its rows.

    python benchmarks/new_domain.py --json [--sets msrpar stsb summac llmbar] [--judges embedding hybrid
        checklist rubric] [--lm local:smollm2] [--budgets 25 50 100 200] [--seeds 3] [--test-items 100]
        [--pool-items 600] [--rounds 2] [--out benchmarks/results/new_domain-signals.json]

Judges ``checklist`` and ``rubric`` need ``--lm`` (on LLMBar's pairwise items the ``pairwise`` judge
stands for the rubric); each of their items costs one LM read per question (checklist) or one (rubric),
cached on disk, so later seeds and budgets reuse the answers of items picked before.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as scistats

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_result  # noqa: E402

from judgetune import datasets  # noqa: E402
from judgetune.calibration import fit_calibrator  # noqa: E402
from judgetune.datasets import (  # noqa: E402
    Example,
    group_folds,  # noqa: E402
    limit_by_group,
    split_examples,
)
from judgetune.judges import SIGNALS, judge_class, make_judge  # noqa: E402
from judgetune.picking import pick_examples  # noqa: E402
from judgetune.stats import correlation  # noqa: E402

SETS = {"msrpar": "sts2012-msrpar", "stsb": "stsb", "summac": "summac-xsumfaith", "llmbar": "llmbar-natural"}
JUDGES = ("embedding", "hybrid", "checklist", "rubric")
PICKERS = ("pick", "random")
MINILM_ONLY = {f"use_{name}": False for name in SIGNALS if "mpnet" in name}


def split_pool(examples: list[Example], *, test_items: int, pool_items: int | None) -> tuple[list, list]:
    """(pool, test): the test split's first ``test_items`` (by group, seeded 0) and the rest as the pool."""
    parts = split_examples(examples, seed=0)
    test = limit_by_group(parts["test"], test_items, seed=0)
    pool = limit_by_group([*parts["train"], *parts["dev"]], pool_items, seed=0)
    return pool, test


def hidden(examples: list[Example]) -> list[Example]:
    """The items as a user has them before labelling: no label, no preference."""
    from dataclasses import replace

    return [replace(e, label=None, preference=None) for e in examples]


def picked(pool: list[Example], picker: str, budget: int, *, seed: int, rounds: int) -> list[Example]:
    """The labelled items a picker gets for ``budget`` labels (labels revealed only for those)."""
    if picker == "random":
        return random.Random(seed).sample(pool, budget)
    unlabeled, by_id = hidden(pool), {e.id: e for e in pool}
    sizes = [budget // rounds + (1 if r < budget % rounds else 0) for r in range(rounds)]
    labeled: list[Example] = []
    for r, size in enumerate(s for s in sizes if s):
        picks = pick_examples(unlabeled, size, labeled=labeled, judge="embedding", seed=seed * 100 + r)
        labeled += [by_id[i] for i in picks.ids]  # the labels of this round's picks are revealed
    return labeled


def kind_for(judge: str, examples: list[Example]) -> str:
    pairwise = any(e.answer_b is not None for e in examples)
    return "pairwise" if judge == "rubric" and pairwise else judge


def params_for(kind: str) -> dict[str, Any]:
    return MINILM_ONLY if kind == "hybrid" else {}


def raw_scores(judge, examples: list[Example]) -> list[float | None]:
    return [v.score if v.parsed else None for v in judge.judge_all(examples)]


def out_of_fold(kind: str, lm, labeled: list[Example], label_range, *, seed: int) -> list[float | None]:
    """Raw scores of the labelled items from judges fitted without them (5 group folds)."""
    splitter, keys = group_folds(len(labeled), [e.group_key for e in labeled], folds=5, seed=seed)
    out: list[float | None] = [None] * len(labeled)
    for fit_idx, held in splitter.split(np.zeros(len(labeled)), groups=keys):
        judge = make_judge(kind, lm, train=[labeled[i] for i in fit_idx], label_range=label_range,
                           params=params_for(kind), seed=seed)
        for i, score in zip(held, raw_scores(judge, [labeled[i] for i in held])):
            out[i] = score
    return out


def evaluate(kind: str, lm, labeled: list[Example], test: list[Example], label_range, *, seed: int) -> dict:
    """Fit (if the kind fits) and calibrate on ``labeled``; Spearman and MAE on ``test``."""
    judge = make_judge(kind, lm, train=labeled, label_range=label_range, params=params_for(kind), seed=seed)
    cal_raw = out_of_fold(kind, lm, labeled, label_range, seed=seed) if judge_class(kind).fits \
        else raw_scores(judge, labeled)
    pairs = [(r, e.judgment, e.group_key) for r, e in zip(cal_raw, labeled) if r is not None]
    calibrator, _ = fit_calibrator([p[0] for p in pairs], [p[1] for p in pairs], label_range=label_range,
                                   groups=[p[2] for p in pairs], seed=seed)
    test_raw = raw_scores(judge, test)
    kept = [(r, e.judgment) for r, e in zip(test_raw, test) if r is not None]
    raw = np.asarray([k[0] for k in kept], dtype=float)
    gold = np.asarray([k[1] for k in kept], dtype=float)
    calibrated = calibrator.predict(raw)
    median = float(np.median([e.judgment for e in labeled]))
    return {"n_test": len(kept), "failed_test": len(test) - len(kept), "spearman": correlation(raw, gold),
            "mae": float(np.mean(np.abs(calibrated - gold))), "mae_constant": float(np.mean(np.abs(median - gold))),
            "calibrator": calibrator.to_dict()["kind"]}


def tuned(kind: str, lm, labeled: list[Example], test: list[Example], label_range, *, seed: int, trials: int,
          proposer: str | None) -> dict:
    """``judgetune.tuning.tune`` on the labelled items alone (its own train / dev / test split of them, the
    tuner choosing the settings, for the checklist its questions), then the frozen judge on ``test``."""
    import tempfile
    from dataclasses import replace

    from judgetune.datasets import write_examples
    from judgetune.tuning import RunSpec, tune

    with tempfile.TemporaryDirectory(prefix="new-domain-") as folder:
        data = Path(folder) / "labeled.jsonl"
        write_examples(data, [replace(e, meta={}) for e in labeled])  # no catalog split in meta: tune splits them
        train = int(0.6 * len(labeled))
        spec = RunSpec(also=[], name="run", judge=kind, data=str(data),
                       lm=str(lm.spec) if lm is not None else "local:smollm2", seed=seed, n_trials=trials,
                       search_items=max(4, train // 2), scale=list(label_range),
                       fixed=params_for(kind), proposer=proposer, proposals=2 if proposer else 0)
        config, _, _ = tune(spec, runs_dir=folder, lm=lm, progress=False, n_resamples=200)
    judge = config.build_judge(lm)
    verdicts = judge.judge_all(test)
    calibrated = config.calibrated(verdicts, judge, test)
    kept = [(v.score, c, e.judgment) for v, c, e in zip(verdicts, calibrated, test) if c is not None]
    raw, cal, gold = (np.asarray([k[i] for k in kept], dtype=float) for i in range(3))
    median = float(np.median([e.judgment for e in labeled]))
    return {"n_test": len(kept), "failed_test": len(test) - len(kept), "spearman": correlation(raw, gold),
            "mae": float(np.mean(np.abs(cal - gold))), "mae_constant": float(np.mean(np.abs(median - gold))),
            "calibrator": (config.calibrator or {}).get("kind"), "tuned": {"params": config.params,
                                                                          "instruction": config.instruction}}


def mean_interval(values: list[float]) -> dict[str, float | None]:
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "low": None, "high": None, "n": 0}
    mean = float(np.mean(values))
    if len(values) < 2:
        return {"mean": mean, "low": None, "high": None, "n": 1}
    half = float(scistats.t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / np.sqrt(len(values)))
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": len(values)}


def summaries(rows: list[dict], goal_budget: int) -> list[dict]:
    """Per (set, judge, picker, budget): the mean over seeds with its 95% t-interval. Then the goal rows, per
    judge and set and averaged over the sets: ``pick`` at ``goal_budget`` labels minus ``random`` at 100,
    paired by seed (Spearman: higher is better; MAE: lower is better), with a 95% t-interval across seeds."""
    scored = [r for r in rows if "mae" in r]  # a judge that gave every test item one score has Spearman None
    keys = sorted({(r["set"], r["judge"], r["picker"], r["budget"]) for r in scored})
    out = []
    for s, j, p, b in keys:
        mine = [r for r in scored if (r["set"], r["judge"], r["picker"], r["budget"]) == (s, j, p, b)]
        out.append({"summary": "mean over seeds", "set": s, "judge": j, "picker": p, "budget": b,
                    "spearman": mean_interval([r["spearman"] for r in mine]),
                    "mae": mean_interval([r["mae"] for r in mine]),
                    "flat_runs": sum(r["spearman"] is None for r in mine)})
    by = {(r["set"], r["judge"], r["picker"], r["budget"], r["seed"]): r for r in scored}
    for j in sorted({k[1] for k in keys}):
        per_seed: dict[int, list[tuple[float, float]]] = {}
        for s in sorted({k[0] for k in keys}):
            diffs = []
            for seed in sorted({r["seed"] for r in scored}):
                ours, ref = by.get((s, j, "pick", goal_budget, seed)), by.get((s, j, "random", 100, seed))
                if ours and ref and ours["spearman"] is not None and ref["spearman"] is not None:
                    diffs.append((ours["spearman"] - ref["spearman"], ours["mae"] - ref["mae"]))
                    per_seed.setdefault(seed, []).append(diffs[-1])
            if diffs:
                out.append({"summary": f"goal: pick@{goal_budget} minus random@100", "set": s, "judge": j,
                            "spearman": mean_interval([d[0] for d in diffs]), "mae": mean_interval([d[1] for d in diffs])})
        complete = [v for v in per_seed.values() if len(v) == max(len(x) for x in per_seed.values())] if per_seed else []
        if complete:
            out.append({"summary": f"goal: pick@{goal_budget} minus random@100, averaged over the sets", "set": "all",
                        "judge": j, "spearman": mean_interval([float(np.mean([d[0] for d in v])) for v in complete]),
                        "mae": mean_interval([float(np.mean([d[1] for d in v])) for v in complete])})
    return out


def resummarize(path: Path, goal_budget: int) -> None:
    """Recompute the summaries of a result file from its rows (its meta and rows unchanged)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    data["summaries"] = summaries(data["rows"], goal_budget)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="one JSON row per line")
    parser.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    parser.add_argument("--judges", nargs="+", choices=JUDGES, default=["embedding", "hybrid"])
    parser.add_argument("--pickers", nargs="+", choices=PICKERS, default=list(PICKERS))
    parser.add_argument("--lm", default="local:smollm2", help="LM of the checklist and rubric judges")
    parser.add_argument("--budgets", nargs="+", type=int, default=[25, 50, 100, 200])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (picks, random draws, folds)")
    parser.add_argument("--test-items", type=int, default=100)
    parser.add_argument("--pool-items", type=int, default=600, help="pool items picks are drawn from (seeded)")
    parser.add_argument("--rounds", type=int, default=2, help="pick rounds per budget (the first covers, later narrow)")
    parser.add_argument("--goal-budget", type=int, default=50)
    parser.add_argument("--trials", type=int, default=0, help="0: fit and calibrate at the data defaults; N: run "
                        "the tuner (N trials) on the labelled items, then test its frozen judge")
    parser.add_argument("--proposer", help="with --trials: an LM spec that proposes instructions / checklists")
    parser.add_argument("--out", type=Path, help="write every row to this JSON file (rewritten after each row)")
    parser.add_argument("--summarize", type=Path, metavar="FILE", help="only recompute the summaries of a result file")
    args = parser.parse_args()
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.summarize:
        resummarize(args.summarize, args.goal_budget)
        return
    lm = None
    if {"checklist", "rubric"} & set(args.judges):
        from judgetune.lm import load_lm

        lm = load_lm(args.lm)
    rows: list[dict] = []

    def emit(row: dict, *, complete: bool = False) -> None:
        if row:
            rows.append(row)
            print(json.dumps(row) if args.json else row, flush=True)
        if args.out:
            write_result(args.out, {"complete": complete, "lm": args.lm, "rows": rows,
                                    "summaries": summaries(rows, args.goal_budget)}, sys.argv)

    for name in args.sets:
        examples, label_range = datasets.load_data(SETS[name])
        examples = [e for e in examples if e.judgment is not None]
        pool, test = split_pool(examples, test_items=args.test_items, pool_items=args.pool_items)
        for seed in range(args.seeds):
            for budget in args.budgets:
                if budget > len(pool):
                    emit({"set": name, "budget": budget, "skipped": f"the pool holds {len(pool)} items"})
                    continue
                for picker in args.pickers:
                    start = time.perf_counter()
                    labeled = picked(pool, picker, budget, seed=seed, rounds=args.rounds)
                    pick_seconds = time.perf_counter() - start
                    for judge in args.judges:
                        kind = kind_for(judge, examples)
                        start = time.perf_counter()
                        base = {"set": name, "judge": kind, "lm": args.lm if judge_class(kind).needs_lm_with(
                            params_for(kind)) else None, "picker": picker, "budget": budget, "seed": seed}
                        try:
                            judge_lm = lm if judge_class(kind).needs_lm else None
                            result = (tuned(kind, judge_lm, labeled, test, label_range, seed=seed, trials=args.trials,
                                            proposer=args.proposer) if args.trials else
                                      evaluate(kind, judge_lm, labeled, test, label_range, seed=seed))
                        except Exception as exc:  # noqa: BLE001 - a judge that cannot run here: said in its row
                            emit({**base, "skipped": f"{type(exc).__name__}: {exc}"})
                            continue
                        emit({**base, **result, "pick_seconds": round(pick_seconds, 1),
                              "seconds": round(time.perf_counter() - start, 1)})
    for row in summaries(rows, args.goal_budget):
        print(json.dumps(row) if args.json else row, flush=True)
    emit({}, complete=True)
    if lm is not None:
        lm.close()


if __name__ == "__main__":
    main()
