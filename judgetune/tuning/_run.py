"""Stage 8, finish: freeze the chosen judge (calibrated on every labeled non-test item), test it once,
test the default the same way, write what tuning bought (``metrics.gain``: shipped minus default on
the same test items, with paired grouped-bootstrap 95% intervals), and audit the shipped judge on the
test items (``metrics.audit``).

Writes under ``runs/NAME/``: ``study.db`` (unless another storage is given), ``judge.json`` (the
frozen config) and ``test_predictions.jsonl``; the report is rendered from these by ``judgetune.report``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonlines
import numpy as np
import optuna

from judgetune import audit, datasets, stats
from judgetune._files import atomic_write, exclusive, make_folder
from judgetune._progress import stage
from judgetune.calibration import fit_calibrator
from judgetune.config import JudgeConfig, examples_fingerprint
from judgetune.datasets import Example, groups_of
from judgetune.errors import JudgetuneError, NothingJudgedError, redact
from judgetune.evaluation import agreement, cost_per_item, timed_verdicts
from judgetune.judges import Verdict
from judgetune.lm import JudgeLM, parse_lm_spec
from judgetune.stats import (
    constant_baseline,
    correlation,
    difference_record,
    evaluate_predictions,
    filled,
    gain,
    harmful_gain,
    paired_difference,
    random_baseline_spread,
    versus_constant,
)
from judgetune.tuning._audit import audit_reject
from judgetune.tuning._objective import ranked
from judgetune.tuning._pool import InstructionPool
from judgetune.tuning._proposals import load_proposer
from judgetune.tuning._selection import Reject, select, select_on_dev, with_rescore
from judgetune.tuning._space import default_params, judge_for, settled_params
from judgetune.tuning._spec import RunSpec
from judgetune.tuning._splits import Splits, prepare_splits
from judgetune.tuning._study import default_storage, load_run_lm, open_study, run_trials, study_summary

log = logging.getLogger(__name__)


def write_predictions(path: Path, examples: list[Example], verdicts: list[Verdict], scores: list[float | None]) -> None:
    with atomic_write(path) as handle, jsonlines.Writer(handle) as out:  # the old file stays whole until done
        for ex, verdict, score in zip(examples, verdicts, scores):
            out.write({"id": ex.id, "score": score, "raw_score": verdict.score, "parsed": verdict.parsed,
                       "human": ex.judgment, "distribution": verdict.distribution,
                       **({} if score is not None else {"failure": redact(verdict.raw or "no score")}),
                       **({"degraded": verdict.degraded} if verdict.degraded else {})})


def proposals_summary(study: optuna.Study, selection: dict) -> dict[str, Any]:
    """Every instruction of the pool with its best search trial and dev figures, and the proposal rounds."""
    pool = InstructionPool(study)
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    dev = {}
    for row in selection["rows"]:
        instruction = row["params"].get("instruction")
        if instruction is not None and instruction not in dev:
            dev[instruction] = {"trial": row["number"], "mae": row["mae"], "spearman": row["spearman"]}
    instructions = []
    for c in pool.candidates():
        trials = [t for t in complete if t.params.get("instruction") == c.id]
        best = ranked(trials, "spearman", 1)[0] if trials else None
        search = {"trial": best.number, "mae": best.values[0], "spearman": best.values[1]} if best else None
        instructions.append({**c.to_dict(), "trials": len(trials), "search": search, "selection": dev.get(c.id)})
    rounds = pool.rounds()
    refused: dict[str, int] = {}
    for r in rounds:
        for kind, n in r["refused_counts"].items():
            refused[kind] = refused.get(kind, 0) + n
    return {"instructions": instructions, "rounds": rounds, "refused_counts": refused}


def freeze(params: dict[str, Any], spec: RunSpec, splits: Splits, lm, instructions: Sequence[str], *,
           progress: bool = True, settled: dict[str, Any] | None = None) -> tuple[JudgeConfig, dict]:
    """The frozen config of a trial's parameters, its calibrator fitted on the search and dev items (group-wise CV
    choosing the form; a pool item may be one of the judge's own demos), and the calibrator's CV figures.
    ``settled``: the run's ``settled_params`` (computed when not given)."""
    full = {**params, **splits.data_fixed, **(settled_params(spec, lm) if settled is None else settled)}
    judge = judge_for(full, spec.judge, lm, seed=spec.seed, demo_pool=splits.demo_pool, label_range=splits.label_range,
                      instructions=instructions)
    needed = lm is not None and judge.lm is not None  # not for a signal-only hybrid of a stacking run
    lm_dict = parse_lm_spec(spec.lm, api_base=spec.api_base).to_dict() if needed else None
    protocol = {} if spec.protocol is None else {"protocol": spec.protocol}
    staged = JudgeConfig.from_judge(judge, lm=lm_dict, calibrator=None, label_range=splits.label_range, seed=spec.seed,
                                    **protocol)
    items = splits.calibration
    fit_judge = staged.build_judge(lm)
    verdicts, _ = timed_verdicts(fit_judge, items, progress=progress)
    pairs = [(v.score, e.judgment, e.group_key) for v, e in zip(verdicts, items) if v.parsed]
    if not pairs:
        raise NothingJudgedError(f"not one of the {len(items)} search and dev items could be judged; the first "
                                 f"because: {redact(verdicts[0].raw or 'no score')}")
    calibrator, cv = fit_calibrator([p for p, _, _ in pairs], [g for _, g, _ in pairs],
                                    groups=[q for _, _, q in pairs], label_range=splits.label_range, seed=spec.seed)
    config = JudgeConfig.from_judge(judge, lm=lm_dict, calibrator=calibrator, label_range=splits.label_range,
                                    seed=spec.seed, criterion=spec.criterion if judge.kind == spec.judge else None,
                                    **protocol)  # another family's default (--also) judges no criterion
    return config, cv


