"""Calibrators: fitting, the cross-validated choice, and JSON round trips that predict identically."""

from __future__ import annotations

import json

import numpy as np
import pytest

from judgetune.calibration import (
    ConstantCalibrator,
    IsotonicCalibrator,
    LinearCalibrator,
    calibrator_from_dict,
    cross_validated_mae,
    fit_calibrator,
)


def test_linear_calibrator_recovers_a_line_and_clips_to_the_scale():
    raw = np.linspace(0, 1, 20)
    cal = LinearCalibrator((0, 5)).fit(raw, 1 + 3 * raw)
    assert cal.slope_ == pytest.approx(3) and cal.intercept_ == pytest.approx(1)
    assert cal.predict([0.5, 10, -10]).tolist() == pytest.approx([2.5, 5, 0])


def test_linear_calibrator_never_turns_a_judge_upside_down():
    raw = np.linspace(0, 1, 20)
    gold = 4 - 3 * raw  # scores that fall as the labels rise
    cal = LinearCalibrator((0, 5)).fit(raw, gold)
    assert cal.slope_ == 0 and cal.predict([0.0, 1.0]).tolist() == pytest.approx([np.median(gold)] * 2)


def test_linear_calibrator_fits_the_median_line_not_the_mean_one():
    # a fifth of the labels sit far above the line: least squares follows them, median regression does not
    rng = np.random.default_rng(4)
    raw = rng.uniform(0, 1, 100)
    gold = 1 + 2 * raw
    gold[::5] += 3
    cal = LinearCalibrator((0, 10)).fit(raw, gold)
    assert cal.slope_ == pytest.approx(2, abs=1e-6) and cal.intercept_ == pytest.approx(1, abs=1e-6)
    least_squares = np.polyfit(raw, gold, 1)
    assert least_squares[1] > 1.4  # what the mean fit would have shipped


def l1_isotonic_by_linear_programming(x, y):
    """The least-absolute-error non-decreasing fit at the data points, solved as a linear program."""
    from scipy.optimize import linprog

    order = np.argsort(x, kind="stable")
    xs, ys, n = x[order], y[order], len(x)
    cost = np.concatenate([np.zeros(n), np.ones(n)])  # variables: f (n), t (n); minimize sum t
    rows, bounds = [], []

    def row(pairs: dict[int, float], bound: float) -> None:
        a = np.zeros(2 * n)
        for index, value in pairs.items():
            a[index] = value
        rows.append(a)
        bounds.append(bound)

    for i in range(n):  # |f_i - y_i| <= t_i
        row({i: 1, n + i: -1}, ys[i])
        row({i: -1, n + i: -1}, -ys[i])
    for i in range(n - 1):  # f_i <= f_{i+1}, equal for equal x
        row({i: 1, i + 1: -1}, 0.0)
        if xs[i] == xs[i + 1]:
            row({i: -1, i + 1: 1}, 0.0)
    result = linprog(cost, A_ub=np.array(rows), b_ub=np.array(bounds), bounds=[(None, None)] * (2 * n))
    return result.fun / n


@pytest.mark.parametrize("seed", range(5))
def test_isotonic_calibrator_has_the_least_absolute_error_of_any_monotone_map(seed):
    from sklearn.isotonic import IsotonicRegression

    rng = np.random.default_rng(seed)
    raw = np.round(rng.uniform(0, 1, 40), 1)  # ties in the raw scores
    gold = np.where(rng.uniform(size=40) < 0.6, 5.0, rng.integers(0, 6, 40).astype(float))  # skewed to the top
    fitted = np.mean(np.abs(IsotonicCalibrator((0, 5)).fit(raw, gold).predict(raw) - gold))
    assert fitted == pytest.approx(l1_isotonic_by_linear_programming(raw, gold), abs=1e-9)
    squared = np.mean(np.abs(IsotonicRegression().fit(raw, gold).predict(raw) - gold))
    assert fitted <= squared + 1e-12 and fitted <= np.mean(np.abs(np.median(gold) - gold)) + 1e-12


