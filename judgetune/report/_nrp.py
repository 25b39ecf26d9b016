"""NRP figures: NRP per LLM grouped by prompt (every answer a point), and NRP against model size."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from judgetune.report._plots import _png, plt


def nrp_by_system(answers: Sequence[dict], systems: Sequence[dict], *, seed: int = 0) -> bytes:
    """One column per LLM (best mean first), one colour per prompt; points are single answers
    (jittered sideways), bars the mean NRP with its interval."""
    order = list(dict.fromkeys(r["system"] for r in systems))
    prompts = sorted({r["prompt"] for r in systems})
    width = 0.8 / len(prompts)
    rng = np.random.default_rng(seed)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(order) + 2), 4))
    for k, prompt in enumerate(prompts):
        colour = f"C{k % 10}"
        for x, system in enumerate(order):
            centre = x - 0.4 + width * (k + 0.5)
            values = [a["nrp"] for a in answers if a["system"] == system and a["prompt"] == prompt
                      and a["nrp"] is not None]
            if not values:
                continue
            ax.scatter(centre + rng.uniform(-width / 3, width / 3, len(values)), values, s=6, alpha=0.35, color=colour,
                       label=prompt if x == 0 else None)
            row = next(r for r in systems if r["system"] == system and r["prompt"] == prompt)
            ax.errorbar([centre], [row["nrp_mean"]], yerr=[[row["nrp_mean"] - row["nrp_low"]],
                                                           [row["nrp_high"] - row["nrp_mean"]]],
                        fmt="D", color="k", markersize=5, capsize=3)
    ax.set_xticks(range(len(order)), order, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("NRP (1 = above every judged document)")
    ax.set_ylim(-0.05, 1.05)
    if len(prompts) > 1:
        ax.legend(title="prompt", fontsize=8)
    ax.set_title("NRP per LLM: answers (points), mean and 95% interval (diamonds)", fontsize=9)
    return _png(fig)


def nrp_vs_size(systems: Sequence[dict], sizes: dict[str, float]) -> bytes | None:
    """Mean NRP against parameters (log scale), one series per prompt; None when no system has a size."""
    rows = [r for r in systems if r["system"] in sizes and r["nrp_mean"] is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for k, prompt in enumerate(sorted({r["prompt"] for r in rows})):
        series = sorted((r for r in rows if r["prompt"] == prompt), key=lambda r: sizes[r["system"]])
        x = [sizes[r["system"]] for r in series]
        y = [r["nrp_mean"] for r in series]
        ax.errorbar(x, y, yerr=[[r["nrp_mean"] - r["nrp_low"] for r in series],
                                [r["nrp_high"] - r["nrp_mean"] for r in series]], fmt="o", color=f"C{k % 10}",
                    capsize=3, label=prompt)
        for r in series if k == 0 else ():  # one label per system
            ax.annotate(r["system"], (sizes[r["system"]], r["nrp_mean"]), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("parameters (billions, log scale)")
    ax.set_ylabel("mean NRP")
    ax.legend(title="prompt", fontsize=8)
    return _png(fig)