def finish(spec: RunSpec, study: optuna.Study, splits: Splits, lm, run_dir: Path, *, n_resamples: int = 1000,
           reject: Reject | None = None, progress: bool = True, seconds: dict[str, float] | None = None) -> JudgeConfig:
    """Choose (``select`` and its gate, or the old dev pick with ``spec.gate == "off"``), freeze and
    calibrate on the search and dev items, evaluate once on test beside the default and the trivial
    baselines, and write judge.json. ``seconds``: the wall time of the steps before (the search), to which
    each step here adds its own (``metrics.seconds``)."""
    instructions = InstructionPool(study).texts()
    times = dict(seconds or {})
    # the run's unsearched settings and its untuned default, once for selection, freezing and the test
    settled = settled_params(spec, lm)
    default = default_params(spec, splits.data_fixed, lm=lm, instructions=instructions, demo_pool=splits.demo_pool,
                             label_range=splits.label_range)
    rows, confirming = len(splits.selection), len(splits.confirming_pool) + len(splits.dev)
    rescore = with_rescore(spec, splits, dev_only=spec.gate == "off").rescore
    families = spec.also_families()
    others = f" and the defaults of {', '.join(families)} (other families)" if families else ""
    with stage(f"{spec.name}: choosing among the default, up to {rescore} trials{others} on {rows} items "
               f"({len(splits.search)} search, {len(splits.confirming_pool)} pool, {len(splits.dev)} dev): at most "
               f"{(rescore + 1) * confirming + len(families) * rows} judgments, fewer as losers stop early (--gate-items "
               "bounds the items)", enabled=progress, seconds=times, key="choosing"):
        if spec.gate in ("on", "nested"):
            reject = audit_reject(spec, splits, lm, instructions, reject, settled=settled)  # --audit-max
            params, selection = select(study, spec, splits, lm, reject=reject, default=default, settled=settled)
        else:
            params, selection = select_on_dev(study, spec, splits, lm, settled=settled)
    with stage(f"{spec.name}: calibrating the chosen judge", enabled=progress, seconds=times, key="freezing"):
        config, cv = freeze(params, spec, splits, lm, instructions, progress=progress, settled=settled)
    metrics: dict[str, Any] = {"seconds": times}
    # the figures' scale: the judge's label range, widened to a test label beyond it (read without the test rows)
    test_labels = [e.judgment for e in splits.test]
    scale = (min(splits.label_range[0], *test_labels), max(splits.label_range[1], *test_labels))
    test_scores, test_raw = _score_frozen(config, spec, splits, lm, run_dir, metrics, scale=scale,
                                          n_resamples=n_resamples, progress=progress)
    if params == default:
        default_scores, default_raw = test_scores, test_raw
    else:
        default_scores, default_raw = _default_on_test(default, spec, splits, lm, instructions, settled, progress,
                                                       times)
        metrics["default_test"] = agreement(default_scores, splits.test, scale,
                                            n_resamples=n_resamples, seed=spec.seed)
    median = float(np.median([e.judgment for e in splits.selection]))  # what a failure is charged (``filled``)
    metrics["gain"] = gain(test_scores, default_scores, splits.test, default_shipped=params == default, fallback=median,
                           n_resamples=n_resamples, seed=spec.seed)
    # the ranking before calibration: defined even where a constant calibrator ships (it ranks nothing)
    raw_gain = gain(test_raw, default_raw, splits.test, default_shipped=params == default, n_resamples=n_resamples,
                    seed=spec.seed)["spearman"]
    metrics["gain"]["spearman_raw"] = raw_gain
    _against_baselines(metrics, test_scores, spec, splits, scale, n_resamples)
    if spec.stack:
        with stage(f"{spec.name}: the untuned LM judge alone, on the test items", enabled=progress):
            metrics["gain_vs_lm"] = _against_the_lm(test_raw, spec, splits, lm, n_resamples)
    metrics["calibrator_cv_mae"] = cv
    metrics["study"] = {**study_summary(study), "chosen_trial": selection["chosen_trial"], "pick_rule": spec.pick,
                        **({"pooled": True} if spec.pooled else {})}
    metrics["selection"] = selection
    metrics["proposals"] = proposals_summary(study, selection)
    config.metrics = metrics
    config.data = _data_record(spec, splits)
    with stage(f"{spec.name}: auditing the shipped judge", enabled=progress, seconds=times, key="audit"):
        config.metrics["audit"] = audit_shipped(config, spec, splits, lm)
    config.save(run_dir / "judge.json")
    return config


