"""A tuned judge's paired gain over its default and the candidate it is, as text: the one wording the CLI, the run
log and the report share."""

from __future__ import annotations

from typing import Any

__all__ = ["candidate_name", "gain_parts"]

GAIN_FIGURES = (("Spearman", "spearman"), ("per-group Spearman", "spearman_per_group"), ("MAE", "mae"))


def gain_parts(gain: dict[str, Any]) -> list[str]:
    """``"Spearman +0.030 [-0.010, +0.070]"`` and the like, for each figure ``gain`` (``metrics["gain"]``) holds."""
    signed = lambda x: "-" if x is None else f"{x:+.3f}"  # noqa: E731
    return [f"{name} {signed(gain[key]['value'])} [{signed(gain[key]['low'])}, {signed(gain[key]['high'])}]"
            for name, key in GAIN_FIGURES if gain.get(key)]


def candidate_name(row: dict[str, Any]) -> str:
    """A selection row as its user reads it: ``default``, ``trial N``, or the panel and its size."""
    if row.get("default"):
        return "default"
    if row.get("panel"):
        return f"the panel of {len(row['params']['panel']['members'])} candidates"
    if row.get("family"):
        return f"the {row['family']} judge at its defaults (another family, --also)"
    return f"trial {row['number']}"
