"""One tuning run from data to a calibrated judge config: search, re-score the front on dev and
choose there, calibrate on dev, test once.

Writes under ``runs/NAME/``: ``study.db`` (unless another storage is given), ``judge.json`` (the
frozen config) and ``test_predictions.jsonl``; the report is rendered from these by ``judgetune.report``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import jsonlines
import optuna

from judgetune import datasets
from judgetune._files import atomic_write
from judgetune.calibration import fit_calibrator
from judgetune.config import JudgeConfig, examples_fingerprint
from judgetune.datasets import Example, groups_of
from judgetune.errors import NothingJudgedError, redact
from judgetune.evaluation import agreement, cost_per_item, timed_verdicts
from judgetune.judges import Verdict
from judgetune.lm import parse_lm_spec
from judgetune.stats import constant_baseline, evaluate_predictions, random_baseline_spread
from judgetune.tuning._pool import InstructionPool
from judgetune.tuning._search import (
    RunSpec,
    Splits,
    default_storage,
    judge_for,
    lm_calls,
    load_proposer,
    load_run_lm,
    objectives,
    open_study,
    prepare_splits,
    run_trials,
    search_summary,
    settled_params,
)
from judgetune.tuning._selection import front_candidates, pick_by_dev

log = logging.getLogger(__name__)


def write_predictions(path: Path, examples: list[Example], verdicts: list[Verdict], scores: list[float | None]) -> None:
    with atomic_write(path) as handle, jsonlines.Writer(handle) as out:  # the old file stays whole until done
        for ex, verdict, score in zip(examples, verdicts, scores):
            out.write({"id": ex.id, "score": score, "raw_score": verdict.score, "parsed": verdict.parsed,
                       "human": ex.judgment, "distribution": verdict.distribution,
                       **({} if score is not None else {"failure": redact(verdict.raw or "no score")})})


def rescore_candidates(study: optuna.Study, spec: RunSpec) -> list[optuna.trial.FrozenTrial]:
    """The front's best ``spec.rescore`` trials by the pick rule, then the best complete trial of each
    proposed instruction not among them (at most ``spec.rescore`` more), so every proposal gets dev figures."""
    chosen = front_candidates(study.best_trials, spec.pick, spec.rescore)
    seen = {t.params.get("instruction") for t in chosen}
    proposed = {c.id for c in InstructionPool(study).candidates() if c.round is not None}
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    extra = []
    for instruction in sorted(proposed - seen):
        trials = [t for t in complete if t.params.get("instruction") == instruction]
        if trials:
            extra.append(front_candidates(trials, spec.pick, 1)[0])
    return chosen + front_candidates(extra, spec.pick, spec.rescore)


def select_on_dev(study: optuna.Study, spec: RunSpec, splits: Splits, lm) -> tuple[optuna.trial.FrozenTrial, dict]:
    """Re-score the candidates (see ``rescore_candidates``) on dev and pick by the rule on their dev figures."""
    if not study.best_trials:
        raise ValueError(f"study {study.study_name} has no completed trial to choose from")
    instructions = InstructionPool(study).texts()
    front = {t.number for t in study.best_trials}
    calls0, rows, trials = lm_calls(lm), [], {}
    for trial in rescore_candidates(study, spec):
        params = {**trial.params, **splits.data_fixed, **settled_params(spec, lm)}
        judge = judge_for(params, spec, lm, demo_pool=splits.demo_pool, pool=splits.dev,
                          label_range=splits.label_range, instructions=instructions)
        mae, rho, info = objectives(judge.judge_all(splits.dev), splits.dev, label_range=splits.label_range,
                                    seed=spec.seed)
        trials[trial.number] = trial
        rows.append({"number": trial.number, "instruction": trial.params.get("instruction"), "params": trial.params,
                     "on_front": trial.number in front,
                     "search": {"mae": trial.values[0], "spearman": trial.values[1]},
                     "dev": {"mae": mae, "spearman": rho, **info}})
    chosen = pick_by_dev(rows, spec.pick)
    for row in rows:
        row["chosen"] = row is chosen
    return trials[chosen["number"]], {"rule": spec.pick, "rows": rows, "chosen_trial": chosen["number"],
                                      "lm_calls": lm_calls(lm) - calls0}


def proposals_summary(study: optuna.Study, selection: dict) -> dict[str, Any]:
    """Every instruction of the pool with its best search trial and dev figures, and the proposal rounds."""
    pool = InstructionPool(study)
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    dev = {}
    for row in selection["rows"]:
        if row["instruction"] is not None and row["instruction"] not in dev:
            dev[row["instruction"]] = {"trial": row["number"], **row["dev"]}
    instructions = []
    for c in pool.candidates():
        trials = [t for t in complete if t.params.get("instruction") == c.id]
        best = max(trials, key=lambda t: (t.values[1], -t.values[0], -t.number)) if trials else None
        search = {"trial": best.number, "mae": best.values[0], "spearman": best.values[1]} if best else None
        instructions.append({**c.to_dict(), "trials": len(trials), "search": search, "dev": dev.get(c.id)})
    rounds = pool.rounds()
    refused: dict[str, int] = {}
    for r in rounds:
        for kind, n in r["refused_counts"].items():
            refused[kind] = refused.get(kind, 0) + n
    return {"instructions": instructions, "rounds": rounds, "refused_counts": refused}


def finish(spec: RunSpec, study, splits: Splits, lm, run_dir: Path, *, n_resamples: int = 1000) -> JudgeConfig:
    """Re-score the front on dev and choose there, calibrate on dev, evaluate once on test, and freeze."""
    trial, selection = select_on_dev(study, spec, splits, lm)
    params = {**trial.params, **splits.data_fixed, **settled_params(spec, lm)}
    judge = judge_for(params, spec, lm, demo_pool=splits.demo_pool, pool=splits.train, label_range=splits.label_range,
                      instructions=InstructionPool(study).texts())
    lm_dict = parse_lm_spec(spec.lm, api_base=spec.api_base).to_dict() if lm is not None else None
    staged = JudgeConfig.from_judge(judge, lm=lm_dict, calibrator=None, label_range=splits.label_range, seed=spec.seed)
    # dev: fit the calibrator on the raw scores of the frozen judge
    dev_judge = staged.build_judge(lm, pool=splits.dev)
    dev_verdicts, dev_seconds = timed_verdicts(dev_judge, splits.dev, progress=True)
    dev_pairs = [(v.score, e.judgment, e.group_key) for v, e in zip(dev_verdicts, splits.dev) if v.parsed]
    if not dev_pairs:
        raise NothingJudgedError(f"not one of the {len(splits.dev)} dev items could be judged; the first because: "
                                 f"{redact(dev_verdicts[0].raw or 'no score')}")
    calibrator, cv = fit_calibrator([p for p, _, _ in dev_pairs], [g for _, g, _ in dev_pairs],
                                    groups=[q for _, _, q in dev_pairs], label_range=splits.label_range, seed=spec.seed)
    config = JudgeConfig.from_judge(judge, lm=lm_dict, calibrator=calibrator, label_range=splits.label_range,
                                    seed=spec.seed, criterion=spec.criterion)
    metrics: dict[str, Any] = {}
    for name, examples, verdicts, seconds in (("train", splits.search, None, 0.0),
                                              ("dev", splits.dev, dev_verdicts, dev_seconds),
                                              ("test", splits.test, None, 0.0)):
        scoring_judge = config.build_judge(lm, pool=examples if name != "train" else splits.train)
        if verdicts is None:
            verdicts, seconds = timed_verdicts(scoring_judge, examples, progress=True)
        scores = config.calibrated(verdicts, scoring_judge, examples)
        metrics[name] = agreement(scores, examples, splits.label_range, n_resamples=n_resamples, seed=spec.seed)
        if name != "train":  # cost apart from the figures: timings differ from run to run, agreement must not
            metrics.setdefault("cost", {})[name] = cost_per_item(verdicts, seconds)
        if name == "test":
            write_predictions(run_dir / "test_predictions.jsonl", examples, verdicts, scores)
            datasets.write_examples(run_dir / "test.jsonl", examples)  # `judgetune score` on it reproduces them
    metrics["dev"]["note"] = "in-sample for the calibrator (fitted on dev)"
    train_labels = [e.judgment for e in splits.train]
    gold = [e.judgment for e in splits.test]
    common = {"label_range": splits.label_range, "groups": groups_of(splits.test), "n_resamples": n_resamples,
              "seed": spec.seed}
    metrics["baselines"] = {
        "constant": evaluate_predictions(constant_baseline(train_labels, len(gold)), gold, **common),
        "random": random_baseline_spread(train_labels, gold, label_range=splits.label_range, groups=common["groups"],
                                         seed=spec.seed)}
    metrics["calibrator_cv_mae"] = cv
    metrics["search"] = {**search_summary(study), "chosen_trial": trial.number, "pick_rule": spec.pick}
    metrics["selection"] = selection
    metrics["proposals"] = proposals_summary(study, selection)
    config.metrics = metrics
    config.data = {"source": spec.data, "files": datasets.data_fingerprint(spec.data),
                   "splits": {name: {"items": len(items), "sha256": examples_fingerprint(items)}
                              for name, items in (("search", splits.search), ("demo_pool", splits.demo_pool),
                                                  ("dev", splits.dev), ("test", splits.test))},
                   "split_seed": spec.seed,
                   **({"fields": spec.fields} if spec.fields else {}), **({"label": spec.label} if spec.label else {})}
    config.save(run_dir / "judge.json")
    return config


def tune(spec: RunSpec, *, runs_dir: str | Path = "runs", storage: str | None = None,
         heartbeat: int = 10, timeout: float = 60.0) -> tuple[JudgeConfig, Path, optuna.Study]:
    """The main job. Re-running the same spec resumes the study where it stopped: a trial whose
    process died on this machine is retried at once with its cached answers (one on another host
    after three missed heartbeats). ``timeout`` is per attempt of a server call."""
    run_dir = Path(runs_dir) / spec.name
    run_dir.mkdir(parents=True, exist_ok=True)
    study = open_study(spec, storage or default_storage(run_dir), heartbeat=heartbeat)
    splits = prepare_splits(spec)
    lm = load_run_lm(spec, timeout=timeout)
    proposer = load_proposer(spec, lm)
    try:
        run_trials(study, spec, lm, splits, proposer=proposer)
        config = finish(spec, study, splits, lm, run_dir)
    finally:
        for model in {id(m): m for m in (lm, proposer) if m is not None}.values():
            model.close()
    return config, run_dir, study
