"""A frozen judge as an inspect_ai scorer, and the items of an inspect eval log (to regrade it)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from judgetune._api import FrozenJudge
from judgetune.datasets import Example, Reference
from judgetune.errors import JudgetuneError
from judgetune.integrations._items import failure_text, harness_item, load_judge, require, score_item

__all__ = ["inspect_scorer", "items_from_eval_log"]


def inspect_scorer(judge: str | Path | FrozenJudge, *, name: str = "judgetune") -> Any:
    """A frozen judge as an inspect_ai scorer (``Task(..., scorer=inspect_scorer("judge.json"))``) with the
    ``mean`` and ``stderr`` metrics: each sample's ``Score.value`` is the calibrated score on the human scale
    (exactly ``judgetune score``'s); ``metadata`` holds the raw score. A failed judgment is
    ``Score.unscored(reason="grader_failed")``: a NaN inspect leaves out of the metrics, with the reason.

    The answer is the model's completion, the question the sample's input text, the reference its target
    (none when the target is empty), the context the sample metadata's ``context``. The judge runs in the
    event loop's thread, one sample at a time (a local model is not shared between threads).

    Raises:
        JudgetuneError: inspect_ai not installed (``pip install 'judgetune[inspect]'``), or a judge that scores
            only in groups.
    """
    scorer_api = require("inspect_ai.scorer", "inspect")
    frozen = load_judge(judge)
    low, high = frozen.label_range

    @scorer_api.scorer(metrics=[scorer_api.mean(), scorer_api.stderr()], name=name)
    def judgetune_judge() -> Any:
        async def score(state: Any, target: Any) -> Any:
            answer = state.output.completion
            item = harness_item(answer=answer, question=state.input_text, reference=target.text or None,
                                context=(state.metadata or {}).get("context"), item_id=str(state.sample_id))
            scored = score_item(frozen, item)
            metadata = {"judge": frozen.config.judge, "raw_score": scored.raw_score, "label_range": [low, high]}
            if scored.score is None:
                return scorer_api.Score.unscored(reason="grader_failed", answer=answer,
                                                 explanation=failure_text(frozen, scored), metadata=metadata)
            return scorer_api.Score(value=scored.score, answer=answer, metadata=metadata,
                                    explanation=f"calibrated {scored.score:.4g} on {low:g}-{high:g} "
                                                f"(raw {scored.raw_score:.4g})")
        return score

    return judgetune_judge()


def items_from_eval_log(path: str | Path, *, scorer: str | None = None) -> list[Example]:
    """The samples of an inspect eval log (``.eval`` or ``.json``) as items to regrade: the input text as the
    question, the final completion as the answer, the target as the reference; the label is the value of
    the log's own ``scorer`` score when it is a number (leave ``scorer`` None for unlabeled items). The id
    is ``SAMPLE_ID`` (``SAMPLE_ID#EPOCH`` beyond the first epoch).

    Raises:
        JudgetuneError: inspect_ai not installed, the log has no samples, or ``scorer`` is not in it.
    """
    log_api = require("inspect_ai.log", "inspect")
    log = log_api.read_eval_log(str(path))
    if not log.samples:
        raise JudgetuneError(f"{path}: no samples in this eval log (status {log.status})")
    items = []
    for sample in log.samples:
        label = None
        if scorer is not None:
            if scorer not in (sample.scores or {}):
                raise JudgetuneError(f"{path}: sample {sample.id}: no score named {scorer!r} "
                                     f"(found {', '.join(sample.scores or {}) or 'none'})")
            value = sample.scores[scorer].value
            label = float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
        target = sample.target if isinstance(sample.target, str) else "\n".join(sample.target)
        item_id = str(sample.id) if sample.epoch == 1 else f"{sample.id}#{sample.epoch}"
        items.append(Example(id=item_id, answer=sample.output.completion, question=_input_text(sample.input) or None,
                             label=label,
                             references=(Reference(target, None),) if target else ()))
    return items


def _input_text(value: Any) -> str:
    """The sample's input as ``TaskState.input_text`` gives it to a scorer: the text, or the last user message's."""
    if isinstance(value, str):
        return value
    return next((m.text for m in reversed(value) if getattr(m, "role", None) == "user"), "")
