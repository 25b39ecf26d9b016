"""Meta-evaluation metrics pinned against hand-computed values (arithmetic in the comments),
cross-checked against scipy, scikit-learn and the PyPI ``rbo`` package."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import rbo as rbo_pypi
from scipy import stats
from sklearn.metrics import cohen_kappa_score, ndcg_score

from judgetune import stats as m

approx = pytest.approx


def _walk(value, path="row"):
    """Every (path, leaf) of a nested dict/list."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}[{i}]")
    else:
        yield path, value


def _assert_no_nan(row):
    for path, leaf in _walk(row):
        assert not (isinstance(leaf, float) and math.isnan(leaf)), path


# ---------------------------------------------------------------- rescale, mae


def test_rescale():
    # (1, 5) + (v - 0) * 4 / 1: 0 -> 1, 0.25 -> 2, 1 -> 5
    assert m.rescale([0, 0.25, 1], (0, 1), (1, 5)).tolist() == [1.0, 2.0, 5.0]
    # reversed target: 0 + (3 - 1) * (0 - 1) / (5 - 1) + ... -> 1 - 0.5 = 0.5
    assert m.rescale([3], (1, 5), (1, 0)).tolist() == [0.5]
    with pytest.raises(ValueError, match="empty"):
        m.rescale([1], (2, 2), (0, 5))


def test_mae_plain():
    # |1-2| + |2-2| + |3-5| = 1 + 0 + 2 = 3, / 3 = 1.0
    assert m.mae([1, 2, 3], [2, 2, 5]) == approx(1.0)


def test_mae_with_ranges():
    # pred on 0-1 -> 0-5: [0, 2.5, 5]; vs [1, 2.5, 4]: (1 + 0 + 1) / 3 = 2/3
    assert m.mae([0, 0.5, 1], [1, 2.5, 4], pred_range=(0, 1), gold_range=(0, 5)) == approx(2 / 3)


def test_mae_needs_both_ranges_or_neither():
    with pytest.raises(ValueError, match="both"):
        m.mae([0.5], [2], pred_range=(0, 1))
    with pytest.raises(ValueError, match="both"):
        m.mae([0.5], [2], gold_range=(0, 5))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_rejected(bad):
    for fn in (m.mae, m.bracket_accuracy, m.correlation, m.cohen_kappa):
        with pytest.raises(ValueError, match="finite"):
            fn([1.0, bad, 2.0], [1.0, 2.0, 3.0])
        with pytest.raises(ValueError, match="finite"):
            fn([1.0, 2.0, 3.0], [1.0, bad, 2.0])


