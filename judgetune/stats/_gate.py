"""The gate's statistics: how a judge is chosen among candidates and shown better than the default.
Each candidate's Spearman figure, paired per-unit differences against the default (candidate 0), a
one-sided t test of them on scipy, the nested cross-fitted gate, and the panel's gate beside it.

Everything takes a score matrix: ``scores`` of shape ``(C, n)`` (candidate 0 is the default; a failed
judgment NaN, filled by the one failure rule) and the ``n`` labels, with the items' questions
(``groups``) where the data has them: then a figure is the per-question Spearman averaged, and a
paired difference is taken per question; without them, per item through jackknife pseudo-values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats as sps

from judgetune.stats._gain import filled
from judgetune.stats._metrics import correlation, spearman_rows

__all__ = ["FOLDS", "REPEATS", "ahead_of_default", "best_candidate_index", "corrected_lower",
           "figures", "jackknife_spearman", "nested_gate", "one_sided_lower", "paired_advantages",
           "paired_unit_differences", "panel_gate", "t_interval", "cut_folds", "folds_for",
           "units_of", "units_to_pass", "WIDE_FOLDS", "WIDE_FOLD_UNITS"]

FOLDS = 5  # the nested gate's folds of the labeled items
REPEATS = 10  # ... and how many times the folds are drawn anew (more cuts: a steadier mean and a smaller 1/J term)
WIDE_FOLDS, WIDE_FOLD_UNITS = 10, 400  # ... and from this many tested units (items, or questions) on, ten folds


def folds_for(units: int) -> int:
    """The nested gate's folds for this many tested units: ``FOLDS``, or ``WIDE_FOLDS`` from ``WIDE_FOLD_UNITS`` on
    (40 units or more in each held-out fold). With more folds a cut's t has more degrees of freedom and the test
    share ``n_test / n_train`` is smaller: on planted candidates (benchmarks/gate_power.py) a +0.10 trial among 1,000
    confirming rows ships in 69% of draws rather than 58%, shuffled labels in 4.0% rather than 1.75%. Below, five:
    held-out folds of a few questions or a few tied labels make the fold differences too rough for it."""
    return WIDE_FOLDS if units >= WIDE_FOLD_UNITS else FOLDS


def units_of(groups: Sequence[str] | None, n: int) -> list[np.ndarray]:
    """Item indices of each resampling unit: a question, or one item when there are no questions."""
    if groups is None:
        return [np.array([i]) for i in range(n)]
    keys = np.asarray([str(g) for g in groups])
    return [np.flatnonzero(keys == k) for k in dict.fromkeys(keys.tolist())]


def _filled(scores: np.ndarray) -> np.ndarray:
    return np.stack([filled(row) for row in np.atleast_2d(np.asarray(scores, dtype=float))])


def figures(scores: np.ndarray, gold: np.ndarray, groups: Sequence[str] | None = None) -> np.ndarray:
    """Each candidate's Spearman with the labels, shape ``(C,)``: per question and averaged over the
    questions where it is defined, where there are questions. NaN where undefined."""
    full, gold = _filled(scores), np.asarray(gold, dtype=float)
    if groups is None:
        return spearman_rows(full, np.broadcast_to(gold, full.shape))
    rows = [spearman_rows(full[:, u], np.broadcast_to(gold[u], (len(full), len(u))))
            for u in units_of(groups, len(gold)) if len(u) >= 2]
    if not rows:  # every question holds one item (a held-out fold of small questions): nothing is ranked
        return np.full(len(full), np.nan)
    return _question_mean(np.stack(rows, axis=1))


def _question_mean(values: np.ndarray) -> np.ndarray:
    """Each candidate's mean over the questions where its figure is defined (C, Q) -> (C,); NaN where none is."""
    with np.errstate(invalid="ignore"):
        return np.array([np.nanmean(row) if np.isfinite(row).any() else np.nan for row in values])


def best_candidate_index(scores: np.ndarray, gold: np.ndarray, groups: Sequence[str] | None = None,
                         allowed: Sequence[int] | None = None) -> int:
    """The candidate with the highest figure (ties and undefined figures go to the lower index; the
    default, 0, unless a challenger is strictly ahead of it)."""
    return _best(figures(scores, gold, groups), allowed)


