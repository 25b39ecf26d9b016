"""The statistics of choosing among candidates (judgetune.stats): the one-sided paired t test on scipy, and the
nested cross-fitted gate, under the null (no candidate better: it ships the default in at least 95% of draws,
up to simulation noise) and with a planted better candidate (found), with and without questions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from judgetune.stats import (
    FOLDS,
    REPEATS,
    WIDE_FOLD_UNITS,
    WIDE_FOLDS,
    best_candidate_index,
    corrected_lower,
    figures,
    folds_for,
    nested_gate,
    one_sided_lower,
    paired_unit_differences,
    panel_gate,
)


def _matrix(rng: np.random.Generator, n: int, signal: list[float], groups: int | None = None):
    """Candidates whose raw scores are ``signal[c] * gold + noise``: equal signals are the null."""
    gold = rng.normal(size=n)
    scores = np.stack([s * gold + rng.normal(size=n) for s in signal])
    keys = None if groups is None else [f"q{i % groups}" for i in range(n)]
    return scores, gold, keys


def test_one_sided_lower_is_scipys_one_sample_t_test():
    d = np.array([0.3, -0.1, 0.5, 0.2, 0.05, 0.4])
    out = one_sided_lower(d, alpha=0.05)
    ref = sps.ttest_1samp(d, 0.0, alternative="greater")
    assert out["p"] == pytest.approx(ref.pvalue)
    assert out["lower"] == pytest.approx(d.mean() - sps.t.ppf(0.95, 5) * d.std(ddof=1) / np.sqrt(6))
    assert one_sided_lower(np.array([0.2]))["lower"] is None  # one unit: no test
    assert one_sided_lower(np.array([0.1, 0.1, 0.1]))["lower"] is None  # no spread: no test


def test_paired_differences_are_per_question_or_jackknife_pseudo_values():
    rng = np.random.default_rng(0)
    scores, gold, groups = _matrix(rng, 60, [0.5, 1.0], groups=6)
    per_question = paired_unit_differences(scores, gold, groups, 1)
    assert per_question.shape == (6,)
    expected = [figures(scores[:, [i for i, g in enumerate(groups) if g == q]],
                        gold[[i for i, g in enumerate(groups) if g == q]])
                for q in dict.fromkeys(groups)]
    assert per_question == pytest.approx([e[1] - e[0] for e in expected])
    pseudo = paired_unit_differences(scores, gold, None, 1)
    whole = figures(scores, gold)
    assert pseudo.shape == (60,)
    assert pseudo.mean() == pytest.approx(whole[1] - whole[0], abs=0.02)  # jackknife: mean near the estimate
    assert not paired_unit_differences(scores, gold, None, 0).any()


def test_the_best_candidate_is_the_default_unless_a_challenger_is_strictly_ahead():
    rng = np.random.default_rng(1)
    scores, gold, _ = _matrix(rng, 80, [1.0, 0.2, 2.0])
    assert best_candidate_index(scores, gold) == 2
    assert best_candidate_index(scores, gold, allowed=[1]) == 0
    tied = np.stack([scores[0], scores[0]])
    assert best_candidate_index(tied, gold) == 0


def test_the_corrected_resampled_t_inflates_the_variance_by_the_test_share():
    d = np.array([0.05, 0.02, -0.01, 0.04, 0.03, 0.06, 0.0, 0.02, 0.05, 0.01])
    out = corrected_lower(d, 0.25)
    se = np.sqrt((1 / 10 + 0.25) * d.var(ddof=1))
    assert out["se"] == pytest.approx(se)
    assert out["lower"] == pytest.approx(d.mean() - sps.t.ppf(0.95, 9) * se)
    assert out["p"] == pytest.approx(sps.t.sf(d.mean() / se, 9))
    naive = one_sided_lower(d)
    assert out["lower"] < naive["lower"]  # wider than the naive t over folds
    fewer = corrected_lower(d, 0.25, df=4)  # one cut's degrees of freedom: wider still
    assert fewer["lower"] == pytest.approx(d.mean() - sps.t.ppf(0.95, 4) * se) and fewer["lower"] < out["lower"]


@pytest.mark.slow
@pytest.mark.parametrize("groups", [None, 15])
def test_the_nested_gate_ships_the_default_under_the_null(groups):
    """Five candidates equally good: a tuned judge ships in at most 5% of draws (plus simulation noise)."""
    passes = 0
    draws = 200
    for seed in range(draws):
        rng = np.random.default_rng(seed)
        scores, gold, keys = _matrix(rng, 150, [0.6] * 5, groups=groups)
        passes += nested_gate(scores, gold, keys, seed=seed)["passed"]
    assert passes / draws <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / draws)  # 8.1% at 200 draws


@pytest.mark.slow
def test_the_nested_gate_holds_its_level_when_most_items_choose_but_are_never_tested():
    """``tune`` holds the search and screened items out of every test (``tested``): 140 of 240 here, with binary
    labels at 7% positives that no candidate knows. Their folds' training sets overlap more than the tested items'
    alone, so the correction counts the held-out share among the tested items; counted among all 240 (the earlier
    reading) the gate shipped in about 9% of these draws."""
    passes, draws = 0, 400
    for seed in range(draws):
        rng = np.random.default_rng([seed, 11])
        base = rng.normal(size=240)
        scores = np.stack([0.8 * base + 0.6 * rng.normal(size=240) for _ in range(8)])  # alike, as prompts are
        gold = (rng.random(240) < 0.07).astype(float)
        tested = np.arange(240) >= 140
        out = nested_gate(scores, gold, seed=seed, tested=tested)
        assert out["test_fraction"] == pytest.approx(20 / 80, rel=0.1)  # five folds of the 100 tested items
        passes += out["passed"]
    assert passes / draws <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / draws)  # 7.2% at 400 draws


@pytest.mark.slow
@pytest.mark.parametrize("groups", [None, 15])
def test_the_panel_gate_ships_the_default_under_the_null(groups):
    """Labels that no candidate and so no panel knows (shuffled): the panel, tested at 2.5%, or the nested gate's
    choice, tested at 2.5%, ships in at most 5% of draws (plus simulation noise)."""
    passes = 0
    draws = 200
    for seed in range(draws):
        rng = np.random.default_rng(seed)
        scores, gold, keys = _matrix(rng, 150, [0.6] * 4, groups=groups)
        panel = np.mean([(r - r.mean()) / r.std() for r in scores], axis=0)
        passes += panel_gate(np.vstack([scores, panel]), rng.permutation(gold), keys, panel=4,
                                   seed=seed)["passed"]
    assert passes / draws <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / draws)


@pytest.mark.slow
@pytest.mark.parametrize("groups", [None, 15])
def test_the_nested_gate_finds_a_clearly_better_candidate(groups):
    found = 0
    for seed in range(40):
        rng = np.random.default_rng(1000 + seed)
        scores, gold, keys = _matrix(rng, 300, [0.5, 0.5, 1.2, 0.5], groups=groups)
        out = nested_gate(scores, gold, keys, seed=seed)
        found += out["passed"] and out["shipped"] == 2
        assert out["folds"] == 5 and len(out["fold_choices"]) == 5 * REPEATS
    assert found >= 36  # 90%


def test_the_nested_gate_takes_ten_folds_from_400_tested_units():
    """Five folds, and ten once the items that may be held out hold ``WIDE_FOLD_UNITS`` units: items, or questions
    (the search items, never held out, do not count); the t is read with one cut's degrees of freedom."""
    rng = np.random.default_rng(4)
    scores, gold, _ = _matrix(rng, 500, [0.5, 1.0, 0.5])
    for untested, folds in ((100, WIDE_FOLDS), (101, FOLDS)):
        tested = np.arange(500) >= untested
        out = nested_gate(scores, gold, seed=0, tested=tested, repeats=2)
        assert (out["folds"], len(out["fold_choices"])) == (folds, 2 * folds)
        assert f"({folds - 1} df)" in out["method"]
    assert folds_for(WIDE_FOLD_UNITS - 1) == FOLDS and folds_for(WIDE_FOLD_UNITS) == WIDE_FOLDS
    questions = [f"q{i // 2}" for i in range(500)]  # 250 questions: five folds
    assert nested_gate(scores, gold, questions, seed=0, repeats=1)["folds"] == FOLDS