def _score_frozen(config: JudgeConfig, spec: RunSpec, splits: Splits, lm, run_dir: Path, metrics: dict[str, Any], *,
                  scale: tuple[float, float], n_resamples: int, progress: bool) -> tuple[list, list]:
    """The frozen judge scored on the search, dev and test items (figures into ``metrics``; the test predictions
    written); returns its calibrated and raw test scores."""
    test_scores: list[float | None] = []
    test_raw: list[float | None] = []
    for name, examples in (("search_items", splits.search), ("dev", splits.dev), ("test", splits.test)):
        scoring_judge = config.build_judge(lm)
        with stage(f"{spec.name}: scoring the frozen judge on {len(examples)} {name.replace('_', ' ')}",
                   enabled=progress, seconds=metrics["seconds"], key="scoring"):
            verdicts, seconds = timed_verdicts(scoring_judge, examples, progress=progress)
        scores = config.calibrated(verdicts, scoring_judge, examples)
        metrics[name] = agreement(scores, examples, scale, n_resamples=n_resamples, seed=spec.seed)
        metrics[name]["degraded"] = sum(bool(v.degraded) for v in verdicts)  # scored without some of its signals
        if name != "search_items":  # cost apart from the figures: timings differ from run to run, agreement must not
            metrics.setdefault("cost", {})[name] = cost_per_item(verdicts, seconds)
        if name == "test":
            test_scores, test_raw = scores, [v.score if v.parsed else None for v in verdicts]
            metrics["test"]["labels_worth"] = worth_on(scores, examples)
            write_predictions(run_dir / "test_predictions.jsonl", examples, verdicts, scores)
            datasets.write_examples(run_dir / "test.jsonl", examples)  # `judgetune score` on it reproduces them
    for name in ("search_items", "dev"):
        metrics[name]["note"] = "in-sample for the calibrator (fitted on the search and dev items)"
    return test_scores, test_raw


def worth_on(scores: list[float | None], examples: list[Example]) -> dict[str, Any] | None:
    """What the judge is worth in labels on these labeled items (``stats.labels_worth``): n labels beside its scores
    on many more rows estimate a mean about as precisely as ``labels_worth`` x n labels alone. None with fewer than
    3 judged items."""
    kept = [(s, e.judgment) for s, e in zip(scores, examples) if s is not None]
    if len(kept) < 3:
        return None
    return stats.labels_worth([y for _, y in kept], [s for s, _ in kept])


