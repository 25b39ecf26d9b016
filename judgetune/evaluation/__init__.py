"""Evaluation: a judge scored on a split beside the trivial baselines; LINKAGE's protocol; paired comparison."""

from judgetune.evaluation._compare import compare_scores, paired_test
from judgetune.evaluation._evaluate import (
    agreement,
    cost_per_item,
    evaluate_judge,
    format_rows,
    judge_row,
    label_range_of,
    pair_accuracy,
    timed_verdicts,
)
from judgetune.evaluation._heldout import heldout_seed, tuned_seed, warn_other_data
from judgetune.evaluation._protocol import (
    PROTOCOLS,
    ProtocolDraw,
    apply_protocol,
    cross_fit,
    draw_references,
    question_folds,
)
from judgetune.evaluation._regrade import regrade_scores

__all__ = ["PROTOCOLS", "ProtocolDraw", "agreement", "apply_protocol", "compare_scores", "cost_per_item",
           "cross_fit", "draw_references", "evaluate_judge", "format_rows", "heldout_seed", "judge_row",
           "label_range_of", "pair_accuracy", "paired_test", "question_folds", "regrade_scores", "timed_verdicts",
           "tuned_seed", "warn_other_data"]
