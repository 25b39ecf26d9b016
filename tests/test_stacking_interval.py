"""The stacking benchmark's interval (``benchmarks/stacking.py::split_interval``) over repeated random splits: on
synthetic data where two fitted judges are equally good it holds 0 in about 95% of seeds (the plain t over the same
splits does not), and where one is better it excludes 0 in most seeds. Each judge is a least-squares fit on its own
three noisy copies of the signal; the splits are the benchmark's own draws (``_matrix.split_units``)."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        yield importlib.import_module("stacking"), importlib.import_module("_matrix")


def _fitted(x: np.ndarray, gold: np.ndarray, lab: np.ndarray, test: np.ndarray) -> np.ndarray:
    design = np.column_stack([np.ones(len(x)), x])
    coef = np.linalg.lstsq(design[lab], gold[lab], rcond=None)[0]
    return design[test] @ coef


def _seed(bench, seed: int, n: int, edge: float, splits: int = 20, labels: int = 300):
    """One data set of ``n`` items and ``splits`` random splits: judge A's copies carry ``1 - edge`` of judge B's
    noise. Returns the corrected interval and the plain t interval of A's Spearman minus B's."""
    stacking, matrix = bench
    rng = np.random.default_rng(seed)
    signal = rng.normal(size=n)
    gold = signal + rng.normal(size=n)
    a = signal[:, None] + (1 - edge) * rng.normal(size=(n, 3))
    b = signal[:, None] + rng.normal(size=(n, 3))
    ids = [str(i) for i in range(n)]
    diffs, shares = [], []
    for d in range(splits):
        lab, test = matrix.split_units(ids, labels, np.random.default_rng([seed, d]))
        diffs.append(sps.spearmanr(_fitted(a, gold, lab, test), gold[test])[0]
                     - sps.spearmanr(_fitted(b, gold, lab, test), gold[test])[0])
        shares.append(len(test) / len(lab))
    diffs = np.asarray(diffs)
    plain = sps.t.interval(0.95, splits - 1, loc=diffs.mean(), scale=diffs.std(ddof=1) / np.sqrt(splits))
    return stacking.split_interval(diffs, float(np.mean(shares))), plain


@pytest.mark.parametrize("n", [400, 900])  # the wide matrices' size, and three times the labels
def test_on_equally_good_judges_the_interval_holds_zero_in_about_95_percent_of_seeds(bench, n):
    seeds = 150
    held = plain_held = 0
    for seed in range(seeds):
        interval, plain = _seed(bench, seed, n, edge=0.0)
        assert interval["splits"] == 20 and interval["test_fraction"] == pytest.approx((n - 300) / 300)
        held += interval["low"] <= 0 <= interval["high"]
        plain_held += plain[0] <= 0 <= plain[1]
    # measured: 143 and 144 of 150 (the plain t: 80 and 42); 136 is about two binomial standard deviations below 95%
    assert held >= 136, f"held 0 in {held} of {seeds} seeds"
    assert plain_held <= 0.8 * seeds, f"the plain t held 0 in {plain_held} of {seeds}: the splits' overlap matters"


def test_a_better_judge_is_shown_better_in_most_seeds(bench):
    seeds = 40
    above = sum(_seed(bench, seed, 900, edge=0.5)[0]["low"] > 0 for seed in range(seeds))
    assert above >= 0.8 * seeds, f"above 0 in {above} of {seeds}"  # measured: 39 of 40


def test_one_split_gives_an_estimate_and_no_interval(bench):
    stacking, _ = bench
    alone = stacking.split_interval(np.array([0.05]), 2.0)
    assert alone["value"] == pytest.approx(0.05) and alone["low"] is None and alone["high"] is None
