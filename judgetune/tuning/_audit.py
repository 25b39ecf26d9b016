"""The audit in a tuning run: candidates held to ``--audit-max`` bounds, and the shipped judge audited.

Every candidate, the default included, is audited on the search items before the gate, on the bounded
probes only, calibrated as it would ship (its calibrator fitted on the search items, whose answers
are cached: the bounds are on the human scale): a challenger is turned away when an effect is
significantly beyond its bound; the default's verdict is recorded (it stays the fallback). The
shipped judge is audited, calibrated, on the test items after it is frozen (``metrics.audit``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from judgetune import audit
from judgetune.calibration import CALIBRATORS, cross_fitted
from judgetune.config import JudgeConfig
from judgetune.errors import JudgetuneError
from judgetune.lm import parse_lm_spec
from judgetune.tuning._selection import Reject
from judgetune.tuning._space import judge_for, settled_params
from judgetune.tuning._spec import RunSpec
from judgetune.tuning._splits import Splits

log = logging.getLogger(__name__)


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


def audit_shipped(config: JudgeConfig, spec: RunSpec, splits: Splits, lm) -> dict[str, Any]:
    """The audit of the frozen judge on (a sample of) the test items: what ``metrics.audit`` holds
    (``{"error": why}`` when it could not run, e.g. every test item failed: the run still ships)."""
    items = audit.audit_sample(splits.test, seed=spec.seed)
    try:
        return audit.audit(config, items, lm, bounds=spec.audit_max, seed=spec.seed)
    except JudgetuneError as err:
        log.warning("%s: the audit of the shipped judge could not run: %s", spec.name, err)
        return {"error": str(err)}