def test_a_flat_calibrator_is_said_once_not_shipped_silently(caplog):
    raw = np.linspace(0, 1, 12)
    with caplog.at_level("WARNING"):
        calibrator, _ = fit_calibrator(raw, 4 - 3 * raw, label_range=(0, 5))  # scores fall as labels rise
    assert np.ptp(calibrator.predict(raw)) == 0
    assert [r.getMessage() for r in caplog.records if "is flat" in r.getMessage()]
    caplog.clear()
    with caplog.at_level("WARNING"):
        fit_calibrator(raw, 1 + 3 * raw, label_range=(0, 5))
    assert not [r for r in caplog.records if "is flat" in r.getMessage()]


def test_isotonic_calibrator_is_monotone_and_within_the_scale():
    rng = np.random.default_rng(0)
    raw = rng.uniform(0, 1, 200)
    gold = np.clip(5 * raw ** 3 + rng.normal(0, 0.3, 200), 0, 5)
    cal = IsotonicCalibrator((0, 5)).fit(raw, gold)
    grid = cal.predict(np.linspace(-1, 2, 50))
    assert np.all(np.diff(grid) >= 0) and grid.min() >= 0 and grid.max() <= 5


@pytest.mark.parametrize("cls", [LinearCalibrator, IsotonicCalibrator, ConstantCalibrator])
def test_calibrators_round_trip_through_json(cls):
    rng = np.random.default_rng(1)
    raw, gold = rng.uniform(0, 1, 50), rng.uniform(0, 5, 50)
    cal = cls((0, 5)).fit(raw, gold)
    again = calibrator_from_dict(json.loads(json.dumps(cal.to_dict())))
    probe = rng.uniform(-0.5, 1.5, 100)
    assert again.predict(probe).tolist() == cal.predict(probe).tolist()


def test_cross_validation_picks_the_kind_that_fits():
    rng = np.random.default_rng(2)
    raw = rng.uniform(0, 1, 300)
    step = np.where(raw > 0.5, 4.5, 0.5) + rng.normal(0, 0.1, 300)
    chosen, cv = fit_calibrator(raw, step, label_range=(0, 5))
    assert chosen.kind == "isotonic" and cv["isotonic"] < cv["linear"]
    line = 1 + 2 * raw + rng.normal(0, 0.5, 300)
    chosen, cv = fit_calibrator(raw, line, label_range=(0, 5))
    assert chosen.kind == "linear" and cv["linear"] < cv["isotonic"]
    noise = rng.integers(0, 6, 300).astype(float)  # labels the scores know nothing about
    fits = [fit_calibrator(raw, noise, label_range=(0, 5), seed=seed)[0] for seed in range(5)]
    assert sum(c.kind == "constant" for c in fits) >= 4  # the folds' luck may favour a near-flat map once
    assert next(c for c in fits if c.kind == "constant").predict([0.0, 1.0]).tolist() == [np.median(noise)] * 2


def test_bad_calibrator_data_is_refused():
    with pytest.raises(ValueError, match="at least 4"):
        fit_calibrator([0.1, 0.2], [1, 2], label_range=(0, 5))
    with pytest.raises(ValueError, match="kind"):
        calibrator_from_dict({"kind": "spline"})


def test_calibrators_are_scikit_learn_estimators():
    from sklearn.base import clone

    cal = LinearCalibrator((1, 5))
    assert cal.get_params() == {"label_range": (1, 5)}
    assert not hasattr(cal, "slope_")  # nothing learned before fit
    fitted = cal.fit(np.array([[0.0], [1.0], [2.0], [3.0]]), [1, 2, 3, 4])
    assert fitted is cal and cal.predict([[1.5]]).tolist() == pytest.approx([2.5])
    assert clone(cal).get_params() == cal.get_params() and not hasattr(clone(cal), "slope_")
    assert cal.score([0.0, 1.0, 2.0, 3.0], [1, 2, 3, 4]) == pytest.approx(1.0)  # RegressorMixin's R^2


def test_cross_validation_holds_out_whole_groups():
    # each question's answers share a question-specific offset: seen in training, a question's offset is
    # learnt by the isotonic map through its raw scores; only group-wise folds show it does not carry over
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(20), 10)
    offset = rng.uniform(0, 4, 20)[groups]
    raw = offset + rng.normal(0, 0.01, 200)
    gold = np.clip(offset + rng.normal(0, 0.3, 200), 0, 5)
    by_item = cross_validated_mae("isotonic", raw, gold, label_range=(0, 5))
    by_group = cross_validated_mae("isotonic", raw, gold, label_range=(0, 5), groups=groups.tolist())
    assert by_group > by_item  # holding out whole questions is the harder, honest test
    with pytest.raises(ValueError, match="groups has 3 entries"):
        fit_calibrator(raw[:4], gold[:4], label_range=(0, 5), groups=["a", "b", "c"])


