"""Judge-assisted estimates: each system's mean on the human scale (or win rate, from pairwise comparisons) and
every pair's difference, from a frozen judge's scores on every row and human labels on a random subset, with
intervals that hold whatever the judge gets wrong (PPI++), the labels-only and judge-only figures beside them,
and the labels a difference needs. ``judgetune.picking.draw`` draws the rows to label next."""

from judgetune.estimating._estimate import Estimates, estimate_observations
from judgetune.estimating._join import join_labels, join_scores, refuse_other_judge, scored_by
from judgetune.estimating._pairs import POWER, aligned, pair_record
from judgetune.estimating._rows import PROBABILITY, Observations, from_examples, read_data, records
from judgetune.estimating._run import by_columns, estimate_files, read_observations, score_observations
from judgetune.estimating._sides import Side, fit, sides

__all__ = ["POWER", "PROBABILITY", "Estimates", "Observations", "Side", "aligned", "by_columns", "estimate_files",
           "estimate_observations", "fit",
           "from_examples", "join_labels", "join_scores", "pair_record", "read_data", "read_observations", "records",
           "refuse_other_judge", "score_observations", "scored_by", "sides"]