def _best(figure: np.ndarray, allowed: Sequence[int] | None) -> int:
    fig = np.nan_to_num(figure, nan=-np.inf)
    allowed = range(len(fig)) if allowed is None else allowed
    best = 0
    for j in allowed:
        if fig[j] > fig[best]:
            best = j
    return best


def ahead_of_default(scores: np.ndarray, gold: np.ndarray, groups: Sequence[str] | None,
                     allowed: Sequence[int]) -> list[int]:
    """The candidates of ``allowed`` strictly ahead of the default (0) by their figure, best first (ties: the lower
    index first)."""
    fig = np.nan_to_num(figures(scores, gold, groups), nan=-np.inf)
    return sorted((j for j in allowed if fig[j] > fig[0]), key=lambda j: (-fig[j], j))


def paired_unit_differences(scores: np.ndarray, gold: np.ndarray, groups: Sequence[str] | None,
                            challenger: int) -> np.ndarray:
    """Per-unit Spearman differences, challenger minus default (candidate 0): per question where there are
    questions (undefined questions dropped), else the items' jackknife pseudo-values of the difference
    (``n * whole - (n - 1) * without item i``), whose mean is the whole-sample difference."""
    full, gold = _filled(scores[[0, challenger]]), np.asarray(gold, dtype=float)
    if challenger == 0:
        return np.zeros(len(units_of(groups, len(gold))))
    if groups is not None:
        diffs = []
        for u in units_of(groups, len(gold)):
            if len(u) < 2:
                continue
            rho = spearman_rows(full[:, u], np.broadcast_to(gold[u], (2, len(u))))
            diffs.append(rho[1] - rho[0])
        diffs = np.asarray(diffs, dtype=float)
        return diffs[np.isfinite(diffs)]
    _, pseudo = jackknife_spearman(full, gold)
    diff = pseudo[:, 1] - pseudo[:, 0]
    return diff[np.isfinite(diff)]


