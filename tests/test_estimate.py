"""judgetune estimate: the PPI++ estimators (agreement with ppi_py, coverage over many seeds, never wider than
the labels alone, the power of the labels-needed rule), the command on real judges and its refusals, and
`pick --for estimate`."""

from __future__ import annotations

import numpy as np
import pytest

from judgetune import stats

# A fixed array and ppi_py 0.2.3's figures for it (computed once with ppi_py in its own environment: ppi_py needs
# numba, statsmodels and gdown, which judgetune does not install):
#   ppi_mean_ci(Y, Yhat, Yu, alpha=0.05)            -> (2.688504960402252, 3.6578010169716872)
#   ppi_mean_ci(Y, Yhat, Yu, alpha=0.1)             -> (2.766423541918043, 3.5798824354558962)
#   ppi_mean_pointestimate(Y, Yhat, Yu)             -> 3.1731529886869696
#   ppi_mean_pval(Y, Yhat, Yu, null=3.5)            -> 0.18623434129189842
#   ppi_mean_ci(Y, Yhat, Yu, alpha=0.05, lam=1)     -> (2.6979857073608557, 3.682014292639144)
Y = [3.0, 4.0, 2.0, 5.0, 1.0, 3.0, 4.0, 2.0, 3.0, 5.0, 4.0, 1.0]
YHAT = [2.8, 3.5, 2.6, 4.1, 1.9, 3.3, 3.6, 2.2, 2.5, 4.6, 3.9, 1.4]
YU = [3.1, 2.2, 4.4, 3.8, 1.7, 2.9, 3.3, 4.8, 2.4, 3.0, 1.2, 3.6, 2.7, 4.0, 3.4, 2.1, 3.9, 2.6, 4.2, 3.5]


def test_ppi_mean_agrees_with_ppi_py_on_a_fixed_array():
    est = stats.ppi_mean(Y, YHAT, YU, finite=False)
    assert est.value == pytest.approx(3.1731529886869696, abs=1e-12)
    assert (est.low, est.high) == pytest.approx((2.688504960402252, 3.6578010169716872), abs=1e-12)
    ten = stats.ppi_mean(Y, YHAT, YU, finite=False, alpha=0.1)
    assert (ten.low, ten.high) == pytest.approx((2.766423541918043, 3.5798824354558962), abs=1e-12)
    assert est.p_value(3.5) == pytest.approx(0.18623434129189842, abs=1e-12)
    plain = stats.ppi_mean(Y, YHAT, YU, finite=False, lam=1)
    assert (plain.low, plain.high) == pytest.approx((2.6979857073608557, 3.682014292639144), abs=1e-12)


def test_ppi_mean_agrees_with_ppi_py_live_when_installed():
    ppi_py = pytest.importorskip("ppi_py")
    y, f, u = np.asarray(Y), np.asarray(YHAT), np.asarray(YU)
    low, high = ppi_py.ppi_mean_ci(y, f, u, alpha=0.05)
    est = stats.ppi_mean(y, f, u, finite=False)
    assert (est.low, est.high) == pytest.approx((float(np.squeeze(low)), float(np.squeeze(high))), abs=1e-10)


def test_labels_mean_is_the_textbook_interval_and_its_finite_correction():
    y = np.asarray(Y)
    est = stats.labels_mean(y)
    se = y.std(ddof=1) / np.sqrt(len(y))  # s / sqrt(n), the t interval of a mean: t(0.975, 11) = 2.200985160082949
    assert est.value == pytest.approx(y.mean())
    assert (est.low, est.high) == pytest.approx((y.mean() - 2.200985160082949 * se, y.mean() + 2.200985160082949 * se))
    finite = stats.labels_mean(y, rows=48)  # a quarter of the rows labeled: variance times 1 - n/N = 0.75
    assert finite.se == pytest.approx(se * np.sqrt(0.75))
    assert stats.labels_mean(y, rows=len(y)).se == 0  # every row labeled: the mean over the rows is known


