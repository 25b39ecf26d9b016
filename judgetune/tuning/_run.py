"""One tuning run from data to a calibrated judge config: search, choose, calibrate on dev, test once.

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
from judgetune.calibration import fit_calibrator
from judgetune.config import JudgeConfig, examples_fingerprint
from judgetune.datasets import Example, groups_of
from judgetune.errors import NothingJudgedError, redact
from judgetune.evaluation import agreement
from judgetune.judges import Verdict
from judgetune.lm import parse_lm_spec
from judgetune.stats import constant_baseline, evaluate_predictions, random_baseline
from judgetune.tuning._search import (
    RunSpec,
    Splits,
    default_storage,
    judge_for,
    load_run_lm,
    open_study,
    pick_trial,
    prepare_splits,
    run_trials,
    search_summary,
    settled_params,
)

log = logging.getLogger(__name__)


def write_predictions(path: Path, examples: list[Example], verdicts: list[Verdict], scores: list[float | None]) -> None:
    with jsonlines.open(path, "w") as out:
        for ex, verdict, score in zip(examples, verdicts, scores):
            out.write({"id": ex.id, "score": score, "raw_score": verdict.score, "parsed": verdict.parsed,
                       "human": ex.judgment, "distribution": verdict.distribution,
                       **({} if score is not None else {"failure": redact(verdict.raw or "no score")})})


def finish(spec: RunSpec, study, splits: Splits, lm, run_dir: Path, *, n_resamples: int = 1000) -> JudgeConfig:
    """Choose from the Pareto front, calibrate on dev, evaluate once on test, and freeze."""
    trial = pick_trial(study, spec.pick)
    params = {**trial.params, **settled_params(spec, lm)}
    judge = judge_for(params, spec, lm, demo_pool=splits.demo_pool, pool=splits.train, label_range=splits.label_range)
    lm_dict = parse_lm_spec(spec.lm, api_base=spec.api_base).to_dict() if lm is not None else None
    staged = JudgeConfig.from_judge(judge, lm=lm_dict, calibrator=None, label_range=splits.label_range, seed=spec.seed)
    # dev: fit the calibrator on the raw scores of the frozen judge
    dev_judge = staged.build_judge(lm, pool=splits.dev)
    dev_verdicts = dev_judge.judge_all(splits.dev, progress=True)
    dev_pairs = [(v.score, e.judgment, e.group_key) for v, e in zip(dev_verdicts, splits.dev) if v.parsed]
    if not dev_pairs:
        raise NothingJudgedError(f"not one of the {len(splits.dev)} dev items could be judged; the first because: "
                                 f"{redact(dev_verdicts[0].raw or 'no score')}")
    calibrator, cv = fit_calibrator([p for p, _, _ in dev_pairs], [g for _, g, _ in dev_pairs],
                                    groups=[q for _, _, q in dev_pairs], label_range=splits.label_range, seed=spec.seed)
    config = JudgeConfig.from_judge(judge, lm=lm_dict, calibrator=calibrator, label_range=splits.label_range,
                                    seed=spec.seed)
    metrics: dict[str, Any] = {}
    for name, examples, verdicts in (("train", splits.search, None), ("dev", splits.dev, dev_verdicts),
                                     ("test", splits.test, None)):
        scoring_judge = config.build_judge(lm, pool=examples if name != "train" else splits.train)
        if verdicts is None:
            verdicts = scoring_judge.judge_all(examples, progress=True)
        scores = config.calibrated(verdicts, scoring_judge, examples)
        metrics[name] = agreement(scores, examples, splits.label_range, n_resamples=n_resamples, seed=spec.seed)
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
        "random": evaluate_predictions(random_baseline(train_labels, len(gold), seed=spec.seed), gold, **common)}
    metrics["calibrator_cv_mae"] = cv
    metrics["search"] = {**search_summary(study), "chosen_trial": trial.number, "pick_rule": spec.pick}
    config.metrics = metrics
    config.data = {"source": spec.data, "files": datasets.data_fingerprint(spec.data),
                   "splits": {name: {"items": len(items), "sha256": examples_fingerprint(items)}
                              for name, items in (("search", splits.search), ("demo_pool", splits.demo_pool),
                                                  ("dev", splits.dev), ("test", splits.test))},
                   "split_seed": spec.seed}
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
    try:
        run_trials(study, spec, lm, splits)
        config = finish(spec, study, splits, lm, run_dir)
    finally:
        if lm is not None:
            lm.close()
    return config, run_dir, study