def test_length_mismatch_rejected():
    for fn in (m.mae, m.bracket_accuracy, m.correlation):
        with pytest.raises(ValueError, match="equal length"):
            fn([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="groups has 2 entries for 3 items"):
        m.grouped_correlation([1, 2, 3], [1, 2, 3], ["a", "b"])


# ---------------------------------------------------------------- brackets


def test_bracket_of_default_edges_and_boundaries():
    # [0,2) -> 0, [2,4) -> 1, [4,5] -> 2: 2.0 opens the middle bracket, 5.0 closes the last one
    values = [0.0, 1.99, 2.0, 3.99, 4.0, 4.5, 5.0]
    assert m.bracket_of(values).tolist() == [0, 0, 1, 1, 2, 2, 2]


@pytest.mark.parametrize("value", [-0.01, 5.01])
def test_bracket_of_outside_raises(value):
    with pytest.raises(ValueError, match="outside"):
        m.bracket_of([1.0, value])


def test_bracket_of_custom_and_invalid_edges():
    # edges 1 | 3 | 5: [1,3) -> 0, [3,5] -> 1
    assert m.bracket_of([1, 2.9, 3, 5], edges=(1, 3, 5)).tolist() == [0, 0, 1, 1]
    for edges in [(0, 2, 2, 5), (5, 0), (1,)]:
        with pytest.raises(ValueError, match="increasing"):
            m.bracket_of([1], edges=edges)


def test_bracket_accuracy_hand_computed():
    # brackets pred [0, 1, 1, 2], gold [0, 0, 1, 1]: matches at 0 and 2 -> 2/4
    assert m.bracket_accuracy([1.0, 2.0, 3.0, 4.0], [0.5, 1.9, 2.0, 3.9]) == approx(0.5)
    # custom edges 0 | 2.5 | 5: pred [0, 0, 1, 1], gold [0, 0, 0, 1] -> 3/4
    assert m.bracket_accuracy([1.0, 2.0, 3.0, 4.0], [0.5, 1.9, 2.0, 3.9], edges=(0, 2.5, 5)) == approx(0.75)


def test_bracket_accuracy_on_binary_labels_splits_at_the_midpoint():
    # 0/1 labels: the scaled 0-2/2-4/4-5 brackets (0-0.4/0.4-0.8/0.8-1) leave a middle bracket no label
    # can fall in, so a calibrated probability of 0.6 could never count. Two halves instead:
    # pred [0.6, 0.3, 0.7, 0.45, 0.5, 0.0], gold [1, 0, 0, 1, 1, 0]: hits at items 0, 1, 4 (0.5 opens
    # the upper half), 5 -> 4/6; MAE = (0.4+0.3+0.7+0.55+0.5+0)/6 = 2.45/6.
    pred, gold = [0.6, 0.3, 0.7, 0.45, 0.5, 0.0], [1, 0, 0, 1, 1, 0]
    assert m.default_bracket_edges((0, 1), gold).tolist() == [0.0, 0.5, 1.0]
    row = m.evaluate_predictions(pred, gold, label_range=(0, 1), n_resamples=0)
    assert row["bracket_accuracy"] == approx(4 / 6)
    assert row["mae"] == approx(2.45 / 6)
    # the old edges would have scored only the two items at the ends (0.0 hit, 0.7 in the middle missed)
    assert m.bracket_accuracy(pred, gold, edges=(0, 0.4, 0.8, 1.0)) == approx(2 / 6)
    # -1/1 preferences: same rule; graded labels keep the scaled 0-2/2-4/4-5 brackets
    assert m.default_bracket_edges((-1, 1), [-1, 1, 1]).tolist() == [-1.0, 0.0, 1.0]
    assert m.default_bracket_edges((0, 1), [0, 0.5, 1]).tolist() == approx([0.0, 0.4, 0.8, 1.0])
    assert m.default_bracket_edges((0, 5), [0, 5]).tolist() == [0.0, 2.5, 5.0]


def test_constant_3_4_scores_share_of_middle_bracket():
    # MSRpar fact: always answering 3.4 (bracket [2,4)) scores the share of labels in [2,4).
    gold = [0.5, 1.8, 2.0, 2.6, 3.9, 4.0, 4.8, 5.0]  # in [2,4): 2.0, 2.6, 3.9 -> 3/8
    assert m.bracket_accuracy([3.4] * len(gold), gold) == approx(3 / 8)


# ---------------------------------------------------------------- correlation


def test_spearman_with_ties():
    # ranks pred [1.5, 1.5, 3, 4], gold [1, 2.5, 2.5, 4]; deviations from 2.5:
    # p [-1, -1, .5, 1.5], g [-1.5, 0, 0, 1.5]; cov 1.5 + 2.25 = 3.75; var 4.5 each -> 3.75 / 4.5 = 5/6
    assert m.correlation([1, 1, 2, 3], [1, 2, 2, 3], "spearman") == approx(5 / 6)
    # ranks pred [1, 2.5, 2.5, 4]: dev [-1.5, 0, 0, 1.5] vs [-1.5, -.5, .5, 1.5]: 4.5 / sqrt(4.5 * 5) = sqrt(0.9)
    assert m.correlation([1, 2, 2, 3], [1, 2, 3, 4]) == approx(math.sqrt(0.9))


def test_kendall_tau_b_with_ties():
    # pairs: (1,2) tie in pred, (2,3) tie in gold, other 4 concordant: 4 / sqrt((6-1)(6-1)) = 0.8
    assert m.correlation([1, 1, 2, 3], [1, 2, 2, 3], "kendall") == approx(0.8)
    # pred [3,1,2,2] vs gold [1,2,3,4]: 3 discordant (item 1 with all), 2 concordant, 1 pred tie:
    # (2 - 3) / sqrt((6-1) * 6) = -1/sqrt(30)
    assert m.correlation([3, 1, 2, 2], [1, 2, 3, 4], "kendall") == approx(-1 / math.sqrt(30))


def test_pearson():
    # deviations [-1.5, -.5, .5, 1.5] vs [-1.5, .5, -.5, 1.5]: cov 2.25 - .25 - .25 + 2.25 = 4; var 5, 5 -> 0.8
    assert m.correlation([1, 2, 3, 4], [1, 3, 2, 4], "pearson") == approx(0.8)


def test_correlation_matches_scipy_on_random_ties():
    rng = np.random.default_rng(7)
    pred = rng.integers(0, 5, 60)
    gold = pred + rng.integers(0, 6, 60)  # many ties on both sides, positively correlated
    assert m.correlation(pred, gold, "spearman") == approx(stats.spearmanr(pred, gold).statistic)
    assert m.correlation(pred, gold, "kendall") == approx(stats.kendalltau(pred, gold).statistic)
    assert m.correlation(pred, gold, "pearson") == approx(stats.pearsonr(pred, gold).statistic)


@pytest.mark.parametrize("method", m.CORRELATIONS)
@pytest.mark.parametrize("pred, gold", [([2, 2, 2], [1, 2, 3]), ([1, 2, 3], [4, 4, 4]), ([1], [2]), ([], [])])
def test_correlation_undefined_is_none(method, pred, gold):
    assert m.correlation(pred, gold, method) is None


def test_correlation_unknown_method():
    with pytest.raises(ValueError, match="unknown correlation"):
        m.correlation([1, 2], [1, 2], "tau")


# ---------------------------------------------------------------- grouped values

# a: spearman 1; b: pred ranks [1,2,3] vs gold [1,3,2] -> dev [-1,0,1]·[-1,1,0] = 1, / 2 = 0.5;
# c: constant labels; d: constant predictions; e: a single item.
GROUPED = [  # (group, pred, gold)
    ("a", 1, 1), ("a", 2, 2), ("a", 3, 3),
    ("b", 1, 1), ("b", 2, 3), ("b", 3, 2),
    ("c", 1, 2), ("c", 2, 2),
    ("d", 4, 1), ("d", 4, 2),
    ("e", 1, 5),
]


def _columns(rows):
    groups, pred, gold = zip(*rows)
    return list(pred), list(gold), list(groups)


def test_grouped_correlation_skips_and_counts():
    pred, gold, groups = _columns(GROUPED)
    result = m.grouped_correlation(pred, gold, groups)
    # (1 + 0.5) / 2 = 0.75; c and d undefined, e too small
    assert result == m.GroupedValue(value=approx(0.75), groups_used=2, skipped_small=1, skipped_constant=2)
    assert result.to_dict() == {"value": approx(0.75), "groups_used": 2, "skipped_small": 1, "skipped_constant": 2}


def test_per_group_values_lists_defined_values():
    pred, gold, groups = _columns(GROUPED)
    values, small, undefined = m.per_group_values(pred, gold, groups, lambda p, g: m.correlation(p, g))
    assert sorted(values) == approx([0.5, 1.0]) and (small, undefined) == (1, 2)


def test_grouped_all_skipped_is_none():
    result = m.grouped_correlation([1, 2, 3, 3, 7], [2, 2, 1, 2, 5], ["c", "c", "d", "d", "e"])
    assert result == m.GroupedValue(None, 0, skipped_small=1, skipped_constant=2)


def test_grouped_is_order_independent():
    pred, gold, groups = _columns(GROUPED)
    reference = m.grouped_correlation(pred, gold, groups, "kendall")
    for seed in range(5):
        shuffled = random.Random(seed).sample(GROUPED, len(GROUPED))
        pred, gold, groups = _columns(shuffled)
        assert m.grouped_correlation(pred, gold, groups, "kendall") == reference


def test_grouped_empty_input_has_no_groups():
    assert m.grouped_correlation([], [], []) == m.GroupedValue(None, 0, skipped_small=0, skipped_constant=0)


# ---------------------------------------------------------------- best accuracy

BEST = [  # (group, pred, gold)
    ("q1", 0.9, 5), ("q1", 0.1, 1), ("q1", 0.5, 3),  # top 5 = best, bottom 1 = worst: hit, hit
    ("q2", 0.9, 5), ("q2", 0.9, 4), ("q2", 0.2, 1),  # tied top includes a 4: miss
    ("q3", 0.9, 5), ("q3", 0.9, 5), ("q3", 0.2, 1),  # tied top both best: hit; bottom worst: hit
    ("q4", 0.8, 4), ("q4", 0.3, 1), ("q4", 0.1, 2),  # top best: hit; bottom labelled 2, worst is 1: miss
    ("q5", 0.8, 3), ("q5", 0.1, 3),                  # all labels equal: skipped
]


def test_best_accuracy():
    pred, gold, groups = _columns(BEST)
    # hits q1, q3, q4 of 4 defined groups -> 3/4
    assert m.best_accuracy(pred, gold, groups) == m.GroupedValue(approx(0.75), 4, 0, 1)


def test_best_worst_accuracy():
    pred, gold, groups = _columns(BEST)
    # both ends right in q1, q3 only -> 2/4
    assert m.best_accuracy(pred, gold, groups, with_worst=True) == m.GroupedValue(approx(0.5), 4, 0, 1)


def test_best_accuracy_tied_bottom_must_all_be_worst():
    # top 0.9 -> 5 (hit); tied bottom 0.1 covers labels 1 and 2: worst side misses
    pred, gold = [0.9, 0.1, 0.1], [5, 1, 2]
    assert m.best_accuracy(pred, gold, ["q"] * 3).value == 1.0
    assert m.best_accuracy(pred, gold, ["q"] * 3, with_worst=True).value == 0.0


# ---------------------------------------------------------------- rbo


def test_rbo_identical_and_empty():
    assert m.rbo([1, 2, 3], [1, 2, 3]) == 1.0
    # p < 1 extrapolated: (1 - .9**3) + 1 * .9**3 = 1
    assert m.rbo([1, 2, 3], [1, 2, 3], p=0.9, extrapolate=True) == approx(1.0)
    # not extrapolated: (1 - p) * (1 + p + p^2) = 1 - p^3 = 0.271
    assert m.rbo([1, 2, 3], [1, 2, 3], p=0.9) == approx(1 - 0.9**3)
    assert m.rbo([], []) == 1.0
    assert m.rbo([1], []) == 0.0 and m.rbo([], [1]) == 0.0


def test_rbo_reversed_p1():
    # agreements: d1 0/1, d2 {1,2}&{3,2} = 1/2, d3 3/3 -> (0 + .5 + 1) / 3 = 0.5
    assert m.rbo([1, 2, 3], [3, 2, 1]) == approx(0.5)


# a = [1,2,3,4], b = [2,1,4,3]: agreements d1 0, d2 2/2 = 1, d3 {1,2,3}&{2,1,4} = 2/3, d4 4/4 = 1
A, B = [1, 2, 3, 4], [2, 1, 4, 3]


def test_rbo_p1_is_average_overlap():
    assert m.rbo(A, B) == approx((0 + 1 + 2 / 3 + 1) / 4)  # = 2/3


def test_rbo_p_below_one_and_extrapolate():
    # weights (1-p) p^(d-1) = .5, .25, .125, .0625: 0 + .25 + .125 * 2/3 + .0625 = 0.3958333
    assert m.rbo(A, B, p=0.5) == approx(0.25 + 0.125 * 2 / 3 + 0.0625)
    # + agreement(4) * p^4 = 1 * .0625 -> 0.4583333
    assert m.rbo(A, B, p=0.5, extrapolate=True) == approx(0.25 + 0.125 * 2 / 3 + 0.0625 + 0.0625)


def test_rbo_depth_cut():
    assert m.rbo(A, B, depth=2) == approx(0.5)  # (0 + 1) / 2
    assert m.rbo(A, B, depth=2, p=0.5) == approx(0.25)  # .5 * 0 + .25 * 1
    assert m.rbo(A, B, depth=99) == m.rbo(A, B)


@pytest.mark.parametrize("p", [0, -0.5, 1.5])
def test_rbo_bad_p(p):
    with pytest.raises(ValueError):
        m.rbo(A, B, p=p)


@pytest.mark.parametrize("p", [1.0, 0.9, 0.5])
def test_rbo_matches_pypi_package(p):
    rng = random.Random(int(p * 100))
    for _ in range(300):
        a = rng.sample(range(15), rng.randint(1, 12))  # different lengths, partial overlap
        b = rng.sample(range(15), rng.randint(1, 12))
        depth = rng.choice([None, rng.randint(1, 12)])
        ext = rng.random() < 0.5
        expected = rbo_pypi.RankingSimilarity(a, b).rbo(p=p, k=depth, ext=ext)
        assert m.rbo(a, b, p=p, depth=depth, extrapolate=ext) == approx(expected), (a, b, depth, ext)


# ---------------------------------------------------------------- ndcg

# items ordered by pred [3, 2, 1] carry gains [1, 3, 2]:
# DCG = 1/log2(2) + 3/log2(3) + 2/log2(4) = 1 + 1.892789 + 1 = 3.892789
# IDCG = 3 + 2/log2(3) + 1/2 = 4.761860 -> nDCG = 0.817494
NDCG_3 = (1 + 3 / math.log2(3) + 2 / 2) / (3 + 2 / math.log2(3) + 1 / 2)


def test_ndcg_perfect_and_hand_computed():
    assert m.ndcg([3, 2, 1], [3, 2, 1]).value == approx(1.0)
    assert NDCG_3 == approx(0.817494, abs=1e-6)
    assert m.ndcg([3, 2, 1], [1, 3, 2]).value == approx(NDCG_3)
    # k=1: DCG 1, IDCG 3 -> 1/3
    assert m.ndcg([3, 2, 1], [1, 3, 2], k=1).value == approx(1 / 3)


def test_ndcg_tied_predictions_average_gains():
    # both items tied: each position gets the mean gain .5: .5 * (1 + 1/log2(3)) = 0.815465; IDCG = 1
    assert m.ndcg([1, 1], [1, 0]).value == approx(0.5 * (1 + 1 / math.log2(3)))


def test_ndcg_per_group_average_skips_all_zero():
    pred = [3, 2, 1] + [3, 2, 1] + [1, 2] + [9]
    gold = [3, 2, 1] + [1, 3, 2] + [0, 0] + [4]
    result = m.ndcg(pred, gold, ["a"] * 3 + ["b"] * 3 + ["z"] * 2 + ["s"])
    # (1 + 0.817494) / 2 = 0.908747; "z" all-zero skipped, "s" a single item
    assert result == m.GroupedValue(approx((1 + NDCG_3) / 2), 2, skipped_small=1, skipped_constant=1)


def test_ndcg_matches_sklearn_per_group():
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(8), 12)
    pred, gold = rng.integers(0, 4, groups.size).astype(float), rng.integers(0, 6, groups.size).astype(float)
    expected = np.mean([ndcg_score([gold[groups == q]], [pred[groups == q]], k=5) for q in range(8)])
    assert m.ndcg(pred, gold, groups, k=5).value == approx(expected)


