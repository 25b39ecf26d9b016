"""Calibrators: maps from a judge's raw score onto the human scale, fitted on dev, serialized as JSON."""

from judgetune.calibration._calibrators import (
    Calibrator,
    IsotonicCalibrator,
    LinearCalibrator,
    calibrator_from_dict,
    cross_validated_mae,
    fit_calibrator,
)

__all__ = ["Calibrator", "IsotonicCalibrator", "LinearCalibrator", "calibrator_from_dict", "cross_validated_mae",
           "fit_calibrator"]
