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

The confirming items are judged as the early-stopping gate decides (``_racing``): challengers that cannot beat
the default stop being judged as soon as that is clear, and stopping never ships.

Failures, one rule (``filled``): a failed judgment is scored as a guess of the median, in selection
and in ``metrics.gain`` alike. A candidate is rejected before the gate in one place, ``rejection``
(a predicate over its search figures; the caller may add its own with ``reject=``); the default's own
verdict is recorded, never acted on. Rejected candidates neither ship nor sit on the panel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import optuna

from judgetune import stats
from judgetune.judges import judge_class
from judgetune.stats import FOLDS, nested_gate, panel_gate, units_of, units_to_pass
from judgetune.tuning._candidates import Candidate, candidate_trials, candidates_of, family_candidates
from judgetune.tuning._figures import (
    CandidateFigures,
    FiguresCache,
    SelectionItems,
    figures_of,
    panel_candidate,
    search_calibrated,
    search_figure,
    spearman_figure,
)
from judgetune.tuning._objective import MAX_FAILURE_RATE, lm_calls, objectives
from judgetune.tuning._pool import InstructionPool
from judgetune.tuning._racing import MIN_FOLD_ITEMS, Race, Scorer, race
from judgetune.tuning._scoring import CandidateScorer
from judgetune.tuning._space import FAMILY, PANEL, default_params, judge_for, settled_params
from judgetune.tuning._spec import MIN_GATE_GROUPS, RunSpec
from judgetune.tuning._splits import Splits

__all__ = ["ALPHA", "Candidate", "CandidateFigures", "Reject", "SelectionItems", "candidate_trials", "choose",
           "confirming_test", "gate", "nested_test", "rejection", "select", "select_on_dev", "spearman_figure",
           "with_rescore"]

Reject = Callable[[dict[str, Any]], "str | None"]  # a candidate's row -> why it may not ship, or None
log = logging.getLogger(__name__)
ALPHA = 0.05  # the gate's one-sided level: a challenger no better than the default passes at most 5% of its tests
CONFIDENCE = 1 - 2 * ALPHA  # the gate's two-sided interval (90%): its lower end is the one-sided 95% lower bound
LEVEL = f"{CONFIDENCE:.0%} interval, one-sided {1 - ALPHA:.0%} lower bound"  # how the record and the CLI name it
MIN_GATE_ITEMS = 20  # confirming items without questions (--gate on): fewer, and the gate refuses
POWER = 0.8  # units_to_pass: the dev size at which an advantage like the one measured passes this often


def rejection(row: dict[str, Any], reject: Reject | None = None) -> str | None:
    """Why a candidate may not ship, or None: the one place where candidates are turned away. ``row`` holds the
    candidate's search-item figures only (``params``, ``search``, ``search_figure``, ``failure_rate``)."""
    if row["failure_rate"] > MAX_FAILURE_RATE:
        return f"failed on {row['failure_rate']:.0%} of the items"
    return reject(row) if reject is not None else None


def gate(rule: str, scored: Sequence[CandidateFigures], gold: np.ndarray, groups: Sequence[str] | None,
         challengers: list[int], winner: int | None, clusters: Sequence[str] | None = None) -> dict[str, Any]:
    """The paired test of ``winner`` (an index into ``scored``, chosen on other items; 0 is the default) on
    these items: it passes when the lower end of its advantage's 90% interval (a one-sided 95% bound) is
    above 0 and its other objective's interval is not wholly below 0. Returns the figures, ``passed``,
    ``refused`` (why no test could be made, or None) and each challenger's paired advantage and interval
    (descriptive). ``clusters``: pooled data's questions, resampled whole by the paired test."""
    units = len(units_of(groups, len(gold)))
    out: dict[str, Any] = {"items": len(gold), "groups": units if groups else None, "challengers": len(challengers),
                           "confidence": CONFIDENCE, "alpha": ALPHA, "level": LEVEL, "winner": winner,
                           "advantage": {}, "interval": {}, "refused": None}
    figures = stats.paired_advantages(rule, np.stack([c.raw for c in scored]), np.stack([c.pred for c in scored]),
                                      gold, groups, CONFIDENCE, clusters)
    out["method"] = figures[0]["method"]
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
    if winner is not None and out["refused"] is None and clusters is not None and not groups:
        if figures[winner]["units"] < MIN_GATE_GROUPS:  # pooled: the t is over the questions the items come from
            out["refused"] = (f"the confirming items come from {figures[winner]['units']} questions; a paired test "
                              f"resampling them needs at least {MIN_GATE_GROUPS}: the default ships")
    elif winner is not None and out["refused"] is None and figures[winner]["units"] < least:
        defined = figures[winner]["units"]  # a question undefined for either judge leaves the test
        out["refused"] = (f"the confirming items hold {units} {unit_name}, {defined} of them defined for both judges; "
                          f"a paired test needs at least {least}: the default ships")
    if winner is None or out["refused"] is not None:
        return {**out, **empty}
    win = figures[winner]
    other = "spearman" if rule == "mae" else "mae"
    pair = [scored[0], scored[winner]]
    guard = stats.paired_advantages(other, np.stack([c.raw for c in pair]), np.stack([c.pred for c in pair]), gold,
                                    groups, CONFIDENCE, clusters)[1]
    worse = guard["interval"][1] is not None and guard["interval"][1] < 0
    guard = {"objective": other, "advantage": guard["advantage"], "interval": guard["interval"], "worse": worse}
    lower = win["interval"][0]
    passed = lower is not None and lower > 0 and not worse
    return {**out, "winner_advantage": win["advantage"], "lower_bound": lower, "guard": guard, "passed": passed,
            "units_to_pass": None if passed or worse else units_to_pass(win["advantage"], lower, units, alpha=ALPHA,
                                                                        power=POWER)}