# ---------------------------------------------------------------- cohen kappa

# pairs (pred, gold): (1,1) (1,2) (2,2) (2,3) (3,3) (3,3); pred marginals 1/3 each, gold 1/6, 2/6, 3/6
K_PRED, K_GOLD = [1, 1, 2, 2, 3, 3], [1, 2, 2, 3, 3, 3]


def test_kappa_unweighted():
    # observed disagreement 2/6; chance 1 - (1/3)(1/6 + 2/6 + 3/6) = 2/3 -> 1 - (1/3)/(2/3) = 0.5
    assert m.cohen_kappa(K_PRED, K_GOLD) == approx(0.5)


def test_kappa_linear():
    # observed cost (1 + 1)/6 = 1/3; chance (1/3) * sum_j q_j * sum_i |i-j| = (1/3)(3/6 + 2*2/6 + 3*3/6) = 8/9
    # -> 1 - (1/3)/(8/9) = 0.625
    assert m.cohen_kappa(K_PRED, K_GOLD, weights="linear") == approx(0.625)


def test_kappa_quadratic():
    # observed 1/3; chance (1/3)(5/6 + 2*2/6 + 5*3/6) = 4/3 -> 1 - (1/3)/(4/3) = 0.75
    assert m.cohen_kappa(K_PRED, K_GOLD, weights="quadratic") == approx(0.75)


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_kappa_matches_sklearn(weights):
    rng = np.random.default_rng(11)
    gold = rng.integers(1, 6, 200)
    pred = np.clip(gold + rng.integers(-2, 3, 200), 1, 5)
    labels = [1, 2, 3, 4, 5]
    expected = cohen_kappa_score(pred, gold, weights=weights, labels=labels)
    assert m.cohen_kappa(pred, gold, weights=weights, labels=labels) == approx(expected)
    assert m.cohen_kappa(pred, gold, weights=weights) == approx(expected)  # every label used: same grid


