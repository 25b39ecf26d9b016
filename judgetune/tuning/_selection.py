"""Stage 7, selection and the gate: which judge ships.

The candidates are the incumbent (the kind's default settings) and the strongest few trials by
their search figures (``spec.rescore`` of them, plus the best trial of each proposed instruction).
Each is scored on every labeled non-test item the run keeps (``Splits.selection``: the search items,
the demo pool's items and dev; at most ``spec.gate_items``). A pool item is judged by the candidate
built on the pool's other folds (its demos and its fit never hold the item), so it is as fresh as a
dev item. Raw scores are calibrated out of fold by the group folds every stage shares
(``cross_fitted``). The LM's answers are cached: an item a candidate already judged costs nothing.

The search items chose the candidates (they are the strongest trials there), so they choose but
never confirm: every test of the gate is made on the other items (pool and dev), which no candidate
was chosen on.

- ``nested`` (the default): the candidate best on every item is tested by nested cross-validation of
  the choice itself (``judgetune.stats.nested_gate``; the search items in every fold's choice, the
  other items held out in turn), one-sided at ``ALPHA``.
- ``on``: one challenger, the one best on the search items, is tested on the pool and dev items by one
  paired one-sided t test at ``ALPHA`` (its other objective not worse beyond noise).
- With ``spec.panel`` the panel of the candidates not rejected (each standardized on the search
  items, no label read) is one more challenger, tested alone on the pool and dev items beside the
  gate, the level split between the two (``judgetune.stats.panel_gate``).

Failures, one rule (``filled``): a failed judgment is scored as a guess of the median, in selection
and in ``metrics.gain`` alike. A candidate is rejected before the gate in one place, ``rejection``
(a predicate over its search figures; the caller may add its own with ``reject=``); the default's own
verdict is recorded, never acted on. Rejected candidates neither ship nor sit on the panel.
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
from judgetune.datasets import Example, group_folds, groups_of
from judgetune.errors import JudgetuneError
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
MIN_GATE_ITEMS = 20  # confirming items without questions (--gate on): fewer, and the gate refuses
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


@dataclass
class SelectionItems:
    """The labels selection reads: ``gold`` and ``groups`` of every selection item, the first ``n_search`` of them the
    search items, ``groups_ranked`` what Spearman ranks within (None when pooled)."""

    gold: np.ndarray
    groups: list[str] | None
    n_search: int
    label_range: tuple[float, float]
    pooled: bool = False

    @classmethod
    def of(cls, splits: Splits, pooled: bool = False) -> SelectionItems:
        items = splits.selection
        return cls(np.asarray([e.judgment for e in items], dtype=float), groups_of(items), len(splits.search),
                   splits.label_range, pooled)

    @property
    def groups_ranked(self) -> list[str] | None:
        return None if self.pooled else self.groups

    @property
    def confirming(self) -> np.ndarray:
        """The items that confirm (every item but the search items, which chose the candidates)."""
        mask = np.ones(len(self.gold), dtype=bool)
        mask[:self.n_search] = False
        return mask


def score_candidate(params: dict[str, Any], spec: RunSpec, splits: Splits, lm, instructions: Sequence[str],
                    settled: dict[str, Any]) -> np.ndarray:
    """Raw scores (NaN where it failed) of the judge of ``params`` on every selection item: the search and dev items
    by the judge built on the whole demo pool, each fold of the pool's confirming items by the judge built on the
    pool's other items (cross-fitted: no item is its own demo or in its own fit)."""
    full = {**params, **splits.data_fixed, **settled}

    def judged(items: list[Example], pool: list[Example]) -> list[float]:
        if not items:
            return []
        try:
            judge = judge_for(full, spec.judge, lm, seed=spec.seed, demo_pool=pool, label_range=splits.label_range,
                              instructions=instructions)
        except (JudgetuneError, ValueError) as err:  # a fold's pool too small to fit on: its items fail, counted
            log.warning("%s: a candidate could not be built on %d pool items (%s): its %d items count as failed",
                        spec.name, len(pool), err, len(items))
            return [np.nan] * len(items)
        return [v.score if v.parsed else np.nan for v in judge.judge_all(items)]

    search = judged(splits.search, splits.demo_pool)
    dev = judged(splits.dev, splits.demo_pool)
    pool_raw = np.full(len(splits.confirming_pool), np.nan)
    if splits.confirming_pool:
        index = {id(e): i for i, e in enumerate(splits.demo_pool)}
        pool_groups = [e.group_key for e in splits.demo_pool]
        splitter, keys = group_folds(len(splits.demo_pool), pool_groups, folds=FOLDS, seed=spec.seed)
        fold_of = np.empty(len(splits.demo_pool), dtype=int)
        for f, (_, held) in enumerate(splitter.split(np.arange(len(keys)), groups=keys)):
            fold_of[held] = f
        for f in sorted(set(fold_of.tolist())):
            rest = [e for e, k in zip(splits.demo_pool, fold_of) if k != f]
            mine = [i for i, e in enumerate(splits.confirming_pool) if fold_of[index[id(e)]] == f]
            pool_raw[mine] = judged([splits.confirming_pool[i] for i in mine], rest)
    return np.asarray([*search, *pool_raw, *dev], dtype=float)


