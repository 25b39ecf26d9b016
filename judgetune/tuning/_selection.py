"""Stage 7, selection and the gate: which judge ships.

The candidates are the incumbent (the kind's default settings) and the strongest few trials by
their search figures (``spec.rescore`` of them, plus the best trial of each proposed instruction).
Each is scored on every labeled non-test item (search and dev; the LM's answers are cached, so an
item a candidate already judged costs nothing), its raw scores calibrated out of fold by the
group folds every stage shares (``cross_fitted``). The pick rule's objective is the out-of-fold
MAE, or the Spearman of the raw scores (per group, averaged, where the data has groups).

The gate: one challenger, the one with the best figure on the **search items** (where it must beat
the default), is confirmed on the **dev items** alone, which took no part in choosing it, by one
paired one-sided test at level ``ALPHA`` (5%): it replaces the default only if the lower end of the
90% interval of its dev advantage (a one-sided 95% lower bound) is above zero, and its other
objective is not worse than the default's beyond noise (the 90% interval of that advantage is not
wholly below zero). Challengers never picked cost nothing. The interval is a Student t interval
over the per-question differences where the data has questions (valid with few of them when the
differences are roughly normal; fewer than ``MIN_GATE_GROUPS`` dev questions: the gate refuses and
the default ships), else a t interval over the items' jackknife pseudo-values of the difference
(fewer than ``MIN_GATE_ITEMS`` dev items: refused; a percentile bootstrap at 40 dev items passed a
null challenger in 4 of 64 tests, not 2.5%). ``spec.gate == "off"`` keeps the old rule (``select_on_dev``).

Failures, one rule (``filled``): a failed judgment is scored as a guess of the median (its raw
score the median of the judge's parsed raw scores, its calibrated one the labels' median), in
selection and in ``metrics.gain`` alike: failing costs what guessing costs.

A candidate can be rejected before the gate in one place, ``rejection`` (a predicate over its row);
the caller may add its own with ``reject=``; the default's own verdict is recorded, never acted on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna

from judgetune import stats
from judgetune.calibration import CALIBRATORS, cross_fitted
from judgetune.datasets import Example, groups_of
from judgetune.judges import MAX_MEMBERS
from judgetune.stats import FOLDS, correlation, filled, nested_gate, panel_gate, units_of, units_to_pass
from judgetune.tuning._objective import MAX_FAILURE_RATE, lm_calls, objectives, ranked
from judgetune.tuning._pool import InstructionPool
from judgetune.tuning._space import PANEL, default_params, judge_for, settled_params
from judgetune.tuning._spec import MIN_GATE_GROUPS, RunSpec
from judgetune.tuning._splits import Splits

Reject = Callable[[dict[str, Any]], "str | None"]  # a candidate's row -> why it may not ship, or None
log = logging.getLogger(__name__)
ALPHA = 0.05  # the gate's one-sided level: a challenger no better than the default passes at most 5% of its tests
CONFIDENCE = 1 - 2 * ALPHA  # the gate's two-sided interval (90%): its lower end is the one-sided 95% lower bound
LEVEL = f"{CONFIDENCE:.0%} interval, one-sided {1 - ALPHA:.0%} lower bound"  # how the record and the CLI name it
MIN_GATE_ITEMS = 20  # dev items without questions: fewer, and the gate refuses
POWER = 0.8  # units_to_pass: the dev size at which an advantage like the one measured passes this often
MIN_FOLD_ITEMS = 10  # the nested gate's held-out fold: fewer items in each, and it refuses


@dataclass
class CandidateFigures:
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
                    items: list[Example], settled: dict[str, Any]) -> CandidateFigures:
    """Raw scores of the judge of ``params`` on ``items`` and their out-of-fold calibrated predictions."""
    full = {**params, **splits.data_fixed, **settled}
    judge = judge_for(full, spec.judge, lm, seed=spec.seed, demo_pool=splits.demo_pool, label_range=splits.label_range,
                      instructions=instructions)
    verdicts = judge.judge_all(items)
    raw = np.asarray([v.score if v.parsed else np.nan for v in verdicts], dtype=float)
    return figures_of(params, raw, spec, splits, items)


def figures_of(params: dict[str, Any], raw: np.ndarray, spec: RunSpec, splits: Splits,
               items: list[Example]) -> CandidateFigures:
    """A candidate's figures from its raw scores on ``items``: out-of-fold calibrated predictions."""
    gold = np.asarray([e.judgment for e in items], dtype=float)
    ok = ~np.isnan(raw)
    pred, kind = np.full(len(items), float(np.median(gold))), None
    if ok.sum() >= 4:
        pred[ok], kind, _ = cross_fitted(raw[ok], gold[ok], label_range=splits.label_range,
                                         groups=[e.group_key for e, k in zip(items, ok) if k], seed=spec.seed)
    return CandidateFigures(params, raw, pred, kind, float(1 - ok.mean()))


