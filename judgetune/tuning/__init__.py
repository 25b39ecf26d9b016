"""Tuning: an Optuna study over a judge's search space against human labels, and the run that turns
its choice into a calibrated, frozen judge config."""

from judgetune.tuning._run import finish, tune, write_predictions
from judgetune.tuning._search import (
    PICK_RULES,
    SAMPLERS,
    CallBudget,
    Objective,
    RunSpec,
    Splits,
    default_storage,
    finished_trials,
    fit_space,
    join_study,
    judge_for,
    load_run_lm,
    load_study,
    make_sampler,
    objectives,
    open_study,
    pick_trial,
    prepare_splits,
    run_trials,
    search_summary,
    storage_for,
    suggest,
    total_calls,
)

__all__ = ["PICK_RULES", "SAMPLERS", "CallBudget", "Objective", "RunSpec", "Splits", "default_storage", "finish",
           "finished_trials", "fit_space", "join_study", "judge_for", "load_run_lm", "load_study", "make_sampler",
           "objectives", "open_study", "pick_trial", "prepare_splits", "run_trials", "search_summary", "storage_for",
           "suggest", "total_calls", "tune", "write_predictions"]
