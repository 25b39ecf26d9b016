"""Stage 7, selection and the gate: which judge ships.

The candidates are the incumbent (the kind's default settings) and the strongest few trials by
their search figures (``spec.rescore`` of them, plus the best trial of each proposed instruction).
Each is scored on every labeled non-test item (search and dev; the LM's answers are cached, so an
item a candidate already judged costs nothing), its raw scores calibrated out of fold by the
group folds every stage shares (``cross_fitted``). The pick rule's objective is then the
out-of-fold MAE, or the Spearman of the raw scores (per group, averaged, where the data has groups).

The gate: the challenger with the best objective replaces the default only if its paired advantage
over the default is above zero at 95% after correcting for how many challengers were compared. The
advantage is bootstrapped on the dev items, which no candidate was chosen on (candidates come from
the search items' figures), drawing the same whole groups for every candidate; the winner's
advantage must exceed the 97.5% quantile of the bootstrap distribution of the largest centred
advantage over all challengers (a bootstrap of the maximum, so the winner's curse is paid for).
Otherwise the default ships. ``spec.gate == "off"`` keeps the old rule (``select_on_dev``).

A candidate can be rejected before the gate in one place, ``rejection`` (a predicate over its row);
the caller may add its own with ``reject=``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from scipy.stats import rankdata

from judgetune.calibration import cross_fitted
from judgetune.datasets import Example, groups_of
from judgetune.stats import correlation
from judgetune.tuning._objective import MAX_FAILURE_RATE, lm_calls, objectives, ranked
from judgetune.tuning._pool import InstructionPool
from judgetune.tuning._space import default_params, judge_for, settled_params
from judgetune.tuning._spec import RunSpec
from judgetune.tuning._splits import Splits

Reject = Callable[[dict[str, Any]], "str | None"]  # a candidate's row -> why it may not ship, or None
CONFIDENCE = 0.95


@dataclass
class Scored:
    """One candidate on the selection items: raw scores (NaN where it failed), out-of-fold calibrated
    predictions (a failure gets the labels' median: failing costs what guessing costs)."""

    params: dict[str, Any]
    raw: np.ndarray
    pred: np.ndarray
    calibrator: str | None
    failure_rate: float


def candidate_trials(study: optuna.Study, spec: RunSpec, *, exclude: Sequence[dict[str, Any]] = (),
                     front_only: bool = False) -> list[Any]:
    """The strongest ``spec.rescore`` complete trials (of the Pareto front with ``front_only``) of distinct
    settings by their search figures (none with the settings in ``exclude``, e.g. the default's), then
    the best trial of each proposed instruction not among them (at most ``spec.rescore`` more), so
    every proposal gets figures."""
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    seen_params, chosen = [dict(p) for p in exclude], []
    for trial in ranked(study.best_trials if front_only else complete, spec.pick):
        if len(chosen) < spec.rescore and trial.params not in seen_params:
            seen_params.append(trial.params)
            chosen.append(trial)
    seen = {t.params.get("instruction") for t in chosen}
    proposed = {c.id for c in InstructionPool(study).candidates() if c.round is not None}
    extra = [ranked([t for t in complete if t.params.get("instruction") == i and t.params not in seen_params],
                    spec.pick, 1) for i in sorted(proposed - seen)]
    return chosen + ranked([t[0] for t in extra if t], spec.pick, spec.rescore)


def score_candidate(params: dict[str, Any], spec: RunSpec, splits: Splits, lm, instructions: Sequence[str],
                    items: list[Example]) -> Scored:
    """Raw scores of the judge of ``params`` on ``items`` and their out-of-fold calibrated predictions."""
    full = {**params, **splits.data_fixed, **settled_params(spec, lm)}
    judge = judge_for(full, spec, lm, demo_pool=splits.demo_pool, pool=items, label_range=splits.label_range,
                      instructions=instructions)
    verdicts = judge.judge_all(items)
    raw = np.asarray([v.score if v.parsed else np.nan for v in verdicts], dtype=float)
    gold = np.asarray([e.judgment for e in items], dtype=float)
    ok = ~np.isnan(raw)
    pred, kind = np.full(len(items), float(np.median(gold))), None
    if ok.sum() >= 4:
        pred[ok], kind, _ = cross_fitted(raw[ok], gold[ok], label_range=splits.label_range,
                                         groups=[e.group_key for e, k in zip(items, ok) if k], seed=spec.seed)
    return Scored(params, raw, pred, kind, float(1 - ok.mean()))


def spearman_figure(raw: np.ndarray, gold: np.ndarray, groups: Sequence[str] | None) -> float | None:
    """Spearman of raw scores (a failure ranks in the middle), per group and averaged where there are groups."""
    filled = np.where(np.isnan(raw), np.nanmedian(raw) if (~np.isnan(raw)).any() else 0.0, raw)
    if groups is None:
        return correlation(filled, gold)
    values = [correlation(filled[idx], gold[idx]) for idx in _units(groups, len(gold))]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def rejection(row: dict[str, Any], reject: Reject | None = None) -> str | None:
    """Why a candidate may not ship, or None: the one place where candidates are turned away."""
    if row["failure_rate"] > MAX_FAILURE_RATE:
        return f"failed on {row['failure_rate']:.0%} of the items"
    return reject(row) if reject is not None else None


def _units(groups: Sequence[str] | None, n: int) -> list[np.ndarray]:
    """Item indices of each resampling unit: a group, or one item when there are no groups."""
    if groups is None:
        return [np.array([i]) for i in range(n)]
    keys = np.asarray([str(g) for g in groups])
    return [np.flatnonzero(keys == k) for k in dict.fromkeys(keys.tolist())]


def objective_draws(rule: str, scored: Sequence[Scored], gold: np.ndarray, groups: Sequence[str] | None, *,
                    n_resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The rule's objective (higher is better) of each candidate on all items, shape (C,), and on
    ``n_resamples`` grouped bootstrap draws shared by all candidates, shape (B, C)."""
    units = _units(groups, len(gold))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(units), (n_resamples, len(units)))
    weights = np.stack([np.bincount(d, minlength=len(units)) for d in draws]).astype(float)  # (B, U)
    if rule == "mae":
        errors = np.array([[np.abs(c.pred[u] - gold[u]).sum() for u in units] for c in scored])  # (C, U)
        sizes = np.array([len(u) for u in units], dtype=float)
        whole = -errors.sum(axis=1) / sizes.sum()
        return whole, -(weights @ errors.T) / (weights @ sizes)[:, None]
    if groups is not None:  # Spearman per group: a drawn group keeps its own correlation
        values = np.array([[np.nan if (v := correlation(_filled(c.raw)[u], gold[u])) is None else v for u in units]
                           for c in scored])  # (C, U)
        defined = ~np.isnan(values)
        with np.errstate(invalid="ignore", divide="ignore"):
            whole = np.nansum(values, axis=1) / defined.sum(axis=1)
            boot = (weights @ np.nan_to_num(values).T) / (weights @ defined.T)
        return whole, boot
    raws = np.column_stack([gold, *[_filled(c.raw) for c in scored]])  # (n, 1 + C)
    whole = _rank_correlations(raws)
    boot = np.stack([_rank_correlations(raws[np.repeat(np.arange(len(gold)), w.astype(int))]) for w in weights])
    return whole, boot


def _filled(raw: np.ndarray) -> np.ndarray:
    ok = ~np.isnan(raw)
    return np.where(ok, raw, np.median(raw[ok]) if ok.any() else 0.0)


def _rank_correlations(columns: np.ndarray) -> np.ndarray:
    """Spearman of column 0 with each other column (NaN where one is constant)."""
    ranks = rankdata(columns, axis=0)
    centred = ranks - ranks.mean(axis=0)
    norms = np.sqrt((centred ** 2).sum(axis=0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (centred[:, 1:] * centred[:, :1]).sum(axis=0) / (norms[1:] * norms[0])


def gate(rule: str, scored: Sequence[Scored], gold: np.ndarray, groups: Sequence[str] | None, challengers: list[int],
         winner: int | None, *, n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The max-corrected paired test of ``winner`` among the challengers (indices into ``scored``; 0 is the
    default) on these items.

    The winner's advantage over the default must exceed the 97.5% quantile of the bootstrap maximum,
    over every challenger, of the centred advantage (advantage on a draw minus on all items). That
    holds whichever challenger was named winner, so the test is valid for a winner chosen on other
    items too. Returns the figures, ``passed``, and each challenger's plain paired 95% interval."""
    whole, boot = objective_draws(rule, scored, gold, groups, n_resamples=n_resamples, seed=seed)
    advantage, drawn = whole - whole[0], boot - boot[:, :1]
    out: dict[str, Any] = {"items": len(gold), "groups": len(_units(groups, len(gold))) if groups else None,
                           "challengers": len(challengers), "resamples": n_resamples, "confidence": CONFIDENCE,
                           "winner": winner, "advantage": {}, "interval": {}}
    for j in challengers:
        finite = drawn[:, j][np.isfinite(drawn[:, j])]
        low, high = np.percentile(finite, [2.5, 97.5]) if finite.size else (np.nan, np.nan)
        out["advantage"][j], out["interval"][j] = _num(advantage[j]), [_num(low), _num(high)]
    usable = [j for j in challengers if np.isfinite(advantage[j])]
    if winner not in usable:
        return {**out, "winner_advantage": None, "threshold": None, "lower_bound": None, "passed": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a draw where every centred advantage is undefined
        largest = np.nanmax(drawn[:, usable] - advantage[usable], axis=1)
    largest = largest[np.isfinite(largest)]
    threshold = float(np.quantile(largest, 1 - (1 - CONFIDENCE) / 2)) if largest.size else np.inf
    lower = float(advantage[winner] - threshold)
    return {**out, "winner_advantage": _num(advantage[winner]), "threshold": _num(threshold),
            "lower_bound": _num(lower), "passed": bool(lower > 0)}


def _figure(row: dict[str, Any], rule: str) -> float:
    """A row's figure on the rule's objective, higher is better (an undefined Spearman is the worst)."""
    if rule == "mae":
        return -row["mae"]
    return -np.inf if row["spearman"] is None else row["spearman"]


def _num(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def select(study: optuna.Study, spec: RunSpec, splits: Splits, lm, *, reject: Reject | None = None,
           n_resamples: int = 1000) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parameters of the judge to ship, and the selection record (every candidate's figures, the gate).

    The default is always candidate 0; a challenger with the same parameters is not scored twice."""
    instructions = InstructionPool(study).texts()
    items, dev = splits.selection, slice(len(splits.search), len(splits.selection))
    gold = np.asarray([e.judgment for e in items], dtype=float)
    groups = groups_of(items)
    default = default_params(spec, splits.data_fixed, lm=lm, instructions=instructions)
    trials: list[tuple[int | None, dict[str, Any]]] = [(_trial_number(study, default), default)]
    trials += [(t.number, dict(t.params)) for t in candidate_trials(study, spec, exclude=[default])]
    calls0, front, every = lm_calls(lm), {t.number for t in study.best_trials}, study.get_trials(deepcopy=False)
    scored = [score_candidate(p, spec, splits, lm, instructions, items) for _, p in trials]
    rows = []
    for i, ((number, params), s) in enumerate(zip(trials, scored)):
        search = every[number].values if number is not None else None
        row = {"number": number, "default": i == 0, "params": params, "on_front": number in front,
               "search": {"mae": search[0], "spearman": search[1]} if search else None,
               "mae": float(np.mean(np.abs(s.pred - gold))), "spearman": spearman_figure(s.raw, gold, groups),
               "calibrator": s.calibrator, "failure_rate": s.failure_rate}
        row["rejected"] = None if i == 0 else rejection(row, reject)
        rows.append(row)
    challengers = [i for i, row in enumerate(rows) if i > 0 and row["rejected"] is None]
    best = max(challengers, key=lambda i: (_figure(rows[i], spec.pick), -i), default=None)
    better = best is not None and _figure(rows[best], spec.pick) > _figure(rows[0], spec.pick)
    on_dev = [Scored(s.params, s.raw[dev], s.pred[dev], s.calibrator, s.failure_rate) for s in scored]
    test = gate(spec.pick, on_dev, gold[dev], groups_of(splits.dev), challengers, best if better else None,
                n_resamples=n_resamples, seed=spec.seed)
    chosen = best if better and test["passed"] else 0
    for i, row in enumerate(rows):
        row["advantage_dev"] = test["advantage"].get(i)
        row["advantage_dev_ci"] = test["interval"].get(i)
        row["chosen"] = i == chosen
    test = {k: v for k, v in test.items() if k not in ("advantage", "interval")}
    record = {"rule": spec.pick, "gate": "on", "items": len(items), "dev_items": len(splits.dev),
              "groups": len(set(groups)) if groups else None, "rows": rows, "best_candidate": best,
              "test": test, "gated": chosen == 0, "chosen_trial": rows[chosen]["number"],
              "lm_calls": lm_calls(lm) - calls0}
    return trials[chosen][1], record


def _trial_number(study: optuna.Study, params: dict[str, Any]) -> int | None:
    """The first complete trial with exactly these parameters (the incumbent's, usually trial 0)."""
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if trial.params == params:
            return trial.number
    return None


def select_on_dev(study: optuna.Study, spec: RunSpec, splits: Splits, lm) -> tuple[dict[str, Any], dict[str, Any]]:
    """The old rule (``--gate off``): the front's strongest candidates re-scored on dev alone, and the best
    dev figure by the pick rule wins; the default is not a candidate and nothing is tested."""
    if not study.best_trials:
        raise ValueError(f"study {study.study_name} has no completed trial to choose from")
    instructions = InstructionPool(study).texts()
    front = {t.number for t in study.best_trials}
    calls0, rows = lm_calls(lm), []
    for trial in candidate_trials(study, spec, front_only=True):
        params = {**trial.params, **splits.data_fixed, **settled_params(spec, lm)}
        judge = judge_for(params, spec, lm, demo_pool=splits.demo_pool, pool=splits.dev,
                          label_range=splits.label_range, instructions=instructions)
        mae, rho, info = objectives(judge.judge_all(splits.dev), splits.dev, label_range=splits.label_range,
                                    seed=spec.seed)
        rows.append({"number": trial.number, "default": False, "params": dict(trial.params),
                     "on_front": trial.number in front, "search": {"mae": trial.values[0], "spearman": trial.values[1]},
                     "mae": mae, "spearman": rho, **info})
    key = ((lambda r: (-r["spearman"], r["mae"], -r["search"]["spearman"], r["number"])) if spec.pick == "spearman"
           else (lambda r: (r["mae"], -r["spearman"], r["search"]["mae"], r["number"])))
    chosen = min(rows, key=key)
    for row in rows:
        row["chosen"] = row is chosen
    return chosen["params"], {"rule": spec.pick, "gate": "off", "items": len(splits.dev), "rows": rows,
                              "gated": False, "chosen_trial": chosen["number"], "lm_calls": lm_calls(lm) - calls0}