@pytest.mark.slow
def test_the_nested_gate_holds_its_level_with_ten_folds():
    """Five candidates equally good on 450 tested items (ten folds): a tuned judge ships in at most 5% of draws (plus
    simulation noise)."""
    passes, draws = 0, 200
    for seed in range(draws):
        rng = np.random.default_rng([seed, 10])
        scores, gold, _ = _matrix(rng, 500, [0.6] * 5)
        out = nested_gate(scores, gold, seed=seed, tested=np.arange(500) >= 50)
        assert out["folds"] == WIDE_FOLDS
        passes += out["passed"]
    assert passes / draws <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / draws)  # 8.1% at 200 draws


def test_the_nested_gate_corrects_by_the_folds_it_made_not_the_folds_asked_for():
    """Seven questions and ten folds asked make seven folds, each holding out 1/6 of the rest, not 1/9; the t is
    read with one cut's degrees of freedom (7 folds: 6), not the 14 estimates' 13."""
    rng = np.random.default_rng(3)
    scores, gold, keys = _matrix(rng, 70, [0.5, 1.0, 0.5], groups=7)
    out = nested_gate(scores, gold, keys, folds=10, repeats=2, seed=0)
    assert len(out["fold_choices"]) == 14
    assert out["test_fraction"] == pytest.approx(1 / 6)
    expected = corrected_lower(np.asarray(out["fold_differences"]), 1 / 6, df=6)
    assert out["lower"] == pytest.approx(expected["lower"]) and out["p"] == pytest.approx(expected["p"])
    assert "(6 df)" in out["method"]