def _rank_correlations(gold: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Spearman of ``gold`` (shape ``(..., n)``) with each candidate's ``scores`` (shape ``(..., C, n)``), shape
    ``(..., C)``, by ``spearman_rows`` (NaN where either is constant)."""
    gold = np.broadcast_to(gold[..., None, :], scores.shape)
    return spearman_rows(scores.reshape(-1, scores.shape[-1]), gold.reshape(-1, scores.shape[-1])).reshape(
        scores.shape[:-1])


def jackknife_spearman(scores: np.ndarray, gold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's Spearman on all items, shape ``(C,)``, and its jackknife pseudo-values, shape ``(n, C)``:
    ``n * whole - (n - 1) * without item i``; ``scores`` (C, n) with failures already filled."""
    scores, gold = np.asarray(scores, dtype=float), np.asarray(gold, dtype=float)
    n = len(gold)
    keep = ~np.eye(n, dtype=bool)  # row i: every item but i
    left_out = _rank_correlations(np.stack([gold[k] for k in keep]), np.stack([scores[:, k] for k in keep]))  # (n, C)
    whole = _rank_correlations(gold, scores)
    return whole, n * whole - (n - 1) * left_out


def t_interval(estimate: float, values: np.ndarray, confidence: float) -> list[float | None]:
    """``estimate`` plus or minus Student's t quantile (scipy's ``t.interval``) times the standard error of the mean of
    ``values`` (NaN dropped); ``[None, None]`` with fewer than 2 values or an undefined estimate."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size < 2 or not np.isfinite(estimate):
        return [None, None]
    scale = values.std(ddof=1) / np.sqrt(values.size)
    if scale == 0:  # no spread: the interval is the estimate
        return [float(estimate), float(estimate)]
    low, high = sps.t.interval(confidence, values.size - 1, loc=estimate, scale=scale)
    return [float(low), float(high)]


def units_to_pass(advantage: float | None, lower: float | None, units: int, *, alpha: float = 0.05,
                  power: float = 0.8) -> int | None:
    """How many units (items, or questions) a one-sided ``alpha`` t test would need to pass this advantage in ``power``
    of runs, were the advantage and its per-unit spread to stay as measured: the spread is read off the lower bound
    (``advantage - lower`` is ``t * sd / sqrt(units)``), and ``n = ((z_alpha + z_power) * sd / advantage)^2``. None when
    the advantage is not above 0 (no number of units would pass it)."""
    if advantage is None or lower is None or advantage <= 0 or units < 2:
        return None
    sd = (advantage - lower) * np.sqrt(units) / sps.t.ppf(1 - alpha, units - 1)
    z = sps.norm.ppf(1 - alpha) + sps.norm.ppf(power)
    return int(np.ceil((z * sd / advantage) ** 2))


def one_sided_lower(differences: np.ndarray, alpha: float = 0.05) -> dict[str, Any]:
    """Student's one-sided t test that the mean difference is above 0 (scipy's ``ttest_1samp``, ``greater``):
    the mean, the one-sided ``1 - alpha`` lower bound, the p-value and the number of units. Fewer than 2
    units, or no spread: no bound (the test cannot pass)."""
    d = np.asarray(differences, dtype=float)
    d = d[np.isfinite(d)]
    out = {"mean": float(d.mean()) if d.size else None, "lower": None, "p": None, "units": int(d.size)}
    if d.size < 2 or np.ptp(d) == 0:
        return out
    result = sps.ttest_1samp(d, 0.0, alternative="greater")
    low = result.confidence_interval(confidence_level=1 - alpha).low
    return {**out, "lower": float(low), "p": float(result.pvalue)}


def _unit_values(rule: str, raw: np.ndarray, pred: np.ndarray, gold: np.ndarray,
                 units: Sequence[np.ndarray]) -> np.ndarray:
    """One candidate's objective (higher is better) on each unit: minus its MAE (``pred``), or the Spearman of its
    ``raw`` scores; NaN where undefined."""
    if rule == "mae":
        return np.array([-np.mean(np.abs(pred[u] - gold[u])) for u in units])
    raw = filled(raw)
    return np.array([np.nan if (v := correlation(raw[u], gold[u])) is None else v for u in units])


def paired_advantages(rule: str, raw: np.ndarray, pred: np.ndarray, gold: np.ndarray, groups: Sequence[str] | None,
                      confidence: float, clusters: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Each candidate's advantage over candidate 0 (the default) on these items, higher is better (for ``mae``, the
    default's MAE of ``pred`` minus the candidate's; for ``spearman``, of ``raw``), with its paired Student t interval
    at ``confidence``. ``raw`` and ``pred``: shape ``(C, n)``.

    With groups: the mean over questions of the per-question difference, on the questions where the objective is
    defined for both (a question undefined for either is dropped for both), the t interval over those differences.
    Without: the difference on all items, the t interval over the items' jackknife pseudo-values of the difference
    (for MAE, the items' error differences: a paired t). Without groups but with ``clusters`` (the questions of
    pooled data: ``--pooled`` ranks all items together while a question's items are alike), the jackknife leaves
    out one cluster at a time and the t is over the clusters' pseudo-values: items taken as independent make the
    interval too narrow where a cluster's items are alike (tests/test_gate.py)."""
    raw, pred, gold = np.asarray(raw, dtype=float), np.asarray(pred, dtype=float), np.asarray(gold, dtype=float)
    out = []
    if groups is not None:
        units = units_of(groups, len(gold))
        base = _unit_values(rule, raw[0], pred[0], gold, units)
        for j in range(len(raw)):
            diff = _unit_values(rule, raw[j], pred[j], gold, units) - base
            diff = diff[np.isfinite(diff)]
            mean = float(diff.mean()) if diff.size else np.nan
            out.append({"advantage": _finite(mean), "interval": t_interval(mean, diff, confidence),
                        "units": int(diff.size), "method": "t over questions"})
        return out
    blocks = None if clusters is None else units_of(clusters, len(gold))
    if blocks is not None and len(blocks) < len(gold):
        whole, pseudo = _cluster_jackknife(rule, raw, pred, gold, blocks)
        method = "delete-one-question jackknife t over questions"
    elif rule == "mae":
        pseudo = -np.abs(pred - gold).T  # (n, C): each item's own error
        whole, method = pseudo.mean(axis=0), "jackknife t over items"
    else:
        (whole, pseudo), method = jackknife_spearman(_filled(raw), gold), "jackknife t over items"
    for j in range(len(raw)):
        estimate = float(whole[j] - whole[0])
        out.append({"advantage": _finite(estimate), "interval": t_interval(estimate, pseudo[:, j] - pseudo[:, 0],
                                                                            confidence),
                    "units": len(pseudo), "method": method})
    return out