def test_kappa_undefined_and_errors():
    assert m.cohen_kappa([2, 2, 2], [2, 2, 2]) is None
    assert m.cohen_kappa([2, 2, 2], [2, 2, 2], labels=[1, 2, 3]) is None
    with pytest.raises(ValueError, match="not among the labels"):
        m.cohen_kappa([1, 2, 2.5], [1, 2, 3], labels=[1, 2, 3])
    with pytest.raises(ValueError, match="weights"):
        m.cohen_kappa([1, 2], [1, 2], weights="cubic")


def test_snap_to_labels():
    # 2.5 is equidistant from 2 and 3 -> lower; 2.51 -> 3; below/above the grid -> ends; unsorted labels ok
    assert m.snap_to_labels([2.5, 2.51, 0.2, 7, 1.5], [3, 1, 2]).tolist() == [2, 3, 1, 3, 1]


# ---------------------------------------------------------------- bootstrap

GROUPS6 = ["a", "a", "b", "c", "c", "c"]


def test_resample_indices_draws_whole_groups():
    members = {"a": [0, 1], "b": [2], "c": [3, 4, 5]}
    samples = m.resample_indices(6, GROUPS6, n_resamples=100, seed=1)
    assert len(samples) == 100
    for s in samples:
        counts = np.bincount(s, minlength=6)
        drawn = 0
        for idx in members.values():
            assert len(set(counts[idx])) == 1  # every member of a group appears equally often
            drawn += counts[idx[0]]
        assert drawn == 3  # three groups drawn, with replacement
    assert len({tuple(s) for s in samples}) > 1


