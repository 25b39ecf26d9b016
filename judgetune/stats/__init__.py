"""Statistics every report uses: agreement metrics, correlations (global and per group), bootstrap
intervals and the trivial baselines' predictions."""

from judgetune.stats._evaluate import (
    constant_baseline,
    evaluate_predictions,
    evaluate_with_baselines,
    random_baseline,
    random_baseline_spread,
)
from judgetune.stats._gain import difference_record, filled, gain, harmful_gain, versus_constant
from judgetune.stats._gain_text import candidate_name, gain_parts
from judgetune.stats._gate import (
    FOLDS,
    REPEATS,
    WIDE_FOLD_UNITS,
    WIDE_FOLDS,
    ahead_of_default,
    best_candidate_index,
    corrected_lower,
    cut_folds,
    figures,
    folds_for,
    jackknife_spearman,
    nested_gate,
    one_sided_lower,
    paired_advantages,
    paired_unit_differences,
    panel_gate,
    t_interval,
    units_of,
    units_to_pass,
)
from judgetune.stats._metrics import (
    CORRELATIONS,
    DEFAULT_BRACKETS,
    GroupedValue,
    Interval,
    best_accuracy,
    bootstrap_interval,
    bootstrap_mean_interval,
    bracket_accuracy,
    bracket_of,
    cohen_kappa,
    correlation,
    default_bracket_edges,
    grouped_correlation,
    interval_of,
    mae,
    ndcg,
    paired_difference,
    per_group_values,
    rbo,
    resample_indices,
    rescale,
    snap_to_labels,
    spearman_rows,
)
from judgetune.stats._panel import panel_mean, standardizers
from judgetune.stats._ppi import (
    MIN_JUDGED,
    PSEUDO,
    Estimate,
    judge_mean,
    labels_mean,
    labels_worth,
    ppi_mean,
    score_interval,
    tuned_lambda,
    worth_of,
    z_value,
)
from judgetune.stats._ppi_compare import (
    difference_paired,
    difference_unpaired,
    judged_wins,
    labels_needed,
    overlap_difference,
    win_values,
)

__all__ = ["candidate_name", "FOLDS", "REPEATS", "WIDE_FOLDS", "WIDE_FOLD_UNITS", "folds_for",
           "ahead_of_default", "best_candidate_index", "corrected_lower", "cut_folds",
           "figures", "jackknife_spearman", "nested_gate", "one_sided_lower", "paired_advantages", "paired_unit_differences",
           "panel_gate", "panel_mean", "standardizers",
           "t_interval", "units_of", "units_to_pass", "best_accuracy", "bootstrap_interval", "bootstrap_mean_interval",
           "bracket_accuracy", "bracket_of",
           "cohen_kappa", "constant_baseline", "correlation", "CORRELATIONS", "default_bracket_edges",
           "DEFAULT_BRACKETS", "difference_record", "evaluate_predictions", "evaluate_with_baselines", "filled",
           "gain", "gain_parts",
           "grouped_correlation", "GroupedValue", "harmful_gain", "Interval", "interval_of", "mae", "ndcg",
           "paired_difference", "per_group_values", "random_baseline", "random_baseline_spread", "rbo",
           "resample_indices", "rescale", "snap_to_labels", "spearman_rows", "versus_constant"]
__all__ += ["MIN_JUDGED", "PSEUDO", "score_interval", "worth_of"]
__all__ += ["Estimate", "difference_paired", "difference_unpaired", "judge_mean", "judged_wins", "labels_mean",
            "labels_needed", "labels_worth", "overlap_difference", "ppi_mean", "tuned_lambda", "win_values", "z_value"]