def _default_on_test(default: dict[str, Any], spec: RunSpec, splits: Splits, lm, instructions: Sequence[str],
                     settled: dict[str, Any], progress: bool, times: dict[str, float]) -> tuple[list, list]:
    """The untuned default, frozen and calibrated as the shipped judge is, scored once on the same test items:
    its calibrated and raw scores."""
    with stage(f"{spec.name}: the untuned default, calibrated and scored on the test items", enabled=progress,
               seconds=times, key="default"):
        default_config, _ = freeze(default, spec, splits, lm, instructions, progress=progress, settled=settled)
        default_judge = default_config.build_judge(lm)
        verdicts, _ = timed_verdicts(default_judge, splits.test, progress=progress)
    return (default_config.calibrated(verdicts, default_judge, splits.test),
            [v.score if v.parsed else None for v in verdicts])


def audit_shipped(config: JudgeConfig, spec: RunSpec, splits: Splits, lm) -> dict[str, Any]:
    """The audit of the frozen judge, calibrated, on (a sample of) the test items: what ``metrics.audit`` holds
    (``{"error": why}`` when it could not run, e.g. every test item failed: the run still ships)."""
    items = audit.audit_sample(splits.test, seed=spec.seed)
    try:
        return audit.audit(config, items, lm, bounds=spec.audit_max, seed=spec.seed)
    except JudgetuneError as err:
        log.warning("%s: the audit of the shipped judge could not run: %s", spec.name, err)
        return {"error": str(err)}


def _against_baselines(metrics: dict[str, Any], test_scores: list, spec: RunSpec, splits: Splits,
                       scale: tuple[float, float], n_resamples: int) -> None:
    """The trivial baselines on test, the shipped judge against the constant, and the warnings a harm earns."""
    train_labels = [e.judgment for e in splits.train]
    gold = [e.judgment for e in splits.test]
    common = {"label_range": scale, "groups": groups_of(splits.test), "n_resamples": n_resamples,
              "seed": spec.seed}
    metrics["baselines"] = {
        "constant": evaluate_predictions(constant_baseline(train_labels, len(gold)), gold, **common),
        "random": random_baseline_spread(train_labels, gold, label_range=scale, groups=common["groups"],
                                         seed=spec.seed)}
    metrics["vs_constant"] = versus_constant(test_scores, splits.test, train_labels, n_resamples=n_resamples,
                                             seed=spec.seed)
    if metrics["vs_constant"]["worse"]:
        log.warning("%s: the shipped judge's test MAE is worse than the constant predictor's beyond noise (%s)",
                    spec.name, metrics["vs_constant"]["mae"])
    harm = harmful_gain(metrics["gain"])
    if harm:
        metrics["gain"]["warning"] = harm
        log.warning("%s: %s", spec.name, harm)


def _against_the_lm(test_raw: list[float | None], spec: RunSpec, splits: Splits, lm,
                    n_resamples: int) -> dict[str, Any]:
    """A stacking run's other comparison: the shipped judge against the LM judge alone, the untuned rubric judge
    (the ``rubric`` signal's settings), Spearman on the test items, paired; with both judges' seconds per item,
    so a user sees what the LM adds beside the signals and what it costs. Spearman only: the ranks need no
    calibration, and the LM judge is not tuned or calibrated here."""
    from judgetune.judges import LM_SIGNALS, BuildContext, JudgeSpec, build

    kind, settings = LM_SIGNALS["rubric"]
    judge = build(JudgeSpec(kind, dict(settings), seed=spec.seed), BuildContext(lm=lm, label_range=splits.label_range))
    verdicts, seconds = timed_verdicts(judge, splits.test)
    lm_raw = np.array([v.score if v.parsed else np.nan for v in verdicts], dtype=float)
    shipped = np.array([np.nan if s is None else s for s in test_raw], dtype=float)
    gold = [e.judgment for e in splits.test]
    diff = paired_difference(correlation, filled(shipped), filled(lm_raw), gold, groups_of(splits.test),
                             n_resamples=n_resamples, seed=spec.seed)
    return {"lm_judge": {"judge": kind, "params": dict(settings)},
            "lm_judge_spearman": correlation(filled(lm_raw), gold), "lm_judge_failed": int(np.isnan(lm_raw).sum()),
            "spearman": difference_record(diff),
            "lm_judge_cost": cost_per_item(verdicts, seconds)}


