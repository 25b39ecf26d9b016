"""The HTML report of a tuning run: plots and the metrics table, in one self-contained file."""

from judgetune.report._html import build_report, write_report

__all__ = ["build_report", "write_report"]