def panel_candidate(scored: Sequence[CandidateFigures], members: Sequence[int], n_search: int, spec: RunSpec,
                    splits: Splits, items: list[Example]) -> CandidateFigures | None:
    """The panel of the candidates ``members`` (indices into ``scored``): each member's raw scores standardized by
    their mean and spread on the search items (no labels read), averaged over the members that judged an item
    (NaN where none did). Members with fewer than 4 judged search items or no spread are left out; None when
    fewer than 2 remain. Its parameters hold the members', their centres and scales (``PANEL``): ``judge_for``
    builds the same panel from them."""
    members = list(members)[:MAX_MEMBERS]
    raws = np.stack([scored[i].raw for i in members])
    rows, centers, scales = stats.standardizers(raws, slice(0, n_search))
    if len(rows) < 2:
        return None
    kept = [members[r] for r in rows]
    raw, _ = stats.panel_mean(raws[rows], centers, scales)
    params = {PANEL: {"members": [scored[i].params for i in kept], "center": centers, "scale": scales}}
    return figures_of(params, raw, spec, splits, items)


def spearman_figure(raw: np.ndarray, gold: np.ndarray, groups: Sequence[str] | None) -> float | None:
    """Spearman of raw scores (a failure ranks in the middle), per group and averaged where there are groups."""
    full = filled(raw)
    if groups is None:
        return correlation(full, gold)
    values = [correlation(full[idx], gold[idx]) for idx in units_of(groups, len(gold))]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def search_figure(rule: str, scored: CandidateFigures, gold: np.ndarray, groups: Sequence[str] | None, *,
                  label_range: tuple[float, float], seed: int, pooled: bool = False) -> float:
    """A candidate's figure on the search items alone (higher is better): the Spearman of its raw scores
    (per question unless ``pooled``), or minus the MAE of its scores calibrated out of fold (whole questions) on
    these items only (dev stays out of the choice)."""
    if rule == "spearman":
        rho = spearman_figure(scored.raw, gold, None if pooled else groups)
        return -np.inf if rho is None else rho
    ok = ~np.isnan(scored.raw)
    pred = np.full(len(gold), float(np.median(gold)))
    if ok.sum() >= 4:
        pred[ok], _, _ = cross_fitted(scored.raw[ok], gold[ok], label_range=label_range, seed=seed,
                                      groups=None if groups is None else [g for g, k in zip(groups, ok) if k])
    return -float(np.mean(np.abs(pred - gold)))


def search_calibrated(raw: np.ndarray, gold: np.ndarray, n_search: int, groups: Sequence[str] | None, *,
                      label_range: tuple[float, float], seed: int) -> np.ndarray:
    """Predictions for the items after the first ``n_search`` (dev) from a calibrator fitted, and its form chosen,
    on the search items alone (a failure, or too few judged search items, gets the search labels' median)."""
    search_raw, search_gold = raw[:n_search], gold[:n_search]
    ok = ~np.isnan(search_raw)
    out = np.full(len(raw) - n_search, float(np.median(search_gold)))
    if ok.sum() < 4:
        return out
    keys = None if groups is None else [g for g, k in zip(groups[:n_search], ok) if k]
    _, kind, _ = cross_fitted(search_raw[ok], search_gold[ok], groups=keys, label_range=label_range, seed=seed)
    calibrator = CALIBRATORS[kind](label_range).fit(search_raw[ok], search_gold[ok])  # quietly: one per candidate
    judged = ~np.isnan(raw[n_search:])
    out[judged] = calibrator.predict(raw[n_search:][judged])
    return out


def rejection(row: dict[str, Any], reject: Reject | None = None) -> str | None:
    """Why a candidate may not ship, or None: the one place where candidates are turned away. ``row`` holds the
    candidate's search-item figures only (``params``, ``search``, ``search_figure``, ``failure_rate``)."""
    if row["failure_rate"] > MAX_FAILURE_RATE:
        return f"failed on {row['failure_rate']:.0%} of the items"
    return reject(row) if reject is not None else None