def figures_of(params: dict[str, Any], raw: np.ndarray, items: SelectionItems, seed: int) -> CandidateFigures:
    """A candidate's figures from its raw scores on the selection items: out-of-fold calibrated predictions."""
    gold = items.gold
    ok = ~np.isnan(raw)
    pred, kind = np.full(len(gold), float(np.median(gold))), None
    if ok.sum() >= 4:
        keys = None if items.groups is None else [g for g, k in zip(items.groups, ok) if k]
        pred[ok], kind, _ = cross_fitted(raw[ok], gold[ok], label_range=items.label_range, groups=keys, seed=seed)
    return CandidateFigures(params, raw, pred, kind, float(1 - ok.mean()))


def panel_candidate(scored: Sequence[CandidateFigures], members: Sequence[int], items: SelectionItems,
                    seed: int) -> CandidateFigures | None:
    """The panel of the candidates ``members`` (indices into ``scored``): each member's raw scores standardized by
    their mean and spread on the search items (no labels read), averaged over the members that judged an item
    (NaN where none did). Members with fewer than 4 judged search items or no spread are left out; None when
    fewer than 2 remain. Its parameters hold the members', their centres and scales (``PANEL``): ``judge_for``
    builds the same panel from them."""
    members = list(members)[:MAX_MEMBERS]
    raws = np.stack([scored[i].raw for i in members])
    rows, centers, scales = stats.standardizers(raws, slice(0, items.n_search))
    if len(rows) < 2:
        return None
    kept = [members[r] for r in rows]
    raw, _ = stats.panel_mean(raws[rows], centers, scales)
    params = {PANEL: {"members": [scored[i].params for i in kept], "center": centers, "scale": scales}}
    return figures_of(params, raw, items, seed)


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
    figures = stats.paired_advantages(rule, np.stack([c.raw for c in scored]), np.stack([c.pred for c in scored]),
                                      gold, groups, CONFIDENCE)
    for j in challengers:
        out["advantage"][j], out["interval"][j] = figures[j]["advantage"], figures[j]["interval"]
    least, unit_name = (MIN_GATE_GROUPS, "questions") if groups else (MIN_GATE_ITEMS, "items")
    if units < least:
        more = ("--dev-items or --gate-items, or keep fewer answers per question (--per-question N)" if groups
                else "--dev-items or --gate-items")
        out["refused"] = (f"the confirming items (pool and dev) hold {units} {unit_name}; a paired test needs at "
                          f"least {least}: "
                          f"the default ships (raise {more})")
    empty = {"winner_advantage": None, "lower_bound": None, "guard": None, "passed": False}
    if winner is not None and out["refused"] is None and figures[winner]["units"] < least:
        defined = figures[winner]["units"]  # a question undefined for either judge leaves the test
        out["refused"] = (f"the confirming items hold {units} {unit_name}, {defined} of them defined for both judges; "
                          f"a paired test needs at least {least}: the default ships")
    if winner is None or out["refused"] is not None:
        return {**out, **empty}
    win = figures[winner]
    other = "spearman" if rule == "mae" else "mae"
    pair = [scored[0], scored[winner]]
    guard = stats.paired_advantages(other, np.stack([c.raw for c in pair]), np.stack([c.pred for c in pair]), gold,
                                    groups, CONFIDENCE)[1]
    worse = guard["interval"][1] is not None and guard["interval"][1] < 0
    guard = {"objective": other, "advantage": guard["advantage"], "interval": guard["interval"], "worse": worse}
    lower = win["interval"][0]
    passed = lower is not None and lower > 0 and not worse
    return {**out, "winner_advantage": win["advantage"], "lower_bound": lower, "guard": guard, "passed": passed,
            "units_to_pass": None if passed or worse else units_to_pass(win["advantage"], lower, units, alpha=ALPHA,
                                                                        power=POWER)}


