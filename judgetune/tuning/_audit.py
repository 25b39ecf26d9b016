"""The audit in a tuning run: candidates held to ``--audit-max`` bounds (the shipped judge's audit on the
test items is a step of ``finish``, in ``_run.py``).

Every candidate, the default included, is audited on the search items before the gate, on the bounded
probes only, calibrated as it would ship (its calibrator fitted on the search items, whose answers
are cached: the bounds are on the human scale): a challenger is turned away when an effect is
significantly beyond its bound; the default's verdict is recorded (it stays the fallback).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from judgetune import audit
from judgetune.calibration import CALIBRATORS, cross_fitted
from judgetune.config import JudgeConfig
from judgetune.lm import parse_lm_spec
from judgetune.tuning._selection import Reject
from judgetune.tuning._space import judge_for, settled_params
from judgetune.tuning._spec import RunSpec
from judgetune.tuning._splits import Splits


def audit_reject(spec: RunSpec, splits: Splits, lm, instructions: Sequence[str],
                 reject: Reject | None = None, *, settled: dict[str, Any] | None = None) -> Reject | None:
    """``reject`` plus the ``--audit-max`` bounds of ``spec`` (``reject`` itself when there are none).
    ``settled``: the run's ``settled_params`` (computed once here when not given)."""
    if not spec.audit_max:
        return reject
    if settled is None:
        settled = settled_params(spec, lm)
    lm_dict = parse_lm_spec(spec.lm, api_base=spec.api_base).to_dict() if lm is not None else None

    def check(row: dict[str, Any]) -> str | None:
        full = {**row["params"], **splits.data_fixed, **settled}
        judge = judge_for(full, spec.judge, lm, seed=spec.seed, demo_pool=splits.demo_pool, label_range=splits.label_range,
                          instructions=instructions)
        config = JudgeConfig.from_judge(judge, lm=lm_dict, calibrator=search_calibrator(judge, splits, seed=spec.seed),
                                        label_range=splits.label_range, seed=spec.seed)
        reasons, _ = audit.check_bounds(config, splits.search, lm, spec.audit_max, seed=spec.seed)  # dev only confirms
        if reasons:
            return "audit: " + "; ".join(reasons)
        return reject(row) if reject is not None else None

    return check


def search_calibrator(judge, splits: Splits, *, seed: int):
    """The calibrator of ``judge`` fitted on the search items (None when fewer than 4 of them were judged)."""
    verdicts = judge.judge_all(splits.search)
    pairs = [(v.score, e.judgment, e.group_key) for v, e in zip(verdicts, splits.search) if v.parsed]
    if len(pairs) < 4:
        return None
    raw, gold, groups = (list(x) for x in zip(*pairs))
    _, kind, _ = cross_fitted(raw, gold, label_range=splits.label_range, groups=groups, seed=seed)
    return CALIBRATORS[kind](splits.label_range).fit(raw, gold)
