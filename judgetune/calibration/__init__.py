"""Calibrators: maps from a judge's raw score onto the human scale (fitted for absolute error),
cross-validated over the project's group-wise folds (``judgetune.datasets.group_folds``), serialized as JSON."""

from judgetune.calibration._calibrators import (
    CALIBRATOR_KINDS,
    CALIBRATORS,
    Calibrator,
    ConstantCalibrator,
    IsotonicCalibrator,
    LinearCalibrator,
    calibrator_from_dict,
    cross_fitted,
    cross_validated_mae,
    fit_calibrator,
    isotonic_l1,
)

__all__ = ["CALIBRATORS", "CALIBRATOR_KINDS", "Calibrator", "ConstantCalibrator", "IsotonicCalibrator",
           "LinearCalibrator", "calibrator_from_dict", "cross_fitted", "cross_validated_mae", "fit_calibrator",
           "isotonic_l1"]