def _num(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


@dataclass
class Candidate:
    """A candidate before it is scored: its trial (None when it is no trial of the study), its settings, the trial's
    search figures ``(MAE, Spearman)`` (None when it is no trial) and whether the trial is on the Pareto front."""

    number: int | None
    params: dict[str, Any]
    search: tuple[float, float] | None = None
    on_front: bool = False


def candidates_of(study: optuna.Study, spec: RunSpec, default: dict[str, Any]) -> list[Candidate]:
    """The default, then the strongest trials by their search figures (``candidate_trials``)."""
    every, front = study.get_trials(deepcopy=False), {t.number for t in study.best_trials}
    numbered = [(_trial_number(study, default), default)]
    numbered += [(t.number, dict(t.params)) for t in candidate_trials(study, spec, exclude=[default])]
    return [Candidate(n, p, None if n is None else tuple(every[n].values), n in front) for n, p in numbered]


def candidate_row(index: int, candidate: Candidate, scored: CandidateFigures, items: SelectionItems, spec: RunSpec,
                  reject: Reject | None) -> dict[str, Any]:
    """A candidate's selection row: its figures on every selection item, its search figure, and why it may not ship
    (``rejected``; read off the search items alone: the confirming items take no part in choosing)."""
    n = items.n_search
    on_search = CandidateFigures(scored.params, scored.raw[:n], scored.pred[:n], scored.calibrator,
                                 scored.failure_rate)
    search = candidate.search
    row = {"number": candidate.number, "default": index == 0, "params": candidate.params,
           "on_front": candidate.on_front, **({"panel": True} if PANEL in candidate.params else {}),
           "search": {"mae": search[0], "spearman": search[1]} if search else None,
           "mae": float(np.mean(np.abs(scored.pred - items.gold))),
           "spearman": spearman_figure(scored.raw, items.gold, items.groups_ranked),
           "search_figure": _num(search_figure(spec.pick, on_search, items.gold[:n],
                                               None if items.groups is None else items.groups[:n],
                                               label_range=items.label_range, seed=spec.seed, pooled=spec.pooled)),
           "calibrator": scored.calibrator, "failure_rate": scored.failure_rate}
    search_row = {key: row[key] for key in ("number", "default", "params", "search", "search_figure")}
    verdict = rejection({**search_row, "failure_rate": float(np.isnan(scored.raw[:n]).mean())}, reject)
    row["rejected"] = None if index == 0 else verdict
    if index == 0:
        row["flagged"] = verdict  # the default's own verdict (e.g. --audit-max): recorded, it stays the fallback
    return row


def choose(spec: RunSpec, candidates: list[Candidate], raws: Sequence[np.ndarray], items: SelectionItems, *,
           reject: Reject | None = None) -> tuple[int, dict[str, Any]]:
    """The index of the candidate that ships (0, the default, unless the gate passes) and the selection record,
    from the candidates' raw scores on the selection items: no LM call (the benchmarks replay it on saved scores)."""
    candidates = list(candidates)
    scored = [figures_of(c.params, raw, items, spec.seed) for c, raw in zip(candidates, raws)]
    rows = [candidate_row(i, c, f, items, spec, reject) for i, (c, f) in enumerate(zip(candidates, scored))]
    challengers = [i for i, row in enumerate(rows) if i > 0 and row["rejected"] is None]
    panel = panel_candidate(scored, [0, *challengers], items, spec.seed) if spec.panel else None
    if panel is not None:  # one more candidate, from the members' scores: no LM call
        candidates.append(Candidate(None, panel.params))
        scored.append(panel)
        rows.append(candidate_row(len(rows), candidates[-1], panel, items, spec, reject))
        challengers += [len(rows) - 1] if rows[-1]["rejected"] is None else []
    if spec.gate == "nested":
        panel_index = len(rows) - 1 if panel is not None and rows[-1]["rejected"] is None else None
        winner, gate_result = nested_test(scored, items, challengers, seed=spec.seed, panel=panel_index)
    else:
        winner, gate_result = confirming_test(spec, scored, rows, items, challengers)
    chosen = winner if winner is not None and gate_result["passed"] else 0
    _describe(rows, scored, items, chosen, spec)
    record = {"rule": spec.pick, "gate": spec.gate, "items": len(items.gold), "search_items": items.n_search,
              "confirming_items": int(items.confirming.sum()),
              "groups": len(set(items.groups)) if items.groups else None, "rows": rows, "best_candidate": winner,
              "gate_result": gate_result, "default_shipped": chosen == 0, "chosen_trial": rows[chosen]["number"]}
    return chosen, record


def confirming_test(spec: RunSpec, scored: list[CandidateFigures], rows: list[dict[str, Any]], items: SelectionItems,
                    challengers: list[int]) -> tuple[int | None, dict[str, Any]]:
    """``--gate on``: the challenger best on the search items (ahead of the default there) is tested on the
    confirming items, each candidate's predictions there from a calibrator fitted on the search items alone."""
    figure = [-np.inf if r["search_figure"] is None else r["search_figure"] for r in rows]
    best = max(challengers, key=lambda i: (figure[i], -i), default=None)
    winner = best if best is not None and figure[best] > figure[0] else None
    held, n = items.confirming, items.n_search
    on_held = [CandidateFigures(s.params, s.raw[held], search_calibrated(s.raw, items.gold, n, items.groups,
                                                                         label_range=items.label_range,
                                                                         seed=spec.seed),
                                s.calibrator, s.failure_rate) for s in scored]
    groups = None if items.groups_ranked is None else [g for g, k in zip(items.groups, held) if k]
    result = gate(spec.pick, on_held, items.gold[held], groups, challengers, winner)
    return winner, {k: v for k, v in result.items() if k not in ("advantage", "interval")}


def _describe(rows: list[dict[str, Any]], scored: list[CandidateFigures], items: SelectionItems, chosen: int,
              spec: RunSpec) -> None:
    """Each row's advantage over the default on the confirming items with its 90% paired interval (descriptive:
    the gate's test is its own), and which row ships; the warnings a run's choice earns."""
    held = items.confirming
    groups = None if items.groups_ranked is None else [g for g, k in zip(items.groups, held) if k]
    figures = stats.paired_advantages(spec.pick, np.stack([s.raw[held] for s in scored]),
                                      np.stack([s.pred[held] for s in scored]), items.gold[held], groups, CONFIDENCE)
    for i, row in enumerate(rows):
        row["advantage_confirming"] = None if i == 0 else figures[i]["advantage"]
        row["advantage_confirming_ci"] = None if i == 0 else figures[i]["interval"]
        row["chosen"] = i == chosen
    if chosen == 0 and rows[0]["flagged"]:
        log.warning("%s: the default judge ships but was itself flagged: %s", spec.name, rows[0]["flagged"])


def select(study: optuna.Study, spec: RunSpec, splits: Splits, lm, *, reject: Reject | None = None,
           default: dict[str, Any] | None = None,
           settled: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parameters of the judge to ship, and the selection record (every candidate's figures, the gate).

    The default is always candidate 0; a challenger with the same parameters is not scored twice. ``default``
    and ``settled`` (``default_params`` and ``settled_params`` of the run) are computed when not given."""
    instructions = InstructionPool(study).texts()
    if default is None:
        default = default_params(spec, splits.data_fixed, lm=lm, instructions=instructions,
                                 demo_pool=splits.demo_pool, label_range=splits.label_range)
    if settled is None:
        settled = settled_params(spec, lm)
    candidates = candidates_of(study, spec, default)
    items = SelectionItems.of(splits, spec.pooled)
    log.info("%s: scoring %d candidates on %d items (%d search, %d pool, %d dev): up to %d judgments", spec.name,
             len(candidates), len(items.gold), len(splits.search), len(splits.confirming_pool), len(splits.dev),
             len(candidates) * len(items.gold))
    calls0 = lm_calls(lm)
    raws = [score_candidate(c.params, spec, splits, lm, instructions, settled) for c in candidates]
    chosen, record = choose(spec, candidates, raws, items, reject=reject)
    if record["gate_result"].get("refused"):
        log.warning("%s: the gate made no test: %s", spec.name, record["gate_result"]["refused"])
    record.update(pool_items=len(splits.confirming_pool), dev_items=len(splits.dev), lm_calls=lm_calls(lm) - calls0)
    return record["rows"][chosen]["params"], record


def nested_test(scored: Sequence[CandidateFigures], items: SelectionItems, challengers: list[int], *, seed: int,
                panel: int | None = None) -> tuple[int | None, dict[str, Any]]:
    """The nested gate on every selection item: the winner is the challenger best on all of them, and it passes when
    the nested cross-validated test of the whole choice does (the confirming items held out in turn). With a
    ``panel`` (its index; made from the others' scores) the panel is also tested, alone, on the confirming items,
    the level split between the two tests, and the passing one with the larger estimated gain wins
    (``judgetune.stats.panel_gate``)."""
    raw, gold, groups = np.stack([c.raw for c in scored]), items.gold, items.groups_ranked
    allowed, held = [0, *challengers], items.confirming
    units = len(units_of(None if groups is None else [g for g, k in zip(groups, held) if k], int(held.sum())))
    least = FOLDS if groups else MIN_FOLD_ITEMS * FOLDS  # a question, or 10 items, in every held-out fold
    if panel is None:
        result = nested_gate(raw, gold, groups, allowed=allowed, seed=seed, alpha=ALPHA, tested=held)
    else:
        result = panel_gate(raw, gold, groups, panel=panel, allowed=allowed, seed=seed, alpha=ALPHA, tested=held)
    winner = result["chosen"] or None
    refused = None
    if units < least:
        refused = (f"the confirming items (pool and dev) hold {units} {'questions' if groups else 'items'}; the "
                   f"nested gate needs at least {least}: the default ships")
    level = (f"one-sided {1 - ALPHA:.0%} lower bound" if panel is None  # panel_gate tests twice, each at ALPHA / 2
             else f"one-sided {1 - ALPHA / 2:.1%} lower bound (the level split between the panel and the nested gate)")
    return winner, {"method": result["method"], "winner": winner, "refused": refused, "level": level,
                    "confidence": CONFIDENCE, "alpha": ALPHA, "items": len(gold), "confirming_items": int(held.sum()),
                    "groups": units if groups else None, "challengers": len(challengers),
                    "winner_advantage": result["mean"], "lower_bound": result["lower"], "p": result["p"],
                    "units": result["units"], "fold_choices": result["fold_choices"],
                    "passed": bool(result["passed"]) and refused is None,
                    **{k: result[k] for k in ("panel", "nested") if k in result}}


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