def _cluster_jackknife(rule: str, raw: np.ndarray, pred: np.ndarray, gold: np.ndarray,
                       blocks: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's objective on all items (minus the MAE of ``pred``, or the Spearman of ``raw``), shape
    ``(C,)``, and its delete-one-cluster pseudo-values, shape ``(K, C)``: ``K * whole - (K - 1) * without cluster k``."""
    full = _filled(raw)

    def objective(keep: np.ndarray) -> np.ndarray:
        if rule == "mae":
            return -np.mean(np.abs(pred[:, keep] - gold[keep]), axis=1)
        return _rank_correlations(gold[keep], full[:, keep])

    everything = np.ones(len(gold), dtype=bool)
    left_out = []
    for block in blocks:
        keep = everything.copy()
        keep[block] = False
        left_out.append(objective(keep))
    whole, k = objective(everything), len(blocks)
    return whole, k * whole - (k - 1) * np.stack(left_out)


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def cut_folds(n: int, groups: Sequence[str] | None, folds: int, seed: int,
              tested: np.ndarray | None = None) -> list[np.ndarray]:
    """Item indices of each held-out fold, whole questions together, by the one fold scheme
    (``judgetune.datasets.fold_of``); only the ``tested`` items (a boolean mask; None: all) are held out."""
    from judgetune.datasets import fold_of

    pool = np.arange(n) if tested is None else np.flatnonzero(tested)
    keys = None if groups is None else [str(groups[i]) for i in pool]
    assigned = fold_of(len(pool), keys, folds=folds, seed=seed)
    return [np.sort(pool[assigned == f]) for f in sorted(set(assigned.tolist()))]


def corrected_lower(fold_differences: np.ndarray, test_fraction: float, alpha: float = 0.05, *,
                    df: int | None = None) -> dict[str, Any]:
    """Nadeau and Bengio's corrected resampled t test (Machine Learning 52, 2003) that the mean of ``J`` fold
    differences is above 0: the folds share training items, so their variance is inflated from ``s^2 / J`` to
    ``(1 / J + n_test / n_train) * s^2`` (``test_fraction`` is ``n_test / n_train``), with ``J - 1`` degrees of
    freedom (``df`` instead, when given). Returns the mean, the one-sided ``1 - alpha`` lower bound, the p-value
    and ``J``."""
    d = np.asarray(fold_differences, dtype=float)
    d = d[np.isfinite(d)]
    out = {"mean": float(d.mean()) if d.size else None, "lower": None, "p": None, "units": int(d.size)}
    if d.size < 2 or np.ptp(d) == 0:
        return out
    se = float(np.sqrt((1 / d.size + test_fraction) * d.var(ddof=1)))
    t, df = float(d.mean() / se), d.size - 1 if df is None else df
    return {**out, "lower": float(d.mean() - sps.t.ppf(1 - alpha, df) * se), "p": float(sps.t.sf(t, df)), "se": se}


class _FoldFigures:
    """``figures`` of the candidates on a set of items, as the nested gate asks for them fold after fold. Where
    the items are whole questions (every question wholly tested or wholly not) and no score failed, a question's
    Spearman is the same in every fold it lies in: each is computed once and a fold's figure is their mean over
    its questions (the values ``figures`` takes, in its order: the same figure, to the last bit or two of rounding)."""

    def __init__(self, scores: np.ndarray, gold: np.ndarray, groups: list[str] | None,
                 tested: np.ndarray | None) -> None:
        self.scores, self.gold, self.groups, self.per_question = scores, gold, groups, None
        if groups is None or np.isnan(scores).any():
            return
        units = units_of(groups, len(gold))
        mask = None if tested is None else np.asarray(tested, dtype=bool)
        if mask is not None and any(mask[u].any() and not mask[u].all() for u in units):
            return
        self.question = np.empty(len(gold), dtype=int)
        self.per_question = np.full((len(scores), len(units)), np.nan)
        for k, u in enumerate(units):
            self.question[u] = k
            if len(u) >= 2:
                self.per_question[:, k] = spearman_rows(scores[:, u], np.broadcast_to(gold[u], (len(scores), len(u))))

    def __call__(self, rows: np.ndarray, candidates: Sequence[int] | None = None) -> np.ndarray:
        pick = slice(None) if candidates is None else list(candidates)
        if self.per_question is None:
            groups = None if self.groups is None else [self.groups[i] for i in rows]
            return figures(self.scores[pick][:, rows], self.gold[rows], groups)
        return _question_mean(self.per_question[pick][:, np.unique(self.question[rows])])  # in first-item order


def nested_gate(scores: np.ndarray, gold: np.ndarray, groups: Sequence[str] | None = None, *,
                allowed: Sequence[int] | None = None, folds: int | None = None, repeats: int = REPEATS,
                alpha: float = 0.05, seed: int = 0, df: int | None = None,
                tested: np.ndarray | None = None, clusters: Sequence[str] | None = None) -> dict[str, Any]:
    """The gate that uses every label: ``repeats`` times ``folds``-fold cross-validation of the choice itself. In
    each fold the best candidate is chosen on the other folds and scored against the default on the held-out
    fold (its Spearman minus the default's, per question and averaged where there are questions; 0 where the
    default was chosen); the fold differences are tested once, one-sided at ``alpha``, by the corrected
    resampled t test (``corrected_lower``: a naive t over folds that share training items passed 8-10% of
    null draws in simulation), read with the degrees of freedom of one cut (the folds made in it, minus one):
    the repeats re-use the same items, and read with ``J - 1`` (``df=14``) the test shipped on shuffled labels
    in 8.5% of draws on one saved score matrix (4.0% with one cut's). ``df`` overrides it. Ten cuts rather than
    three: on planted candidates (benchmarks/gate_power.py, 1,000 confirming rows, five folds) a +0.10 trial ships
    in 58% of draws rather than 50%, the null in 2% either way. ``folds`` (None: ``folds_for`` the tested units,
    five or ten). The candidate chosen on all items ships when the test passes; else the default.

    Returns ``passed``, ``chosen`` (the index chosen on all items), ``shipped`` (``chosen`` if passed, else 0),
    the test's ``mean``, ``lower``, ``p`` and ``units`` (fold estimates), each fold's choice and difference, and
    ``test_fraction``, the mean held-out share ``n_test / n_train`` of the folds actually made, ``n_train`` counting
    the items that may be held out (the untested ones train in every fold: counting them would shrink the
    correction while they make the folds' choices more alike).

    ``tested`` (a boolean mask; None: every item) marks the items that may be held out: items that took part in
    choosing the candidates themselves (``tune``'s search items) choose in every fold and are never tested, so the
    test sees only items no candidate was chosen on. ``clusters`` (pooled data's questions, without ``groups``) keep
    a question's items in one fold."""
    scores, gold = np.asarray(scores, dtype=float), np.asarray(gold, dtype=float)
    n = len(gold)
    grp = None if groups is None else [str(g) for g in groups]
    whole = grp if grp is not None else None if clusters is None else [str(c) for c in clusters]
    differences, choices, shares, made = [], [], [], 0
    testing = np.arange(n) if tested is None else np.flatnonzero(tested)
    testable = len(testing)
    if folds is None:
        folds = folds_for(len(units_of(None if whole is None else [whole[i] for i in testing], testable)))
    figures_on = _FoldFigures(scores, gold, grp, tested)
    for r in range(repeats):
        cut = cut_folds(n, whole, folds, seed * 1009 + r, tested)
        made = len(cut)
        for held in cut:
            rest = np.setdiff1d(np.arange(n), held)  # every other item chooses, the untested ones too
            shares.append(len(held) / max(1, testable - len(held)))  # the share among the items that may be held out
            pick = _best(figures_on(rest), allowed)
            choices.append(pick)
            if pick == 0:
                differences.append(0.0)
                continue
            fig = figures_on(held, [0, pick])
            differences.append(float(fig[1] - fig[0]) if np.isfinite(fig).all() else np.nan)
    # the folds actually made: fewer questions than folds make fewer, larger folds than ``1 / (folds - 1)``. The
    # untested items train in every fold, so the folds' training sets overlap more than the tested items' alone
    # would: their share is counted among the tested items (counted among all, the shared training items shrank the
    # correction, and with 140 of 240 items untested the gate shipped on unknown labels in about 9% of draws:
    # tests/test_selection_rules.py)
    test_fraction = float(np.mean(shares))
    df = made - 1 if df is None else df  # one cut's folds, unless the caller says otherwise
    test = corrected_lower(np.asarray(differences), test_fraction, alpha, df=df)
    chosen = best_candidate_index(scores, gold, grp, allowed)
    passed = chosen != 0 and test["lower"] is not None and test["lower"] > 0
    return {**test, "passed": bool(passed), "chosen": int(chosen), "shipped": int(chosen) if passed else 0,
            "fold_choices": choices, "fold_differences": differences, "folds": folds, "repeats": repeats,
            "alpha": alpha, "test_fraction": test_fraction,
            "method": f"nested {folds}-fold cross-validation x{repeats}, corrected resampled t ({df} df)"}


def panel_gate(scores: np.ndarray, gold: np.ndarray, groups: Sequence[str] | None = None, *, panel: int,
               allowed: Sequence[int] | None = None, alpha: float = 0.05, seed: int = 0,
               tested: np.ndarray | None = None, clusters: Sequence[str] | None = None) -> dict[str, Any]:
    """The nested gate beside a panel, the level split between the two tests (Bonferroni: a null run ships
    something in at most ``alpha`` of draws). The panel (row ``panel``: made from the other candidates without
    reading a label) is one fixed challenger, so no choice needs cross-validating: its Spearman advantage over the
    default on the ``tested`` items (a boolean mask, None: all; items its members were chosen on are left out) is
    tested one-sided at ``alpha / 2`` (the paired t interval of ``paired_advantages``). The nested gate chooses
    among the other candidates (of ``allowed``) at ``alpha / 2``. Of the two, those that pass, the one with the
    larger estimated gain ships (the panel's advantage, the nested gate's cross-validated mean): a panel where no
    single prompt is shown better, a single prompt where it gains more.

    Returns the shipped test's record in the nested gate's shape (``chosen``, ``shipped``, ``passed``, ``mean``,
    ``lower``, ...), with ``panel`` (the panel's ``advantage``, ``lower``, ``passed``, ``alpha``, ``items``) and
    ``nested`` (the nested gate's ``chosen``, ``passed``, ``mean``, ``lower``)."""
    scores, gold = np.asarray(scores, dtype=float), np.asarray(gold, dtype=float)
    half = alpha / 2
    keep = np.ones(len(gold), dtype=bool) if tested is None else np.asarray(tested, dtype=bool)
    pair = scores[[0, panel]][:, keep]
    held_groups = None if groups is None else [g for g, k in zip(groups, keep) if k]
    held_clusters = None if clusters is None else [c for c, k in zip(clusters, keep) if k]
    figure = paired_advantages("spearman", pair, pair, gold[keep], held_groups, 1 - 2 * half, held_clusters)[1]
    lower = figure["interval"][0]
    on_panel = {"advantage": figure["advantage"], "lower": lower, "passed": bool(lower is not None and lower > 0),
                "alpha": half, "items": int(keep.sum())}
    others = [j for j in (range(len(scores)) if allowed is None else allowed) if j != panel]
    nested = nested_gate(scores, gold, groups, allowed=others, alpha=half, seed=seed, tested=tested,
                         clusters=clusters)
    summary = {k: nested[k] for k in ("chosen", "passed", "mean", "lower")}
    panel_wins = on_panel["passed"] and not (nested["passed"] and nested["mean"] is not None
                                             and nested["mean"] > on_panel["advantage"])
    if not panel_wins:
        return {**nested, "alpha": alpha, "panel": on_panel, "nested": summary}
    return {**nested, "passed": True, "chosen": int(panel), "shipped": int(panel), "mean": on_panel["advantage"],
            "lower": lower, "p": None, "units": figure["units"], "alpha": alpha,
            "method": f"the panel alone against the default on {int(keep.sum())} items none of its members was chosen "
                      f"on, paired t, one-sided {1 - half:.1%}",
            "panel": on_panel, "nested": summary}