def test_a_fold_of_one_item_questions_ranks_nothing_and_the_gate_still_decides():
    """Questions of one item rank nothing: their figure is undefined (NaN), not an error; a nested gate whose
    held-out folds hold only such questions drops those folds' differences (found on SummaC polytope, whose
    documents hold 1 to 9 claims each: the 10-fold gate crashed)."""
    rng = np.random.default_rng(5)
    scores, gold, _ = _matrix(rng, 8, [0.5, 1.0])
    assert np.isnan(figures(scores, gold, [f"q{i}" for i in range(8)])).all()
    scores, gold, _ = _matrix(rng, 120, [0.5, 1.0, 0.5])
    keys = [f"pair{i // 2}" if i < 40 else f"single{i}" for i in range(120)]  # 20 questions of 2, 80 of one
    out = nested_gate(scores, gold, keys, folds=10, seed=0)
    differences = np.asarray(out["fold_differences"])
    finite = differences[np.isfinite(differences)]
    assert len(differences) == 10 * REPEATS and out["units"] == len(finite) < 10 * REPEATS  # rank nothing: dropped ...
    expected = corrected_lower(finite, out["test_fraction"], df=9)  # ... not counted as no gain; 10 folds: 9 df
    assert out["lower"] == pytest.approx(expected["lower"]) and out["mean"] == pytest.approx(finite.mean())
    # 20 questions of two items rank little: the gate decides, and what it decides is that no gain is shown
    assert out["lower"] < 0 and not out["passed"] and out["shipped"] == 0


def test_the_t_interval_is_scipys_and_matches_the_hand_formula():
    from judgetune.stats import t_interval

    d = np.array([0.3, -0.1, 0.5, 0.2, 0.05, 0.4, np.nan])
    finite = d[np.isfinite(d)]
    half = sps.t.ppf(0.95, finite.size - 1) * finite.std(ddof=1) / np.sqrt(finite.size)
    assert t_interval(0.2, d, 0.90) == pytest.approx([0.2 - half, 0.2 + half], abs=1e-12)
    assert t_interval(0.2, np.array([0.1]), 0.90) == [None, None]
    assert t_interval(0.1, np.array([0.1, 0.1, 0.1]), 0.90) == pytest.approx([0.1, 0.1])
