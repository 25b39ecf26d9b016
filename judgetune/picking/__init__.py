"""Picking: which items to label next, from an unlabeled file and a budget. The first round covers a
cheap default judge's score range and the data's groups (``cover``); later rounds, given the labels
so far, take the items that most narrow the calibrator's uncertainty (``narrow``). Picked rows are
written back in the input's format (``read_rows``). For an estimate, ``draw`` picks a seeded uniform sample
per system instead, each row's sampling probability beside it."""

from judgetune.picking._coverage import cover
from judgetune.picking._pick import MAX_CLUSTERS, Pick, Picks, groups_or_clusters, pick_examples, pick_file
from judgetune.picking._rows import FORMATS, RawRows, read_rows
from judgetune.picking._uncertainty import GROUP_BONUS, narrow, uncertainty
from judgetune.picking._uniform import Rows, Sample, draw, shared_inputs

__all__ = ["FORMATS", "GROUP_BONUS", "MAX_CLUSTERS", "Pick", "Picks", "RawRows", "Rows", "Sample", "cover", "draw",
           "groups_or_clusters", "narrow", "pick_examples", "pick_file", "read_rows", "shared_inputs", "uncertainty"]
