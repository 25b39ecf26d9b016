"""Prompt optimizers against each other: judgetune's tuner (TPE over an instruction pool
that a proposer LM grows in rounds, demo draws, dev re-scoring of the front), random search (the
same pipeline with Optuna's RandomSampler) at the tuner's LM-call budget, and DSPy's
BootstrapFewShotWithRandomSearch, MIPROv2 and GEPA at about the same budget, with the same judge LM
as proposer/reflection LM. Trivial baselines (constant training median) and the untuned judge beside them.

- ``planted``: the planted testbed (judgetune.testing.planted; a scripted LM whose distributions
  agree with the labels only for one instruction, demo subset and k) on a grid of 8 instructions x 4
  demo draws at k=3, with ``exhaustive`` (every grid point fully scored). Its figures show whether a
  search finds what is there, not how good a judge is.
- ``sts2012-msrpar`` (rubric judge) and ``linkage-trec-dl-nf`` (LINKAGE) with the embedded SmolLM2-135M.

Figures are on held-out test items (calibrated on dev for the judgetune pipeline) with 95%
bootstrap intervals; ``lm_calls`` are answers actually computed (search, proposals, dev
re-scoring; not the test scoring); a DSPy optimizer that crashes gets a row with its error.

    python benchmarks/optimizers.py [--quick] [--json] [--only DATASET] [--methods M,...]
        [--dspy-optimizers NAME,...] [--dspy-seconds N] [--dspy-budget CALLS]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import jsonlines  # noqa: E402
import optuna  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tuning import untuned  # noqa: E402

from judgetune.datasets import write_examples  # noqa: E402
from judgetune.evaluation import agreement  # noqa: E402
from judgetune.judges import pick_demos  # noqa: E402
from judgetune.lm import ResponseCache, load_lm  # noqa: E402
from judgetune.stats import constant_baseline  # noqa: E402
from judgetune.testing.planted import DECOYS, PLANTED_INSTRUCTION, PlantedLM, planted_examples  # noqa: E402
from judgetune.tuning import RunSpec, finish, open_study, prepare_splits, run_trials, total_calls, tune  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)
CRITERIA = {
    "sts2012-msrpar": "How close in meaning the two sentences are: 0 means they are unrelated, 5 means they say "
                      "exactly the same thing; differences in wording alone do not lower the score.",
    "linkage-trec-dl-nf": "How well the passage answers the question: the best passages answer it fully and "
                          "correctly, the worst do not address it at all.",
}
DSPY_OPTIMIZERS = ("BootstrapFewShotWithRandomSearch", "MIPROv2", "GEPA")
# The output is text, and the metric reads the first number in it: with a ``float`` field, DSPy's parser raises on
# every answer that is no bare number (all of the embedded model's zero-shot answers), so the metric never sees
# one and GEPA has no trace to reflect on (measured: "No valid predictions found for any module", no proposal).
SIGNATURES = {"sts2012-msrpar": ("reference, answer -> score: str",
                                 "How similar in meaning are the two sentences? Score from 0 (unrelated) to 5 (same)."),
              "linkage-trec-dl-nf": ("question, answer -> relevance: str",
                                     "How well does the passage answer the question? 0 (not relevant) to 3 (perfect).")}


def row(dataset: str, method: str, metrics: dict | None, calls: int | None, seconds: float, **extra) -> dict:
    """One result row; printed to stderr at once, so an interrupted run keeps its finished rows."""
    metrics = metrics or {}
    key = "spearman_per_group" if metrics.get("spearman_per_group") is not None else "spearman"
    result = {"dataset": dataset, "method": method, "spearman": metrics.get(key), "spearman_ci": metrics.get(f"{key}_ci"),
            "mae": metrics.get("mae"), "mae_ci": metrics.get("mae_ci"), "n": metrics.get("n"),
            "parse_failures": metrics.get("parse_failures"), "lm_calls": calls, "seconds": round(seconds, 1), **extra}
    print("  " + json.dumps(result), file=sys.stderr)
    return result


# ---------------------------------------------------------------- planted testbed
def planted_rows(tmp: Path, seeds: list[int]) -> list[dict]:
    path = tmp / "planted.jsonl"
    write_examples(path, planted_examples(160))
    grid = [{"instruction": i, "demo_seed": d} for i, d in itertools.product(range(8), range(4))]
    rows = []
    for seed in seeds:
        def run(name: str, *, sampler: str, n_trials: int, max_calls: int | None = None, chunk: int = 6,
                enqueue=(), proposals: int = 0, seed: int = seed):
            spec = RunSpec(also=[], name=f"{name}{seed}", judge="rubric", data=str(path), seed=seed, n_trials=n_trials,
                           sampler=sampler, search_items=30, chunk=chunk, dev_items=30, test_items=40,
                           max_calls=max_calls, fixed={"reasoning": False, "scoring": "expected", "scale": "0-5", "k": 3},
                           instructions=[*DECOYS, PLANTED_INSTRUCTION], demo_draws=4, proposals=proposals)
            splits = prepare_splits(spec)
            lm = PlantedLM.for_examples([*splits.train, *splits.dev, *splits.test],
                                        pick_demos(splits.demo_pool, 3, seed=2), 3)
            study = open_study(spec, f"sqlite:///{tmp / (spec.name + '.db')}")
            for params in enqueue:
                study.enqueue_trial(params)
            start = time.perf_counter()
            run_trials(study, spec, lm, splits, proposer=lm)
            search_calls = total_calls(study)
            (tmp / spec.name).mkdir()
            config = finish(spec, study, splits, lm, tmp / spec.name, n_resamples=300)
            seconds = time.perf_counter() - start
            calls = search_calls + config.metrics["selection"]["lm_calls"]
            best = max(t.values[1] for t in study.best_trials)
            return row("planted", name, config.metrics["test"], calls, seconds, seed=seed, search_spearman=best,
                       trials=len(study.trials))

        exhaustive = run("exhaustive", sampler="random", n_trials=len(grid), chunk=30, enqueue=grid)
        budget = int(0.3 * (exhaustive["lm_calls"]))
        rows += [exhaustive, run("judgetune", sampler="tpe", n_trials=500, max_calls=budget),
                 run("random", sampler="random", n_trials=500, max_calls=budget)]
        for method in ("DSPy BootstrapFewShotWithRandomSearch", "DSPy MIPROv2", "DSPy GEPA"):
            rows.append(row("planted", method, None, None, 0.0, seed=seed,
                            note="not run: the planted LM scripts label distributions; DSPy optimizers need an LM "
                                 "that writes text"))
    return rows


# ---------------------------------------------------------------- real data, embedded model
class TimeCap(BaseException):
    """Raised by a capped DSPy LM once its time is up; a BaseException so DSPy's error counting cannot swallow it."""