def test_resample_indices_seeded():
    same = [m.resample_indices(6, GROUPS6, n_resamples=20, seed=s) for s in (4, 4, 5)]
    assert all(np.array_equal(x, y) for x, y in zip(same[0], same[1]))
    assert not all(np.array_equal(x, y) for x, y in zip(same[0], same[2]))
    items = m.resample_indices(6, n_resamples=20, seed=4)
    assert all(len(s) == 6 and s.min() >= 0 and s.max() < 6 for s in items)


def _mae(p, g):
    return float(np.mean(np.abs(p - g)))


def test_bootstrap_interval_contains_point_and_is_seeded():
    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, 80)
    pred = gold + rng.normal(0, 1, 80)
    groups = np.repeat(np.arange(20), 4)
    ci = m.bootstrap_interval(_mae, pred, gold, groups, n_resamples=100, seed=1)
    assert ci.low < _mae(pred, gold) < ci.high and ci.resamples == 100
    assert m.bootstrap_interval(_mae, pred, gold, groups, n_resamples=100, seed=1) == ci
    assert m.bootstrap_interval(_mae, pred, gold, groups, n_resamples=100, seed=2) != ci


def test_bootstrap_interval_counts_defined_resamples():
    # two items: a resample drawing one item twice is constant -> correlation None -> not counted
    ci = m.bootstrap_interval(m.correlation, [1, 2], [1, 2], n_resamples=50, seed=0)
    assert 0 < ci.resamples < 50 and ci.low == approx(1.0) and ci.high == approx(1.0)
    assert m.bootstrap_interval(m.correlation, [1, 1], [1, 2], n_resamples=20) == m.Interval(None, None, 0)


