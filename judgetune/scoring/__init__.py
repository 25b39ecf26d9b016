"""Scoring many items with a frozen judge: streamed chunk by chunk into one output, resumable after a kill,
one writer per output; optionally on a Ray cluster (``judgetune[ray]``)."""

from judgetune.scoring._output import COLUMNS, OUT_FORMATS, PartFile, encode_row, out_format, output_row
from judgetune.scoring._run import ScoreRun, file_source, score_stream, validate_file, write_scored

__all__ = ["COLUMNS", "OUT_FORMATS", "PartFile", "ScoreRun", "encode_row", "file_source", "out_format", "output_row",
           "score_stream", "validate_file", "write_scored"]
