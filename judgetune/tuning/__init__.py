"""Tuning: an Optuna study over a judge's search space against human labels, and the run that turns
its choice into a calibrated, frozen judge config. Modules follow the run's stages: ``_spec``,
``_splits``, ``_space``, ``_objective``, ``_study``, ``_proposals`` (with ``_pool``), ``_selection``
(and the gate), ``_run`` (finish and ``tune``)."""

from judgetune.tuning._objective import MAX_FAILURE_RATE, Objective, lm_calls, objectives, ranked, search_key
from judgetune.tuning._pool import Candidate, InstructionPool, refusal, seed_instructions
from judgetune.tuning._proposals import (
    Miss,
    ProposalTask,
    clean_checklist,
    clean_proposal,
    load_proposer,
    proposal_prompt,
    proposal_round,
    propose_round,
)
from judgetune.tuning._run import (
    finish,
    freeze,
    proposals_summary,
    tune,
    write_predictions,
)
from judgetune.tuning._selection import Reject, candidate_trials, gate, rejection, select, select_on_dev, with_rescore
from judgetune.tuning._sentences import gain_line, gate_line, lm_line, seconds_line
from judgetune.tuning._space import PANEL, default_params, judge_for, pool_seeds, settled_params, suggest
from judgetune.tuning._spec import GATE_ITEMS_CAP, GATES, PICK_RULES, RESCORE, RESCORE_ITEMS, RUN_NAME, SAMPLERS, RunSpec
from judgetune.tuning._splits import Splits, fit_space, prepare_splits
from judgetune.tuning._study import (
    CallBudget,
    TrialProgress,
    default_storage,
    finished_trials,
    join_study,
    load_run_lm,
    load_study,
    make_sampler,
    open_study,
    run_trials,
    storage_for,
    study_summary,
    total_calls,
)

__all__ = ["GATE_ITEMS_CAP", "GATES", "MAX_FAILURE_RATE", "PICK_RULES", "RESCORE", "RESCORE_ITEMS", "RUN_NAME", "SAMPLERS",
           "CallBudget", "Candidate", "InstructionPool", "Miss", "PANEL",
           "Objective", "ProposalTask", "Reject", "RunSpec", "Splits", "TrialProgress", "candidate_trials",
           "clean_checklist", "clean_proposal", "default_params", "default_storage", "finish",
           "finished_trials",
           "fit_space", "freeze",
           "gain_line", "gate", "gate_line", "seconds_line", "join_study", "judge_for", "lm_calls",
           "lm_line", "load_proposer", "load_run_lm", "load_study", "make_sampler", "objectives", "open_study", "pool_seeds",
           "prepare_splits", "proposal_prompt", "proposal_round", "proposals_summary", "propose_round", "ranked",
           "refusal", "rejection", "run_trials", "search_key", "seed_instructions", "select", "study_summary",
           "select_on_dev", "settled_params", "storage_for", "suggest", "total_calls", "tune", "with_rescore",
           "write_predictions"]