def paired_advantages(rule: str, scored: Sequence[CandidateFigures], gold: np.ndarray,
                      groups: Sequence[str] | None) -> list[dict[str, Any]]:
    """Each candidate's advantage over candidate 0 with its paired t interval (``stats.paired_advantages``)."""
    return stats.paired_advantages(rule, np.stack([c.raw for c in scored]), np.stack([c.pred for c in scored]), gold,
                                   groups, CONFIDENCE)


def gate(rule: str, scored: Sequence[CandidateFigures], gold: np.ndarray, groups: Sequence[str] | None,
         challengers: list[int], winner: int | None) -> dict[str, Any]:
    """The paired test of ``winner`` (an index into ``scored``, chosen on other items; 0 is the default) on
    these items: it passes when the lower end of its advantage's 90% interval (a one-sided 95% bound) is
    above 0 and its other objective's interval is not wholly below 0. Returns the figures, ``passed``,
    ``refused`` (why no test could be made, or None) and each challenger's paired advantage and interval
    (descriptive)."""
    units = len(units_of(groups, len(gold)))
    out: dict[str, Any] = {"items": len(gold), "groups": units if groups else None, "challengers": len(challengers),
                           "confidence": CONFIDENCE, "alpha": ALPHA, "level": LEVEL, "winner": winner,
                           "advantage": {}, "interval": {},
                           "method": "t over questions" if groups else "jackknife t over items", "refused": None}
    figures = paired_advantages(rule, scored, gold, groups)
    for j in challengers:
        out["advantage"][j], out["interval"][j] = figures[j]["advantage"], figures[j]["interval"]
    least, unit_name = (MIN_GATE_GROUPS, "questions") if groups else (MIN_GATE_ITEMS, "items")
    if units < least:
        more = "--dev-items, or keep fewer answers per question (--per-question N)" if groups else "--dev-items"
        out["refused"] = (f"the dev split holds {units} {unit_name}; a paired test needs at least {least}: "
                          f"the default ships (raise {more})")
    empty = {"winner_advantage": None, "lower_bound": None, "guard": None, "passed": False}
    if winner is not None and out["refused"] is None and figures[winner]["units"] < least:
        defined = figures[winner]["units"]  # a question undefined for either judge leaves the test
        out["refused"] = (f"the dev split holds {units} {unit_name}, {defined} of them defined for both judges; "
                          f"a paired test needs at least {least}: the default ships")
    if winner is None or out["refused"] is not None:
        return {**out, **empty}
    win = figures[winner]
    other = "spearman" if rule == "mae" else "mae"
    guard = paired_advantages(other, [scored[0], scored[winner]], gold, groups)[1]
    worse = guard["interval"][1] is not None and guard["interval"][1] < 0
    guard = {"objective": other, "advantage": guard["advantage"], "interval": guard["interval"], "worse": worse}
    lower = win["interval"][0]
    passed = lower is not None and lower > 0 and not worse
    return {**out, "winner_advantage": win["advantage"], "lower_bound": lower, "guard": guard, "passed": passed,
            "units_to_pass": None if passed or worse else units_to_pass(win["advantage"], lower, units, alpha=ALPHA,
                                                                        power=POWER)}