def _num(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def search_row(index: int, candidate: Candidate, raw: np.ndarray, items: SelectionItems, spec: RunSpec,
               reject: Reject | None) -> dict[str, Any]:
    """A candidate's figures on the search items alone and why it may not ship (``rejected``): the confirming items
    take no part in choosing. ``raw``: its scores on the search items."""
    n = items.n_search
    on_search = CandidateFigures(candidate.params, raw, raw, None, 0.0)
    search = candidate.search
    row = {"number": candidate.number, "default": index == 0, "params": candidate.params,
           "on_front": candidate.on_front, **({"panel": True} if PANEL in candidate.params else {}),
           **({"family": candidate.params[FAMILY]["judge"]} if FAMILY in candidate.params else {}),
           "search": {"mae": search[0], "spearman": search[1]} if search else None,
           "search_figure": _num(search_figure(spec.pick, on_search, items.gold[:n],
                                               None if items.groups is None else items.groups[:n],
                                               label_range=items.label_range, seed=spec.seed, pooled=spec.pooled))}
    search_only = {key: row[key] for key in ("number", "default", "params", "search", "search_figure")}
    verdict = rejection({**search_only, "failure_rate": float(np.isnan(raw).mean())}, reject)
    row["rejected"] = None if index == 0 else verdict
    if index == 0:
        row["flagged"] = verdict  # the default's own verdict (e.g. --audit-max): recorded, it stays the fallback
    return row


def candidate_row(row: dict[str, Any], scored: CandidateFigures, items: SelectionItems) -> dict[str, Any]:
    """A candidate's selection row: its search row and its figures on the selection items it was judged on."""
    seen = np.ones(len(items.gold), dtype=bool) if scored.judged is None else scored.judged
    groups = items.ranked_on(seen)
    return {**row, "items_judged": int(seen.sum()),
            "mae": float(np.mean(np.abs(scored.pred[seen] - items.gold[seen]))),
            "spearman": spearman_figure(scored.raw[seen], items.gold[seen], groups),
            "calibrator": scored.calibrator, "failure_rate": scored.failure_rate}


def choose(spec: RunSpec, candidates: list[Candidate], raws: Sequence[np.ndarray] | Scorer, items: SelectionItems, *,
           reject: Reject | None = None, calibrate: bool = True, figures: FiguresCache | None = None,
           early_stop: bool = True, screen: bool | None = None) -> tuple[int, dict[str, Any]]:
    """The index of the candidate that ships (0, the default, unless the gate passes) and the selection record.

    ``raws``: every candidate's raw scores on the selection items, or a scorer ``(j, rows) -> scores`` the gate
    asks for the items it needs (``early_stop``: losers stop being judged, ``_racing``; the record's ``racing``
    counts the judgments made and saved; ``screen`` (None: ``spec.screen``): with the nested gate, screen the
    challengers on the first confirming items before the futility looks). ``calibrate=False`` leaves the record's
    MAE figures uncalibrated (the decision under the Spearman rule reads raw scores only); ``figures`` caches
    figures across calls on the same items. No LM call here beyond the scorer's (the benchmarks replay it on saved
    scores)."""
    candidates = list(candidates)
    score = raws if callable(raws) else (lambda j, rows: np.asarray(raws[j], dtype=float)[rows])
    state = Race.begin(len(candidates), score, items)
    n = items.n_search
    rows = [search_row(i, c, state.raws[i, :n], items, spec, reject) for i, c in enumerate(candidates)]
    challengers = [i for i, row in enumerate(rows) if i > 0 and row["rejected"] is None]
    live = challengers
    if spec.gate == "on" and not spec.panel:  # the panel is the mean of every member: each is judged throughout
        figure = [-np.inf if r["search_figure"] is None else r["search_figure"] for r in rows]
        best = max(challengers, key=lambda i: (figure[i], -i), default=None)
        live = [best] if best is not None and figure[best] > figure[0] else []
    if early_stop:
        free = frozenset(i for i, c in enumerate(candidates) if FAMILY in c.params
                         and not judge_class(c.params[FAMILY]["judge"]).needs_lm_with(c.params[FAMILY]["params"]))
        race(state, score, items, live, gate=spec.gate, panel=spec.panel, seed=spec.seed, least=_least(spec, items),
             screen=spec.screen if screen is None else screen, free=free)
    else:
        state.live = list(live)
        for j in range(len(candidates)):
            state.judge(score, j, np.arange(len(items.gold)))
    items = replace(items, screened=state.screened)
    scored = [figures_of(c.params, state.raws[i], items, spec.seed, judged=state.judged[i], calibrate=calibrate,
                         cache=figures) for i, c in enumerate(candidates)]
    rows = [candidate_row(row, f, items) for row, f in zip(rows, scored)]
    winner, gate_result, chosen = _decide(spec, candidates, scored, rows, items, challengers, state, reject, calibrate)
    _describe(rows, scored, items, chosen, spec)
    record = {"rule": spec.pick, "gate": spec.gate, "items": len(items.gold), "search_items": n,
              "confirming_items": int(items.confirming.sum()),
              "groups": len(set(items.groups)) if items.groups else None, "rows": rows, "best_candidate": winner,
              "gate_result": gate_result, "default_shipped": chosen == 0, "chosen_trial": rows[chosen]["number"],
              "racing": state.record(n) if early_stop else None}
    return chosen, record


def _least(spec: RunSpec, items: SelectionItems) -> tuple[int, str]:
    """The confirming units the gate needs to make a test, and what it calls them."""
    grouped = items.groups_ranked is not None
    if spec.gate == "nested":
        return (FOLDS, "questions") if grouped else (MIN_FOLD_ITEMS * FOLDS, "items")
    return (MIN_GATE_GROUPS, "questions") if grouped else (MIN_GATE_ITEMS, "items")


def _decide(spec: RunSpec, candidates: list[Candidate], scored: list[CandidateFigures], rows: list[dict[str, Any]],
            items: SelectionItems, challengers: list[int], state: Race, reject: Reject | None,
            calibrate: bool) -> tuple[int | None, dict[str, Any], int]:
    """The gate on what was judged: the winner, the gate's record and the index that ships (the default when judging
    stopped early). With ``spec.panel`` the panel joins ``candidates``, ``scored`` and ``rows``."""
    if state.stopped:
        return None, {"method": "stopped early", "stopped": state.stopped, "refused": state.refused, "winner": None,
                      "passed": False, "alpha": ALPHA, "items": len(items.gold),
                      "confirming_items": int(items.confirming.sum())}, 0
    live = [j for j in challengers if j in state.live]
    members = [0, *(j for j in challengers if FAMILY not in candidates[j].params)]  # the run's own family only
    panel = panel_candidate(scored, members, items, spec.seed, calibrate=calibrate) if spec.panel else None
    if panel is not None:  # one more candidate, from the members' scores: no LM call
        candidates.append(Candidate(None, panel.params))
        scored.append(panel)
        search = search_row(len(rows), candidates[-1], panel.raw[:items.n_search], items, spec, reject)
        rows.append(candidate_row(search, panel, items))
        live += [len(rows) - 1] if rows[-1]["rejected"] is None else []
    if spec.gate == "nested":
        panel_index = len(rows) - 1 if panel is not None and rows[-1]["rejected"] is None else None
        winner, gate_result = nested_test(scored, items, live, seed=spec.seed, panel=panel_index)
    else:
        winner, gate_result = confirming_test(spec, scored, rows, items, live)
    return winner, gate_result, winner if winner is not None and gate_result["passed"] else 0


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
    groups = items.ranked_on(held)
    result = gate(spec.pick, on_held, items.gold[held], groups, challengers, winner, items.clusters_on(held))
    return winner, {k: v for k, v in result.items() if k not in ("advantage", "interval")}


def _describe(rows: list[dict[str, Any]], scored: list[CandidateFigures], items: SelectionItems, chosen: int,
              spec: RunSpec) -> None:
    """Each row's advantage over the default on the confirming items with its 90% paired interval (descriptive:
    the gate's test is its own; None for a candidate not judged on them all), and which row ships; the warnings a
    run's choice earns."""
    held = items.confirming
    groups = items.ranked_on(held)
    full = [i for i, s in enumerate(scored) if s.judged is None or s.judged[held].all()]
    figures = {} if 0 not in full or not held.any() else dict(zip(full, stats.paired_advantages(
        spec.pick, np.stack([scored[i].raw[held] for i in full]), np.stack([scored[i].pred[held] for i in full]),
        items.gold[held], groups, CONFIDENCE, items.clusters_on(held))))
    for i, row in enumerate(rows):
        figure = figures.get(i) if i > 0 else None
        row["advantage_confirming"] = None if figure is None else figure["advantage"]
        row["advantage_confirming_ci"] = None if figure is None else figure["interval"]
        row["chosen"] = i == chosen
    if chosen == 0 and rows[0]["flagged"]:
        log.warning("%s: the default judge ships but was itself flagged: %s", spec.name, rows[0]["flagged"])


def with_rescore(spec: RunSpec, splits: Splits, *, dev_only: bool = False) -> RunSpec:
    """``spec`` with ``rescore`` resolved for the items that confirm the choice: the pool and dev items (the
    gate's), or dev alone (``--gate off``)."""
    confirming = len(splits.dev) + (0 if dev_only else len(splits.confirming_pool))
    return replace(spec, rescore=spec.rescore_for(confirming))


def select(study: optuna.Study, spec: RunSpec, splits: Splits, lm, *, reject: Reject | None = None,
           default: dict[str, Any] | None = None,
           settled: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parameters of the judge to ship, and the selection record (every candidate's figures, the gate).

    The default is always candidate 0; a challenger with the same parameters is not scored twice. ``default``
    and ``settled`` (``default_params`` and ``settled_params`` of the run) are computed when not given."""
    instructions = InstructionPool(study).texts()
    spec = with_rescore(spec, splits)
    if default is None:
        default = default_params(spec, splits.data_fixed, lm=lm, instructions=instructions,
                                 demo_pool=splits.demo_pool, label_range=splits.label_range)
    if settled is None:
        settled = settled_params(spec, lm)
    families, skipped = family_candidates(spec, splits, lm)
    candidates = candidates_of(study, spec, default) + families
    items = SelectionItems.of(splits, spec.pooled)
    log.info("%s: scoring %d candidates on %d items (%d search, %d pool, %d dev): at most %d judgments", spec.name,
             len(candidates), len(items.gold), len(splits.search), len(splits.confirming_pool), len(splits.dev),
             len(candidates) * len(items.gold))
    calls0 = lm_calls(lm)
    scorer = CandidateScorer([c.params for c in candidates], spec, splits, lm, instructions, settled)
    chosen, record = choose(spec, candidates, scorer, items, reject=reject)
    if record["gate_result"].get("refused"):
        log.warning("%s: the gate made no test: %s", spec.name, record["gate_result"]["refused"])
    record.update(pool_items=len(splits.confirming_pool), dev_items=len(splits.dev), lm_calls=lm_calls(lm) - calls0,
                  families={"asked": spec.also, "scored": [c.params[FAMILY]["judge"] for c in families],
                            "left_out": skipped})
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
        result = nested_gate(raw, gold, groups, allowed=allowed, seed=seed, alpha=ALPHA, tested=held,
                             clusters=items.clusters)
    else:
        result = panel_gate(raw, gold, groups, panel=panel, allowed=allowed, seed=seed, alpha=ALPHA, tested=held,
                            clusters=items.clusters)
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


def select_on_dev(study: optuna.Study, spec: RunSpec, splits: Splits, lm, *,
                  settled: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The old rule (``--gate off``): the front's strongest candidates re-scored on dev alone, and the best
    dev figure by the pick rule wins; the default is not a candidate and nothing is tested."""
    if not study.best_trials:
        raise ValueError(f"study {study.study_name} has no completed trial to choose from")
    if settled is None:
        settled = settled_params(spec, lm)
    spec = with_rescore(spec, splits, dev_only=True)
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