def _population(rng: np.random.Generator, size: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """Labels on 1-5 and a judge that sees them through noise and a bias (its own scale: 0.6 x + 1)."""
    truth = rng.integers(1, 6, size).astype(float)
    judge = 0.6 * truth + 1 + rng.normal(0, noise, size)
    return truth, judge


@pytest.mark.parametrize("n", [20, 60])
def test_finite_intervals_cover_the_all_labels_mean_over_many_seeds(n):
    rng = np.random.default_rng(11)
    truth, judge = _population(rng, 400, noise=0.7)
    target = truth.mean()
    hits = {"ppi++": 0, "labels": 0}
    draws = 600
    for _ in range(draws):
        labeled = np.zeros(len(truth), dtype=bool)
        labeled[rng.choice(len(truth), n, replace=False)] = True
        ppi = stats.ppi_mean(truth[labeled], judge[labeled], judge[~labeled])
        alone = stats.labels_mean(truth[labeled], rows=len(truth))
        hits["ppi++"] += ppi.low <= target <= ppi.high
        hits["labels"] += alone.low <= target <= alone.high
        assert ppi.se <= alone.se * (1 + 1e-12)  # in the same sample, never wider than the labels alone
    for method, hit in hits.items():
        assert 0.92 <= hit / draws <= 0.98, (method, hit / draws)


def test_ppi_gains_what_the_judge_explains():
    rng = np.random.default_rng(5)
    truth, judge = _population(rng, 5000, noise=0.3)
    worth = stats.labels_worth(truth, judge)
    r2 = np.corrcoef(truth, judge)[0, 1] ** 2
    assert worth["labels_worth"] == pytest.approx(1 / (1 - r2), rel=0.02)  # Var(Y) / Var(Y - lam f)
    assert worth["plain"] < worth["labels_worth"]  # the raw score is on its own scale: lam = 1 is not the best
    assert worth["lambda"] == pytest.approx(np.cov(truth, judge)[0, 1] / judge.var(ddof=1))
    useless = stats.labels_worth(truth, rng.normal(size=len(truth)))
    assert useless["labels_worth"] == pytest.approx(1.0, abs=0.01)


def _two_systems(rng: np.random.Generator, inputs: int) -> tuple[np.ndarray, ...]:
    hardness = rng.normal(0, 1, inputs)  # shared by both systems' answers to an input: pairing pays
    a = np.clip(np.round(3 + hardness + rng.normal(0, 0.7, inputs)), 1, 5)
    b = np.clip(np.round(3.3 + hardness + rng.normal(0, 0.7, inputs)), 1, 5)
    return a, b, a + rng.normal(0, 0.6, inputs), b + rng.normal(0, 0.6, inputs)


def test_paired_difference_covers_and_beats_unpaired():
    rng = np.random.default_rng(3)
    a, b, fa, fb = _two_systems(rng, 300)
    target = b.mean() - a.mean()
    hits, draws, paired_se, unpaired_se = 0, 400, [], []
    for _ in range(draws):
        lab = np.zeros(len(a), dtype=bool)
        lab[rng.choice(len(a), 40, replace=False)] = True
        est = stats.difference_paired(a[lab], b[lab], fa[lab], fb[lab], fa[~lab], fb[~lab])
        hits += est.low <= target <= est.high
        paired_se.append(est.se)
        one, two = (stats.ppi_mean(y[lab], f[lab], f[~lab]) for y, f in ((a, fa), (b, fb)))
        unpaired_se.append(stats.difference_unpaired(one, two).se)
    assert 0.92 <= hits / draws <= 0.98
    assert np.mean(paired_se) < 0.95 * np.mean(unpaired_se)  # the shared hardness cancels in a difference


def test_overlap_difference_covers_win_rates_under_one_random_sample():
    rng = np.random.default_rng(8)
    rows, systems = 600, 4
    first = rng.integers(0, systems, rows)
    second = (first + rng.integers(1, systems, rows)) % systems
    strength = np.array([0.0, 0.3, 0.6, 0.2])
    pref = np.clip(np.round(strength[second] - strength[first] + rng.normal(0, 1.2, rows)), -2, 2)
    score = pref + rng.normal(0, 1.0, rows)
    wins = {s: (np.where(second == s, 1, np.where(first == s, -1, 0))) for s in range(systems)}
    truth = {s: stats.win_values(pref, wins[s])[wins[s] != 0].mean() for s in range(systems)}
    hits, draws = 0, 400
    for _ in range(draws):
        lab = np.zeros(rows, dtype=bool)
        lab[rng.choice(rows, 120, replace=False)] = True
        args = []
        for s in (0, 2):
            side = wins[s]
            args += [stats.win_values(pref, side), stats.judged_wins(score, side, -2, 2), side != 0]
        _, _, diff = stats.overlap_difference(*args, lab)
        hits += diff.low <= truth[2] - truth[0] <= diff.high
    assert 0.92 <= hits / draws <= 0.98


def test_labels_needed_gives_about_80_percent_power():
    rng = np.random.default_rng(21)
    inputs = 4000
    a, b, fa, fb = _two_systems(rng, inputs)
    d, fd = b - a, fb - fa
    pilot = np.zeros(inputs, dtype=bool)
    pilot[rng.choice(inputs, 400, replace=False)] = True
    est = stats.ppi_mean(d[pilot], fd[pilot], fd[~pilot])
    true_diff = d.mean()
    n = stats.labels_needed(true_diff, [(est.residual_var, inputs)])
    assert 10 <= n <= 1000
    rejected, draws = 0, 400
    for _ in range(draws):
        lab = np.zeros(inputs, dtype=bool)
        lab[rng.choice(inputs, n, replace=False)] = True
        rejected += stats.ppi_mean(d[lab], fd[lab], fd[~lab]).p_value() < 0.05
    assert 0.72 <= rejected / draws <= 0.88
    assert stats.labels_needed(0.0, [(1.0, 100)]) is None
    assert stats.labels_needed(0.5, [(1.0, 100)]) <= 100  # labeling every row always settles a finite mean