@pytest.mark.parametrize("data, message", [
    ({"kind": "linear", "label_range": [0, 5], "slope": float("nan"), "intercept": 0.0}, "slope: .*finite number"),
    ({"kind": "linear", "label_range": [5, 0], "slope": 1.0, "intercept": 0.0}, "low below high"),
    ({"kind": "linear", "label_range": [0, 5], "slope": 1.0}, "intercept: Field required"),
    ({"kind": "linear", "label_range": [0, 5], "slope": 1.0, "intercept": 0.0, "url": "x"}, "url: Extra inputs"),
    ({"kind": "constant", "label_range": [0, 5], "value": True}, "value: .*valid number"),
    ({"kind": "constant", "label_range": [0, 5, 9], "value": 1.0}, "label_range: .*at most 2"),
    ({"kind": "isotonic", "label_range": [0, 5], "x": [1.0, 0.0], "y": [1.0, 2.0]}, "non-decreasing"),
    ({"kind": "isotonic", "label_range": [0, 5], "x": [0.0], "y": [1.0, 2.0]}, "one length"),
    ({"kind": "isotonic", "label_range": [0, 5], "x": [], "y": []}, "x: .*at least 1"),
    (["linear"], "valid dictionary"),
])
def test_a_broken_calibrator_is_refused(data, message):
    with pytest.raises(ValueError, match=message):
        calibrator_from_dict(data)


def test_the_constant_calibrator_is_the_labels_median_clipped_to_the_scale():
    # the median now comes from scikit-learn's DummyRegressor; the figure is numpy's median, as before
    rng = np.random.default_rng(4)
    for n in (1, 2, 5, 40):
        gold = rng.integers(0, 11, n) / 2.0
        assert ConstantCalibrator((0, 5)).fit(np.zeros(n), gold).value_ == float(np.median(gold))
    assert ConstantCalibrator((1, 5)).fit([0.0, 0.0], [0.0, 0.5]).value_ == 1.0


@pytest.mark.parametrize("calibrator, found", [
    ({"kind": "linear", "slope": -1.0, "intercept": 6.0}, "calibrator: linear calibrator: slope: expected 0 or more "
                                                          "(a calibrator keeps the judge's order), found -1"),
    ({"kind": "isotonic", "x": [0.0, 0.5, 1.0], "y": [5.0, 3.0, 1.0]},
     "calibrator: isotonic calibrator: y: expected non-decreasing values (a calibrator keeps the judge's order), "
     "found 3 after 5 (y[1])"),
])
def test_a_calibrator_that_reverses_the_judges_order_is_refused_at_load_in_one_line(tmp_path, run_cli, calibrator,
                                                                                       found):
    """judge.json is untrusted input: a hand-edited map that falls (a negative slope, isotonic values that decrease)
    would score every item in reverse order with exit 0. It is refused when the file loads, in one line naming the
    field, from the command line and from Python; nothing is scored."""
    import judgetune
    from judgetune.config import ConfigError, JudgeConfig

    config = JudgeConfig(judge="length", params={}, lm=None, instruction=None, demos=[], label_range=[1.0, 5.0],
                         calibrator={"kind": "linear", "label_range": [1.0, 5.0], "slope": 1.0, "intercept": 1.0})
    path = config.save(tmp_path / "judge.json")
    path.write_text(json.dumps({**json.loads(path.read_text()), "calibrator": {**calibrator, "label_range": [1.0, 5.0]}}))
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "answer": "word " * (i + 1)}) + "\n" for i in range(4)))
    out = tmp_path / "o.jsonl"
    code, stdout, err = run_cli(["score", "--config", str(path), "--data", str(data), "--out", str(out)])
    assert code == 2 and not out.exists() and stdout == ""
    assert err == f"judgetune: error: {path}: {found}\n"
    with pytest.raises(ConfigError, match=r"keeps the judge's order"):
        judgetune.load(path)