def test_bootstrap_mean_interval():
    assert m.bootstrap_mean_interval([0.7] * 5, n_resamples=50) == m.Interval(approx(0.7), approx(0.7), 50)
    assert m.bootstrap_mean_interval([]) == m.Interval(None, None, 0)
    ci = m.bootstrap_mean_interval([0.0, 1.0, 0.5, 0.2], n_resamples=100)
    assert 0 <= ci.low < 0.425 < ci.high <= 1  # mean (0 + 1 + .5 + .2) / 4 = 0.425


# ---------------------------------------------------------------- baselines


def test_constant_baseline_is_training_median():
    # median of [1, 2, 3, 10] = (2 + 3) / 2 = 2.5
    assert m.constant_baseline([10, 1, 3, 2], 3).tolist() == [2.5, 2.5, 2.5]


def test_random_baseline_draws_training_labels_seeded():
    train = [0.0, 2.5, 5.0]
    draws = m.random_baseline(train, 200, seed=3)
    assert len(draws) == 200 and set(draws.tolist()) == set(train)
    assert np.array_equal(draws, m.random_baseline(train, 200, seed=3))
    assert not np.array_equal(draws, m.random_baseline(train, 200, seed=4))


# ---------------------------------------------------------------- evaluate

BASE_KEYS = {"n", "mae", "mae_ci", "bracket_accuracy", "bracket_accuracy_ci", "spearman", "spearman_ci",
             "kendall", "kendall_ci", "pearson", "pearson_ci"}
KAPPA_KEYS = {f"kappa_{w}{s}" for w in ("unweighted", "linear", "quadratic") for s in ("", "_ci")}
GROUP_KEYS = {f"{name}{s}" for name in ("spearman_per_group", "kendall_per_group", "pearson_per_group",
                                        "best_accuracy", "best_worst_accuracy")
              for s in ("", "_ci", "_groups")} | {"ndcg@10"}


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    gold = rng.integers(0, 6, n).astype(float)
    pred = np.clip(gold + rng.normal(0, 1, n), 0, 5)
    return pred, gold, [f"q{i // 4}" for i in range(n)]


