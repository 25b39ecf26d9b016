"""The HTML report of a tuning run (plots and the metrics table, in one self-contained file), an estimate's
intervals drawn (estimate.html), and NRP plots."""

from judgetune.report._estimates import build_estimates_report, estimates_svg, write_estimates_report
from judgetune.report._html import audit_section, build_report, write_report
from judgetune.report._nrp import nrp_by_system, nrp_vs_size

__all__ = ["audit_section", "build_estimates_report", "build_report", "estimates_svg", "nrp_by_system", "nrp_vs_size",
           "write_estimates_report", "write_report"]
