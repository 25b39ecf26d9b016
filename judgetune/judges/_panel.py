"""The panel judge: several frozen judges score the same item, each score is standardized by that
member's own centre and spread (measured on training items, no labels), and the panel's score is
their mean. Ranks of a panel can beat its best member where the members' errors differ (
on STS-B the mean of the grading model's twelve candidates, standardized this way, ranked
+0.08 Spearman above the best one).

A panel is fitted state only: ``fitted["members"]`` holds each member as a frozen judge (kind,
settings, instruction, demos, fitted state, seed) with its ``center`` and ``scale``; the members
are rebuilt from that alone, so an item is scored from the frozen panel and that item, the same in
any batch. Members score each item alone (no protocol judges) and are not panels themselves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from judgetune.datasets import Example
from judgetune.judges._base import Judge, demo_examples
from judgetune.judges._registry import build, check_settings, judge_class, register
from judgetune.judges._space import check_params
from judgetune.judges._spec import BuildContext, JudgeSpec
from judgetune.judges._verdict import Verdict, add_usage
from judgetune.stats import panel_mean

__all__ = ["MAX_MEMBERS", "PanelJudge", "member_record"]

MAX_MEMBERS = 16
_MEMBER_FIELDS = ("judge", "params", "instruction", "demos", "fitted", "seed", "center", "scale")


def member_record(judge: Judge, center: float, scale: float) -> dict[str, Any]:
    """A member of a panel as plain JSON: the judge's frozen spec with its centre and spread."""
    spec = judge.spec()
    return {"judge": spec.kind, "params": dict(spec.params), "instruction": spec.instruction,
            "demos": [d.to_dict() for d in spec.demos or ()],
            "fitted": None if spec.fitted is None else dict(spec.fitted), "seed": int(spec.seed),
            "center": float(center), "scale": float(scale)}


