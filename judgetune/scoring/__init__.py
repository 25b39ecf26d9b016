"""Scoring with a frozen judge: a set of items under a protocol (``score_protocol``), and many items streamed
chunk by chunk into one output, resumable after a kill, one writer per output; optionally on a Ray cluster
(``judgetune[ray]``)."""

from judgetune.scoring._output import COLUMNS, OUT_FORMATS, PartFile, encode_row, out_format, output_row
from judgetune.scoring._protocol import ProtocolRun, load_config_lm, score_examples, score_protocol
from judgetune.scoring._run import ScoreRun, file_source, finished_before, score_stream, validate_file, write_scored

__all__ = ["COLUMNS", "OUT_FORMATS", "PartFile", "ScoreRun", "ProtocolRun", "encode_row", "file_source", "finished_before",
           "load_config_lm", "out_format", "output_row", "score_examples", "score_protocol", "score_stream",
           "validate_file", "write_scored"]
