"""Tuning: an Optuna study over a judge's search space against human labels, and the run that turns
its choice into a calibrated, frozen judge config."""

from judgetune.tuning._pool import Candidate, InstructionPool, refusal, seed_instructions
from judgetune.tuning._proposals import Miss, ProposalTask, clean_proposal, proposal_prompt, propose_round
from judgetune.tuning._run import finish, proposals_summary, select_on_dev, tune, write_predictions
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
    lm_calls,
    load_proposer,
    load_run_lm,
    load_study,
    make_sampler,
    objectives,
    open_study,
    pick_trial,
    pool_seeds,
    prepare_splits,
    run_trials,
    search_summary,
    storage_for,
    suggest,
    total_calls,
)
from judgetune.tuning._selection import cross_fitted

__all__ = ["PICK_RULES", "SAMPLERS", "CallBudget", "Candidate", "InstructionPool", "Miss", "Objective", "ProposalTask",
           "RunSpec", "Splits", "clean_proposal", "cross_fitted", "default_storage", "finish", "finished_trials",
           "fit_space", "join_study", "judge_for", "lm_calls", "load_proposer", "load_run_lm", "load_study",
           "make_sampler", "objectives", "open_study", "pick_trial", "pool_seeds", "prepare_splits", "proposal_prompt",
           "proposals_summary", "propose_round", "refusal", "run_trials", "search_summary", "seed_instructions",
           "select_on_dev", "storage_for", "suggest", "total_calls", "tune", "write_predictions"]