def _num(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def select(study: optuna.Study, spec: RunSpec, splits: Splits, lm, *, reject: Reject | None = None,
           default: dict[str, Any] | None = None,
           settled: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parameters of the judge to ship, and the selection record (every candidate's figures, the gate).

    The default is always candidate 0; a challenger with the same parameters is not scored twice. ``default``
    and ``settled`` (``default_params`` and ``settled_params`` of the run) are computed when not given."""
    instructions = InstructionPool(study).texts()
    items, n_search = splits.selection, len(splits.search)
    dev = slice(n_search, len(items))
    gold = np.asarray([e.judgment for e in items], dtype=float)
    groups = groups_of(items)
    ranked = None if spec.pooled else groups  # what Spearman ranks within: the questions, or every item (pooled)
    if default is None:
        default = default_params(spec, splits.data_fixed, lm=lm, instructions=instructions,
                                 demo_pool=splits.demo_pool, label_range=splits.label_range)
    if settled is None:
        settled = settled_params(spec, lm)
    trials: list[tuple[int | None, dict[str, Any]]] = [(_trial_number(study, default), default)]
    trials += [(t.number, dict(t.params)) for t in candidate_trials(study, spec, exclude=[default])]
    calls0, front, every = lm_calls(lm), {t.number for t in study.best_trials}, study.get_trials(deepcopy=False)
    scored = [score_candidate(p, spec, splits, lm, instructions, items, settled) for _, p in trials]
    panel = panel_candidate(scored, range(len(scored)), n_search, spec, splits, items) if spec.panel else None
    if panel is not None:  # one more candidate, from the members' scores: no LM call
        trials.append((None, panel.params))
        scored.append(panel)
    on_search = [CandidateFigures(s.params, s.raw[:n_search], s.pred[:n_search], s.calibrator, s.failure_rate)
                 for s in scored]
    rows = []
    for i, ((number, params), s) in enumerate(zip(trials, scored)):
        search = every[number].values if number is not None else None
        row = {"number": number, "default": i == 0, "params": params, "on_front": number in front,
               **({"panel": True} if PANEL in params else {}),
               "search": {"mae": search[0], "spearman": search[1]} if search else None,
               "mae": float(np.mean(np.abs(s.pred - gold))),
               "spearman": spearman_figure(s.raw, gold, ranked),
               "search_figure": _num(search_figure(spec.pick, on_search[i], gold[:n_search], groups_of(splits.search),
                                                   label_range=splits.label_range, seed=spec.seed,
                                                   pooled=spec.pooled)),
               "calibrator": s.calibrator, "failure_rate": s.failure_rate}
        # rejection reads the search items alone (dev confirms, it does not choose): the failure share there,
        # the search figures
        search_row = {"number": number, "default": i == 0, "params": params, "search": row["search"],
                      "search_figure": row["search_figure"], "failure_rate": float(np.isnan(s.raw[:n_search]).mean())}
        verdict = rejection(search_row, reject)
        row["rejected"] = None if i == 0 else verdict
        if i == 0:
            row["flagged"] = verdict  # the default's own verdict (e.g. --audit-max): recorded, it stays the fallback
        rows.append(row)
    challengers = [i for i, row in enumerate(rows) if i > 0 and row["rejected"] is None]
    figure = [-np.inf if r["search_figure"] is None else r["search_figure"] for r in rows]
    best = max(challengers, key=lambda i: (figure[i], -i), default=None)
    winner = best if best is not None and figure[best] > figure[0] else None  # chosen on the search items alone
    # the dev items take no part in choosing: each candidate's dev predictions come from a calibrator fitted (and
    # its form chosen) on the search items alone
    on_dev = [CandidateFigures(s.params, s.raw[dev], search_calibrated(s.raw, gold, n_search, groups,
                                                                      label_range=splits.label_range, seed=spec.seed),
                              s.calibrator, s.failure_rate) for s in scored]
    gate_result = gate(spec.pick, on_dev, gold[dev], None if spec.pooled else groups_of(splits.dev), challengers,
                       winner)
    if spec.gate == "nested":  # every labeled item chooses and confirms (see judgetune.stats.nested_gate)
        panel_index = len(scored) - 1 if panel is not None and len(scored) - 1 in challengers else None
        winner, gate_result = nested_test(scored, gold, ranked, challengers, seed=spec.seed,
                                          described=gate_result, panel=panel_index)
    chosen = winner if winner is not None and gate_result["passed"] else 0
    if gate_result["refused"]:
        log.warning("%s: the gate made no test: %s", spec.name, gate_result["refused"])
    if chosen == 0 and rows[0]["flagged"]:
        log.warning("%s: the default judge ships but was itself flagged: %s", spec.name, rows[0]["flagged"])
    for i, row in enumerate(rows):
        row["advantage_dev"] = gate_result["advantage"].get(i)
        row["advantage_dev_ci"] = gate_result["interval"].get(i)
        row["chosen"] = i == chosen
    gate_result = {k: v for k, v in gate_result.items() if k not in ("advantage", "interval")}
    record = {"rule": spec.pick, "gate": spec.gate, "items": len(items), "dev_items": len(splits.dev),
              "groups": len(set(groups)) if groups else None, "rows": rows, "best_candidate": winner,
              "gate_result": gate_result, "default_shipped": chosen == 0, "chosen_trial": rows[chosen]["number"],
              "lm_calls": lm_calls(lm) - calls0}
    return trials[chosen][1], record


def nested_test(scored: Sequence[CandidateFigures], gold: np.ndarray, groups: Sequence[str] | None,
                challengers: list[int], *, seed: int, described: dict[str, Any],
                panel: int | None = None) -> tuple[int | None, dict[str, Any]]:
    """The nested gate on every selection item (search and dev): the winner is the challenger best on all of
    them, and it passes when the nested cross-validated test of the whole choice does. With a ``panel`` (its
    index; made from the others' scores) the panel is also tested, alone, the level split between the two tests,
    and the passing one with the larger estimated gain wins (``judgetune.stats.panel_gate``). ``described`` (the
    dev gate's record) keeps its per-challenger dev figures, which are descriptive here."""
    raw = np.stack([c.raw for c in scored])
    allowed = [0, *challengers]
    units = len(units_of(groups, len(gold)))
    least = FOLDS if groups else MIN_FOLD_ITEMS * FOLDS  # a question, or 10 items, in every held-out fold
    if panel is None:
        result = nested_gate(raw, gold, groups, allowed=allowed, seed=seed, alpha=ALPHA)
    else:
        result = panel_gate(raw, gold, groups, panel=panel, allowed=allowed, seed=seed, alpha=ALPHA)
    winner = result["chosen"] or None
    refused = None
    if units < least:
        refused = (f"the search and dev items hold {units} {'questions' if groups else 'items'}; the nested gate "
                   f"needs at least {least}: the default ships")
    passed = bool(result["passed"]) and refused is None
    level = (f"one-sided {1 - ALPHA:.0%} lower bound" if panel is None  # panel_gate tests twice, each at ALPHA / 2
             else f"one-sided {1 - ALPHA / 2:.1%} lower bound (the level split between the panel and the nested gate)")
    return winner, {**described, "method": result["method"], "winner": winner, "refused": refused, "level": level,
                    "items": len(gold), "groups": units if groups else None,
                    "winner_advantage": result["mean"], "lower_bound": result["lower"], "p": result["p"],
                    "units": result["units"], "fold_choices": result["fold_choices"], "guard": None,
                    "passed": passed, "units_to_pass": None, **{k: result[k] for k in ("panel", "nested") if k in result}}


def _trial_number(study: optuna.Study, params: dict[str, Any]) -> int | None:
    """The first complete trial with exactly these parameters (the incumbent's, usually trial 0)."""
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if trial.params == params:
            return trial.number
    return None


def select_on_dev(study: optuna.Study, spec: RunSpec, splits: Splits, lm, *,
                  settled: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The old rule (``--gate off``): the front's strongest candidates re-scored on dev alone, and the best
    dev figure by the pick rule wins; the default is not a candidate and nothing is tested."""
    if not study.best_trials:
        raise ValueError(f"study {study.study_name} has no completed trial to choose from")
    if settled is None:
        settled = settled_params(spec, lm)
    instructions = InstructionPool(study).texts()
    front = {t.number for t in study.best_trials}
    calls0, rows = lm_calls(lm), []
    for trial in candidate_trials(study, spec, front_only=True):
        params = {**trial.params, **splits.data_fixed, **settled}
        judge = judge_for(params, spec.judge, lm, seed=spec.seed, demo_pool=splits.demo_pool,
                          label_range=splits.label_range, instructions=instructions)
        mae, rho, info = objectives(judge.judge_all(splits.dev), splits.dev, label_range=splits.label_range,
                                    seed=spec.seed, pooled=spec.pooled)
        rows.append({"number": trial.number, "default": False, "params": dict(trial.params),
                     "on_front": trial.number in front, "search": {"mae": trial.values[0], "spearman": trial.values[1]},
                     "mae": mae, "spearman": rho, **info})
    key = ((lambda r: (-r["spearman"], r["mae"], -r["search"]["spearman"], r["number"])) if spec.pick == "spearman"
           else (lambda r: (r["mae"], -r["spearman"], r["search"]["mae"], r["number"])))
    chosen = min(rows, key=key)
    for row in rows:
        row["chosen"] = row is chosen
    return chosen["params"], {"rule": spec.pick, "gate": "off", "items": len(splits.dev), "rows": rows,
                              "default_shipped": False, "chosen_trial": chosen["number"], "lm_calls": lm_calls(lm) - calls0}