def test_evaluate_keys_depend_on_options():
    pred, gold, groups = _data()
    plain = m.evaluate_predictions(pred, gold, label_range=(0, 5), n_resamples=50)
    assert set(plain) == BASE_KEYS and plain["n"] == 40
    full = m.evaluate_predictions(pred, gold, label_range=(0, 5), groups=groups, labels=range(6), n_resamples=50)
    assert set(full) == BASE_KEYS | KAPPA_KEYS | GROUP_KEYS
    assert m.evaluate_predictions(pred, gold, label_range=(0, 5), labels=range(6), n_resamples=50).keys() == \
        BASE_KEYS | KAPPA_KEYS
    assert full["mae"] == approx(np.mean(np.abs(pred - gold)))
    assert full["spearman_per_group_groups"]["used"] + full["spearman_per_group_groups"]["skipped_constant"] == 10


def test_evaluate_applies_pred_range():
    gold = [0, 1, 2, 3, 4, 5, 5, 0]
    pred = [g / 5 for g in gold]  # a judge answering on 0-1: exactly right once mapped onto 0-5
    row = m.evaluate_predictions(pred, gold, label_range=(0, 5), pred_range=(0, 1), labels=range(6),
                                 n_resamples=50)
    assert row["mae"] == approx(0.0) and row["bracket_accuracy"] == 1.0
    assert row["spearman"] == approx(1.0) and row["kappa_quadratic"] == approx(1.0)
    # unmapped it would be far off: mean |g/5 - g| = mean(0.8 g) = 0.8 * 20/8 = 2.0
    assert m.evaluate_predictions(pred, gold, label_range=(0, 5), n_resamples=50)["mae"] == approx(2.0)


def test_evaluate_brackets_scale_with_label_range():
    # label range 1-5: default edges 0/2/4/5 of 0-5 map to 1, 2.6, 4.2, 5; 2.5 and 2.7 straddle 2.6
    row = m.evaluate_predictions([2.5, 4.1], [2.7, 4.3], label_range=(1, 5), n_resamples=50)
    assert row["bracket_accuracy"] == 0.0  # brackets [0, 1] vs [1, 2]


def test_evaluate_without_nan_on_degenerate_data():
    # constant groups, single-item groups, constant predictions: undefined metrics become None, never NaN
    pred, gold, groups = _columns(GROUPED)
    row = m.evaluate_predictions(pred, gold, label_range=(0, 5), groups=groups, labels=range(6), n_resamples=50)
    _assert_no_nan(row)
    const = m.evaluate_predictions([3.0] * 11, gold, label_range=(0, 5), groups=groups, labels=range(6),
                                   n_resamples=50)
    _assert_no_nan(const)
    assert const["spearman"] is None and const["spearman_ci"] == [None, None]
    assert const["spearman_per_group"] is None and const["spearman_per_group_ci"] == [None, None]


def test_evaluate_with_baselines_rows():
    pred, gold, groups = _data()
    train = [0, 1, 1, 2, 3, 5]  # median (1 + 2) / 2 = 1.5
    rows = m.evaluate_with_baselines("judge", pred / 5, gold, train_labels=train, label_range=(0, 5),
                                     pred_range=(0, 1), groups=groups, labels=range(6), n_resamples=50)
    assert [r["name"] for r in rows] == ["judge", "constant", "random"]
    for row in rows:
        _assert_no_nan(row)
        assert set(row) == {"name"} | BASE_KEYS | KAPPA_KEYS | GROUP_KEYS
    assert rows[0]["mae"] == approx(np.mean(np.abs(pred - gold)))  # pred_range applied to the judge only
    assert rows[1]["mae"] == approx(np.mean(np.abs(1.5 - gold)))  # baseline answers 1.5 on the label scale
    assert rows[1]["spearman"] is None
    expected_random = m.random_baseline(train, len(gold), seed=0)
    assert rows[2]["mae"] == approx(np.mean(np.abs(expected_random - gold)))


def test_evaluate_negative_label_scale_with_groups():
    row = m.evaluate_predictions([0.1, 0.6, 0.9, 0.2], [-2, 0, 2, -1], label_range=(-2, 2), pred_range=(0, 1),
                                 groups=["a", "a", "b", "b"], n_resamples=20)
    _assert_no_nan(row)
    # gains are shifted so the lowest grade (-2) gains 0: a -> [0, 2], b -> [4, 1]; both ordered ideally
    assert row["ndcg@10"] == approx(1.0)
    with pytest.raises(ValueError, match="non-negative"):
        m.ndcg([1, 2], [-1, 0])