def _member_problems(i: int, member: Any) -> list[str]:
    where = f"fitted: members[{i}]"
    if not isinstance(member, dict):
        return [f"{where}: expected an object (a frozen judge with its center and scale)"]
    problems = [f"{where}.{k}: unknown field; expected {', '.join(_MEMBER_FIELDS)}" for k in member
                if k not in _MEMBER_FIELDS]
    problems += [f"{where}.{k}: missing" for k in _MEMBER_FIELDS if k not in member]
    if problems:
        return problems
    kind = member["judge"]
    try:
        cls = judge_class(kind)
    except ValueError as err:
        return [f"{where}.judge: {err}"]
    if kind == PanelJudge.kind:
        return [f"{where}.judge: a panel's member may not be a panel"]
    if not isinstance(member["params"], dict):
        return [f"{where}.params: expected an object"]
    unknown = check_settings(kind, member["params"])
    problems += [f"{where}.{p}" for p in unknown]
    if not unknown:
        try:
            check_params(cls.space_for(member["params"]), member["params"], judge=kind)
        except ValueError as err:
            problems.append(f"{where}.params: {err}")
        if cls.needs_groups_with(member["params"]):
            problems.append(f"{where}: judge {kind} with these settings compares an item with its group; a "
                            "panel's members score each item alone")
    if member["instruction"] is not None and not isinstance(member["instruction"], str):
        problems.append(f"{where}.instruction: expected text or null")
    if not isinstance(member["demos"], list):
        problems.append(f"{where}.demos: expected a list of data rows")
    else:
        try:
            demo_examples(member["demos"])
        except ValueError as err:
            problems += [f"{where}.{line}" for line in str(err).splitlines()]
    if cls.fits != isinstance(member["fitted"], dict):
        problems.append(f"{where}.fitted: expected {'the fitted state (an object)' if cls.fits else 'null'}")
    elif cls.fits:
        try:
            cls.check_fitted(member["fitted"])
        except (TypeError, ValueError, KeyError) as err:
            problems.append(f"{where}.{err}" if str(err).startswith("fitted") else f"{where}.fitted: {err}")
    if type(member["seed"]) is not int or member["seed"] < 0:
        problems.append(f"{where}.seed: expected a non-negative integer")
    for key in ("center", "scale"):
        value = member[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            problems.append(f"{where}.{key}: expected a finite number")
    if not problems and member["scale"] <= 0:
        problems.append(f"{where}.scale: expected a number above 0 (the member's spread), found {member['scale']}")
    return problems


class PanelJudge(Judge):
    """The mean of its members' standardized scores; see the module docstring. Built from ``fitted``
    only (a panel is made by the tuner from judges it has scored, ``tuning`` with ``panel``)."""

    kind = "panel"
    needs_lm = False
    fits = True

    def __init__(self, lm=None, *, fitted: dict[str, Any] | None = None, **params: Any):
        super().__init__(lm, **params)
        if fitted is None:
            raise ValueError("judge panel: is made from scored judges (tune --panel), not fitted on examples; "
                             "load a frozen panel's judge.json")
        self.check_fitted(fitted)
        label_range = tuple(fitted["label_range"]) if fitted.get("label_range") is not None else None
        self.label_range = label_range
        self.members = [build(JudgeSpec(m["judge"], dict(m["params"]), instruction=m["instruction"],
                                        demos=tuple(demo_examples(m["demos"])), fitted=m["fitted"], seed=m["seed"]),
                              BuildContext(lm=lm, label_range=label_range)) for m in fitted["members"]]
        self.center = np.asarray([m["center"] for m in fitted["members"]], dtype=float)
        self.scale = np.asarray([m["scale"] for m in fitted["members"]], dtype=float)

    @classmethod
    def check_fitted(cls, fitted: dict[str, Any]) -> None:
        members = fitted.get("members")
        if not isinstance(members, list) or not 2 <= len(members) <= MAX_MEMBERS:
            raise ValueError(f"fitted: members: expected a list of 2 to {MAX_MEMBERS} frozen judges")
        extra = sorted(set(fitted) - {"members", "label_range"})
        problems = [f"fitted: {k}: unknown field; expected members, label_range" for k in extra]
        rng = fitted.get("label_range")
        if rng is not None and not (isinstance(rng, list) and len(rng) == 2
                                    and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rng)
                                    and rng[0] < rng[1]):
            problems.append("fitted: label_range: expected [low, high] with low below high, or null")
        for i, member in enumerate(members):
            problems += _member_problems(i, member)
        if problems:
            raise ValueError("\n".join(problems))

    @classmethod
    def needs_lm_with(cls, params: dict[str, Any]) -> bool:
        """Whether any member needs an LM (read from ``params["fitted"]``; False when it is malformed)."""
        members = (params.get("fitted") or {}).get("members") if isinstance(params.get("fitted"), dict) else None
        if not isinstance(members, list):
            return False
        try:
            return any(judge_class(m["judge"]).needs_lm_with({**m["params"], **({"fitted": m["fitted"]}
                                                                                  if m.get("fitted") else {})})
                       for m in members)
        except (KeyError, TypeError, ValueError):
            return False

    @property
    def score_range(self) -> tuple[float, float]:
        lows, highs = [], []
        for member, center, scale in zip(self.members, self.center, self.scale):
            a, b = member.score_range
            lows.append((a - center) / scale)
            highs.append((b - center) / scale)
        return float(min(lows)), float(max(highs))

    def forward(self, example: Example) -> Verdict:
        return self.judge_all([example])[0]

    def judge_all(self, examples: Sequence[Example], *, progress: bool = False) -> list[Verdict]:
        """Each member judges every item; an item's score is the mean of the standardized scores of the
        members that judged it (the others named in ``detail["imputed"]``); failed where every member failed."""
        votes = [member.judge_all(examples, progress=progress) for member in self.members]
        raw = np.array([[v.score if v.parsed else np.nan for v in verdicts] for verdicts in votes], dtype=float)
        scores, z = panel_mean(raw, self.center, self.scale)
        out = []
        for i in range(len(examples)):
            usage: dict[str, int] = {}
            for verdicts in votes:
                usage = add_usage(usage, verdicts[i].usage)
            failed = [f"member {j} ({self.members[j].kind}): {verdicts[i].raw or 'no score'}"
                      for j, verdicts in enumerate(votes) if not verdicts[i].parsed]
            if np.isnan(scores[i]):
                out.append(Verdict.failed("every member failed: " + "; ".join(failed), usage=usage))
                continue
            standardized = [None if np.isnan(v) else float(v) for v in z[:, i]]
            detail: dict[str, Any] = {"members": standardized, **({"imputed": failed} if failed else {})}
            out.append(Verdict(float(scores[i]), {}, usage=usage, detail=detail))
        return out

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "fitted": self.spec().fitted}

    def spec(self) -> JudgeSpec:
        members = [member_record(m, c, s) for m, c, s in zip(self.members, self.center, self.scale)]
        label_range = None if self.label_range is None else [float(v) for v in self.label_range]
        return JudgeSpec(self.kind, dict(self.params), fitted={"members": members, "label_range": label_range})


register(PanelJudge.kind, PanelJudge)
