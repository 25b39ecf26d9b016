"""A tuned judge's paired gain over its default, as text: the one wording the CLI, the run log and the report share."""

from __future__ import annotations

from typing import Any

GAIN_FIGURES = (("Spearman", "spearman"), ("per-group Spearman", "spearman_per_group"), ("MAE", "mae"))


def gain_parts(gain: dict[str, Any]) -> list[str]:
    """``"Spearman +0.030 [-0.010, +0.070]"`` and the like, for each figure ``gain`` (``metrics["gain"]``) holds."""
    signed = lambda x: "-" if x is None else f"{x:+.3f}"  # noqa: E731
    return [f"{name} {signed(gain[key]['value'])} [{signed(gain[key]['low'])}, {signed(gain[key]['high'])}]"
            for name, key in GAIN_FIGURES if gain.get(key)]