def test_the_random_baseline_is_a_spread_over_seeds_not_one_draw():
    rng = np.random.default_rng(3)
    gold, train = rng.integers(0, 6, 120).astype(float), rng.integers(0, 6, 300).astype(float)
    row = m.random_baseline_spread(train, gold, label_range=(0, 5), n_seeds=200, seed=0)
    draws = [m.correlation(m.random_baseline(train, len(gold), seed=s), gold) for s in range(200)]
    assert row["seeds"] == 200 and row["n"] == 120
    assert row["spearman"] == pytest.approx(np.mean(draws))
    assert row["spearman_ci"] == pytest.approx(list(np.percentile(draws, [2.5, 97.5])))
    assert abs(row["spearman"]) < 0.03 < row["spearman_ci"][1]  # chance: centred on 0, one draw can look good
    assert row == m.random_baseline_spread(train, gold, label_range=(0, 5), n_seeds=200, seed=0)


def test_paired_difference_resamples_the_same_items_for_both_judges():
    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, 200)
    good = gold + rng.normal(0, 0.5, 200)
    noisy = gold + rng.normal(0, 3.0, 200)
    same = m.paired_difference(m.correlation, good, good, gold)
    assert same["difference"] == 0.0 and same["ci"] == [0.0, 0.0]  # a judge against itself: no spread at all
    better = m.paired_difference(m.correlation, good, noisy, gold)
    assert better["difference"] == pytest.approx(m.correlation(good, gold) - m.correlation(noisy, gold))
    assert 0 < better["ci"][0] < better["difference"] < better["ci"][1]
    errors = m.paired_difference(m.mae, good, noisy, gold)
    assert errors["ci"][1] < 0  # the better judge's MAE is lower on every resample's scale
    with pytest.raises(ValueError, match="same items"):
        m.paired_difference(m.mae, good[:10], noisy, gold)


def test_spearman_rows_equals_correlation_row_by_row_with_ties_and_constant_rows():
    rng = np.random.default_rng(0)
    pred = rng.integers(0, 4, (300, 12)).astype(float)  # many ties
    gold = rng.integers(0, 3, (300, 12)).astype(float)
    pred[5], gold[7] = 2.0, 1.0  # constant rows: undefined
    rows = m.spearman_rows(pred, gold)
    for p, g, r in zip(pred, gold, rows):
        expected = m.correlation(p, g)
        assert (np.isnan(r) and expected is None) or r == pytest.approx(expected, abs=1e-12)
    assert np.isnan(rows[5]) and np.isnan(rows[7])
    interval = m.interval_of(rows)
    assert interval.resamples == 298 and interval.low < interval.high


def test_the_mean_interval_from_scipy_is_the_hand_written_one():
    # the interval before scipy.stats.bootstrap replaced it: the same seeded draws, numpy percentiles
    def by_hand(v, n_resamples, seed):
        draws = v[np.random.default_rng(seed).integers(0, v.size, (n_resamples, v.size))].mean(axis=1)
        return np.percentile(draws, [2.5, 97.5])

    rng = np.random.default_rng(11)
    for seed in range(20):
        v = rng.normal(size=int(rng.integers(2, 40)))
        got = m.bootstrap_mean_interval(v.tolist(), n_resamples=300, seed=seed)
        assert [got.low, got.high] == approx(by_hand(v, 300, seed).tolist(), abs=1e-12)
    assert m.bootstrap_mean_interval([0.4], n_resamples=30) == m.Interval(0.4, 0.4, 30)
    assert m.bootstrap_mean_interval([0.4, 0.5], n_resamples=0) == m.Interval(None, None, 0)


def test_compare_gives_each_pair_paired_spearman_and_mae_differences_with_intervals():
    from judgetune.datasets import Example
    from judgetune.evaluation import compare_scores

    rng = np.random.default_rng(0)
    gold = rng.normal(size=60)
    examples = [Example(id=str(i), answer="a", label=float(g)) for i, g in enumerate(gold)]
    close, noise = list(gold + rng.normal(scale=0.3, size=60)), list(rng.normal(size=60))
    pair = compare_scores({"close": close, "noise": noise}, examples, label_range=(-3, 3), n_resamples=300)["pairs"][0]
    rho, err = pair["spearman_difference"], pair["mae_difference_ci"]
    assert rho["low"] > 0.4 and rho["low"] < rho["value"] < rho["high"]  # the close judge ranks far better
    assert err["high"] < 0 and err["value"] == pytest.approx(pair["mae_difference"])
    same = compare_scores({"a": close, "b": close}, examples, label_range=(-3, 3), n_resamples=300)["pairs"][0]
    assert same["spearman_difference"] == {"value": 0.0, "low": 0.0, "high": 0.0}
