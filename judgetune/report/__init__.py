"""The HTML report of a tuning run (plots and the metrics table, in one self-contained file), and NRP plots."""

from judgetune.report._html import audit_section, build_report, write_report
from judgetune.report._nrp import nrp_by_system, nrp_vs_size

__all__ = ["audit_section", "build_report", "nrp_by_system", "nrp_vs_size", "write_report"]