def _data_record(spec: RunSpec, splits: Splits) -> dict[str, Any]:
    """judge.json's ``data``: the source, its files' fingerprints, each split's size and fingerprint, the split seed."""
    return {"source": spec.data, "files": datasets.data_fingerprint(spec.data),
            "splits": {name: {"items": len(items), "sha256": examples_fingerprint(items)}
                       for name, items in (("search", splits.search), ("demo_pool", splits.demo_pool),
                                           ("dev", splits.dev), ("test", splits.test))},
            "split_seed": spec.seed,
            **({"fields": spec.fields} if spec.fields else {}), **({"label": spec.label} if spec.label else {})}


def tune(spec: RunSpec, *, runs_dir: str | Path = "runs", storage: str | optuna.storages.BaseStorage | None = None,
         heartbeat: int = 10, timeout: float = 60.0, lm: JudgeLM | None = None,
         sampler: optuna.samplers.BaseSampler | None = None, progress: bool = True,
         reject: Reject | None = None, n_resamples: int = 1000) -> tuple[JudgeConfig, Path, optuna.Study]:
    """The main job: spec, splits, search, proposals, selection and gate, finish.

    Re-running the same spec resumes the study where it stopped: a trial whose process died on this
    machine is retried at once with its cached answers (one on another host after three missed
    heartbeats).

    Args:
        storage: an SQLAlchemy URL or an Optuna storage object (default: runs/NAME/study.db).
        timeout: per attempt of a server call (for the LM the run loads itself).
        lm: an LM object to judge with (the caller keeps and closes it); default: the spec's LM, loaded here.
        sampler: an Optuna sampler object; default: the spec's sampler, seeded.
        progress: a bar over the trials on a terminal, else one line per trial, and the scoring bars
            (standard error); False: silent.
        reject: a predicate over a candidate's selection row saying why it may not ship (or None).
        n_resamples: bootstrap resamples of the reported intervals (the gate's are t intervals).

    Returns:
        The frozen config, the run folder, and the study.
    """
    splits = prepare_splits(spec)  # bad data is refused before a run folder or a study exists
    own = lm is None
    if own:  # and so is an LM spec or endpoint: no study is left to block the corrected command
        lm = load_run_lm(spec, timeout=timeout)
    proposer = None
    try:
        proposer = load_proposer(spec, lm)
        run_dir = make_folder(Path(runs_dir) / spec.name)
        with exclusive(run_dir / LOCK_NAME, f"run {spec.name} ({run_dir})"):  # one tune per run at a time
            try:
                return _tune_locked(spec, splits, run_dir, storage=storage, heartbeat=heartbeat, lm=lm,
                                    proposer=proposer, sampler=sampler, progress=progress, reject=reject,
                                    n_resamples=n_resamples)
            except Exception as err:
                if not run_dir.is_dir() or (storage is None and not (run_dir / "study.db").is_file()):
                    raise RunRemovedError(f"run {spec.name}: its folder {run_dir} (or its study.db) was removed "
                                          "while tuning; nothing was saved. Run the command again to start afresh"
                                          ) from err
                raise
    finally:
        for model in {id(m): m for m in (lm, proposer) if m is not None and (own or m is not lm)}.values():
            model.close()


LOCK_NAME = ".lock"  # held by the tune running in a run folder


class RunRemovedError(JudgetuneError):
    """The run folder (or its study) disappeared while a tune was running in it."""


def _tune_locked(spec: RunSpec, splits: Splits, run_dir: Path, *, storage, heartbeat: int, lm: JudgeLM | None,
                 proposer: JudgeLM | None, sampler, progress: bool, reject: Reject | None,
                 n_resamples: int) -> tuple[JudgeConfig, Path, optuna.Study]:
    study = open_study(spec, default_storage(run_dir) if storage is None else storage, heartbeat=heartbeat,
                       sampler=sampler)
    started = time.monotonic()
    run_trials(study, spec, lm, splits, proposer=proposer, progress=progress)
    config = finish(spec, study, splits, lm, run_dir, reject=reject, n_resamples=n_resamples, progress=progress,
                    seconds={"search": round(time.monotonic() - started, 3)})
    return config, run_dir, study
