"""Calibrators: fitting, the cross-validated choice, and JSON round trips that predict identically."""

from __future__ import annotations

import json

import numpy as np
import pytest

from judgetune.calibration import IsotonicCalibrator, LinearCalibrator, calibrator_from_dict, fit_calibrator


def test_linear_calibrator_recovers_a_line_and_clips_to_the_scale():
    raw = np.linspace(0, 1, 20)
    cal = LinearCalibrator((0, 5)).fit(raw, 1 + 3 * raw)
    assert cal.slope_ == pytest.approx(3) and cal.intercept_ == pytest.approx(1)
    assert cal.predict([0.5, 10, -10]).tolist() == pytest.approx([2.5, 5, 0])


def test_isotonic_calibrator_is_monotone_and_within_the_scale():
    rng = np.random.default_rng(0)
    raw = rng.uniform(0, 1, 200)
    gold = np.clip(5 * raw ** 3 + rng.normal(0, 0.3, 200), 0, 5)
    cal = IsotonicCalibrator((0, 5)).fit(raw, gold)
    grid = cal.predict(np.linspace(-1, 2, 50))
    assert np.all(np.diff(grid) >= 0) and grid.min() >= 0 and grid.max() <= 5


@pytest.mark.parametrize("cls", [LinearCalibrator, IsotonicCalibrator])
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


def test_bad_calibrator_data_is_refused():
    with pytest.raises(ValueError, match="at least 4"):
        fit_calibrator([0.1, 0.2], [1, 2], label_range=(0, 5))
    with pytest.raises(ValueError, match="kind"):
        calibrator_from_dict({"kind": "spline"})