def cap_time(dspy_lm, seconds: float) -> dict:
    """Make every call of ``dspy_lm`` raise ``TimeCap`` once ``seconds`` have passed; returns the cap's state
    (set ``state["deadline"]`` to ``inf`` to lift it, e.g. for the test scoring)."""
    state = {"deadline": time.perf_counter() + seconds, "calls": 0}
    forward = dspy_lm.forward

    def capped(*args, **kwargs):
        if time.perf_counter() > state["deadline"]:
            raise TimeCap(f"stopped at the time cap of {seconds:.0f} s after {state['calls']} LM calls")
        state["calls"] += 1
        return forward(*args, **kwargs)

    dspy_lm.forward = capped
    return state


def dspy_optimizer(name: str, dataset: str, splits, budget: int, cache_dir: Path, cap_seconds: float):
    """MIPROv2 or GEPA on a plain dspy.Predict program with the embedded model as task, prompt and reflection LM."""
    import re

    import dspy

    from judgetune.lm._adapter import PrefillChatAdapter

    signature, instruction = SIGNATURES[dataset]
    output = signature.split("->")[1].split(":")[0].strip()
    inputs = [f.strip() for f in signature.split("->")[0].split(",")]
    lm = load_lm("local:smollm2", cache=ResponseCache(cache_dir))
    cap = cap_time(lm.dspy_lm, cap_seconds)
    span = splits.label_range[1] - splits.label_range[0]

    def as_dspy(e):
        values = {"reference": e.references[0].text if e.references else "", "question": e.question or "",
                  "answer": e.answer}
        return dspy.Example(**{k: values[k] for k in inputs}, **{output: f"{e.judgment:g}"}).with_inputs(*inputs)

    def number(prediction) -> float | None:
        found = re.findall(r"-?\d+(?:\.\d+)?", str(getattr(prediction, output, "")))
        return min(max(float(found[0]), splits.label_range[0]), splits.label_range[1]) if found else None

    def metric(example, prediction, trace=None, pred_name=None, pred_trace=None):
        value = number(prediction)
        score = 0.0 if value is None else 1 - abs(value - float(getattr(example, output))) / span
        if name == "GEPA":  # GEPA asks with pred_name for the feedback its reflection reads: give it every time
            human = getattr(example, output)
            feedback = (f"no number in the answer; the human score is {human}" if value is None
                        else f"the human score is {human}, the answer gave {value:g}")
            return dspy.Prediction(score=score, feedback=feedback)
        return score

    train = [as_dspy(e) for e in splits.search]
    program = dspy.Predict(dspy.Signature(signature, instruction))
    failures: list[str] = []  # why test items gave no number (the first few go into the row)
    instructions: list[str] = []  # the compiled program's instructions
    start = time.perf_counter()
    try:
        with dspy.context(lm=lm.dspy_lm, adapter=PrefillChatAdapter()):
            if name == "BootstrapFewShotWithRandomSearch":
                optimizer = dspy.BootstrapFewShotWithRandomSearch(
                    metric=metric, max_bootstrapped_demos=4, max_labeled_demos=4, num_threads=1, max_errors=10**6,
                    num_candidate_programs=max(1, budget // max(1, len(train)) - 3))  # parse failures must not abort it
                compiled = optimizer.compile(program, trainset=train, valset=train)
            elif name == "MIPROv2":
                optimizer = dspy.MIPROv2(metric=metric, prompt_model=lm.dspy_lm, task_model=lm.dspy_lm, auto=None,
                                         num_candidates=3, max_bootstrapped_demos=2, max_labeled_demos=2, num_threads=1,
                                         max_errors=10**6, verbose=False)
                compiled = optimizer.compile(program, trainset=train, valset=train,
                                             num_trials=max(2, budget // max(1, len(train))),
                                             minibatch=False, requires_permission_to_run=False)
            else:
                optimizer = dspy.GEPA(metric=metric, max_metric_calls=budget, reflection_lm=lm.dspy_lm, num_threads=1,
                                      reflection_minibatch_size=3, use_merge=False)
                compiled = optimizer.compile(program, trainset=train, valset=train)
            cap["deadline"], cap["search_calls"] = float("inf"), cap["calls"]  # test scoring: not in the budget
            scores = []
            for e in splits.test:
                try:
                    prediction = compiled(**as_dspy(e).inputs())
                    scores.append(number(prediction))
                    if scores[-1] is None:
                        failures.append(f"no number in {str(getattr(prediction, output, ''))[:80]!r}")
                except Exception as err:  # noqa: BLE001 - a test item that fails to produce a number is a counted failure
                    scores.append(None)
                    failures.append(f"{type(err).__name__}: {str(err)[:160]}")
            instructions = [p.signature.instructions for p in compiled.predictors()]
        metrics, error = agreement(scores, splits.test, splits.label_range), None
    except TimeCap as err:
        metrics, error = None, f"TimeCap: {err}"
    except Exception as err:  # noqa: BLE001 - the row reports the optimizer's crash
        metrics = None
        error = f"{type(err).__name__}: {str(err)[:300]}"
        print(traceback.format_exc()[-1500:], file=sys.stderr)
    seconds = time.perf_counter() - start
    if metrics is not None:  # a program that answers one number for every item has no ranking to offer
        metrics["distinct_predictions"] = len({s for s in scores if s is not None})
    lm.close()
    if metrics is not None:
        metrics["test_failures"] = sorted(set(failures))[:3]
        metrics["instructions"] = [text[:300] for text in instructions]
    return metrics, cap.get("search_calls", cap["calls"]), seconds, error


def tuned_row(dataset: str, method: str, spec: RunSpec, tmp: Path) -> tuple[dict, dict | None]:
    """Tune ``spec`` and return its row (with the error if the run crashed) and its metrics."""
    os.environ["JUDGETUNE_CACHE_DIR"] = str(tmp / spec.name)
    start = time.perf_counter()
    try:
        config, run_dir, _ = tune(spec, runs_dir=tmp / "runs")
    except Exception as err:  # noqa: BLE001 - the row reports the crash
        print(traceback.format_exc()[-1500:], file=sys.stderr)
        return row(dataset, method, None, None, time.perf_counter() - start,
                   error=f"{type(err).__name__}: {str(err)[:300]}"), None
    m = config.metrics
    extra = {}
    if m.get("proposals"):
        extra = {"proposals_accepted": sum(len(r["accepted"]) for r in m["proposals"]["rounds"]),
                 "proposals_refused": m["proposals"]["refused_counts"]}
    # the shipped (calibrated) scores can lose the raw ranking, e.g. an isotonic calibrator fitted flat on a few dev
    # items: the row shows the calibrator, how many distinct test scores it gave, and the raw scores' Spearman
    with jsonlines.open(run_dir / "test_predictions.jsonl") as lines:
        predictions = {p["id"]: p for p in lines}
    splits = prepare_splits(spec)
    test = splits.test
    raw = agreement([predictions[e.id]["raw_score"] for e in test], test, splits.label_range, n_resamples=10)
    extra.update(calibrator=(config.calibrator or {}).get("kind"), calibrator_cv_mae=m.get("calibrator_cv_mae"),
                 distinct_test_scores=len({predictions[e.id]["score"] for e in test}),
                 raw_spearman=raw.get("spearman_per_group", raw.get("spearman")))
    return row(dataset, method, m["test"], m["study"]["lm_calls"] + m["selection"]["lm_calls"],
               time.perf_counter() - start, chosen=config.params, **extra), m


def real_rows(dataset: str, tmp: Path, quick: bool, cap_seconds: float, methods: set[str] | None,
              optimizers: list[str] | None = None, dspy_budget: int | None = None) -> list[dict]:
    """Rows of one catalog dataset; ``methods`` (None: all) picks among untuned, likelihood, judgetune, random, dspy;
    ``optimizers`` (None: all) among the DSPy optimizers."""
    kind = "linkage" if dataset == "linkage-trec-dl-nf" else "rubric"
    listwise = kind == "linkage"
    # a LINKAGE prompt carries a reference list per demo and per item (~550 tokens an item, up to ~3000 of demos):
    # --quick scores fewer questions there (2 search, 2 dev, 6 test questions of 4 answers) so a run finishes
    trials, search, dev, test = (4, 12, 16, 32) if quick else (12, 32, 60, 120)
    if listwise and quick:
        search, dev, test = 8, 8, 24
    fixed = {"reasoning": False, **({"samples": 1, "per_grade": 1} if listwise else {})}
    common = dict(data=dataset, search_items=search, chunk=6, dev_items=dev, test_items=test,
                  per_question=(4 if quick else 8) if listwise else None, criterion=CRITERIA[dataset], rescore=3)
    wanted = methods or {"untuned", "likelihood", "judgetune", "random", "dspy"}
    rows = []
    spec = RunSpec(also=[], name=f"opt-{kind}", judge=kind, fixed=fixed, n_trials=trials, proposals=2, rounds=2, **common)
    splits = prepare_splits(spec)
    print(f"{dataset}: search {len(splits.search)}, dev {len(splits.dev)}, test {len(splits.test)}", file=sys.stderr)
    gold = [e.judgment for e in splits.test]
    const = constant_baseline([e.judgment for e in splits.train], len(gold)).tolist()
    rows.append(row(dataset, "constant (training median)", agreement(const, splits.test, splits.label_range), 0, 0.0))
    if "untuned" in wanted:
        metrics, calls, seconds = untuned(spec, splits, tmp / f"{kind}-untuned")
        rows.append(row(dataset, f"untuned {kind} (first instruction, k=0, linear map)", metrics, calls, seconds))
    if "likelihood" in wanted and kind == "rubric":
        lik = RunSpec(also=[], name="opt-likelihood", judge="likelihood", n_trials=trials, **common)
        metrics, calls, seconds = untuned(lik, splits, tmp / "likelihood-untuned")
        rows.append(row(dataset, "untuned likelihood (defaults, k=0, linear map)", metrics, calls, seconds))
        rows.append(tuned_row(dataset, "judgetune (likelihood judge)", lik, tmp)[0])
    # the DSPy optimizers get the rubric tuner's budget; before it is measured, the quick run's last measured one
    budget = dspy_budget or (100 if quick else 400)
    search_budget = budget
    if "judgetune" in wanted:
        result, m = tuned_row(dataset, f"judgetune ({kind} judge, proposals)", spec, tmp)
        rows.append(result)
        budget = result["lm_calls"] or budget
        search_budget = m["study"]["lm_calls"] if m else budget
    if "random" in wanted:
        random_spec = RunSpec(also=[], name=f"opt-{kind}-random", judge=kind, fixed=fixed, n_trials=200, sampler="random",
                              max_calls=search_budget, proposals=2, rounds=2, **common)
        rows.append(tuned_row(dataset, f"random ({kind} judge, same pipeline, RandomSampler)", random_spec, tmp)[0])
    if "dspy" in wanted:
        for name in optimizers or DSPY_OPTIMIZERS:
            metrics, calls, seconds, error = dspy_optimizer(name, dataset, splits, budget, tmp / f"{kind}-{name}",
                                                            cap_seconds)
            shown = {key: metrics[key] for key in ("distinct_predictions", "test_failures", "instructions")} \
                if metrics else {}
            rows.append(row(dataset, f"DSPy {name}", metrics, calls, seconds, budget=budget,
                            **({"error": error} if error else {}), **shown))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", choices=["planted", *CRITERIA], action="append")
    parser.add_argument("--methods", help="comma-separated subset of untuned,likelihood,judgetune,random,dspy")
    parser.add_argument("--dspy-seconds", type=float, default=None,
                        help="time cap of each DSPy optimizer's search (default 150 with --quick, 900 without)")
    parser.add_argument("--dspy-optimizers", help=f"comma-separated subset of {','.join(DSPY_OPTIMIZERS)} (default: all)")
    parser.add_argument("--dspy-budget", type=int, default=None,
                        help="LM-call budget of the DSPy optimizers when the tuner does not run in the same command "
                             "(default: the quick run's measured 100, or 400)")
    args = parser.parse_args()
    cap = args.dspy_seconds or (150.0 if args.quick else 900.0)
    methods = set(args.methods.split(",")) if args.methods else None
    unknown = set((args.dspy_optimizers or "").split(",")) - {"", *DSPY_OPTIMIZERS}
    if unknown:
        parser.error(f"--dspy-optimizers: unknown {sorted(unknown)}; expected some of {list(DSPY_OPTIMIZERS)}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if not args.only or "planted" in args.only:
            rows += planted_rows(tmp, [0] if args.quick else [0, 1, 2])
        for dataset in CRITERIA:
            if not args.only or dataset in args.only:
                rows += real_rows(dataset, tmp, args.quick, cap, methods,
                                  args.dspy_optimizers.split(",") if args.dspy_optimizers else None, args.dspy_budget)
    if args.json:
        print(json.dumps({"rows": rows}, indent=2))
        return
    print("| dataset | method | Spearman [95% CI] | MAE [95% CI] | LM calls | seconds | note |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        rho = "-" if r["spearman"] is None else f"{r['spearman']:.3f} [{r['spearman_ci'][0]:.2f}, {r['spearman_ci'][1]:.2f}]"
        mae = "-" if r["mae"] is None else f"{r['mae']:.3f} [{r['mae_ci'][0]:.2f}, {r['mae_ci'][1]:.2f}]"
        note = r.get("error") or r.get("note") or (f"seed {r['seed']}, search Spearman {r['search_spearman']:.3f}"
                                                   if "seed" in r and r.get("search_spearman") is not None else "")
        print(f"| {r['dataset']} | {r['method']} | {rho} | {mae} | {r['lm_calls'] if r['lm_calls'] is not None else '-'} "
              f"| {r['seconds']} | {note} |")


if __name__ == "__main__":
    main()
