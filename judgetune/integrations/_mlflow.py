"""A frozen judge as an MLflow GenAI scorer (``mlflow.genai.evaluate(data, scorers=[...])``)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from judgetune._api import FrozenJudge
from judgetune.integrations._items import failure_text, harness_item, load_judge, require, score_item

__all__ = ["mlflow_scorer"]


def mlflow_scorer(judge: str | Path | FrozenJudge, *, name: str = "judgetune", question: str = "question",
                  reference: str = "expected_response", context: str = "context") -> Any:
    """A frozen judge as an MLflow GenAI scorer: one Feedback per row, its ``value`` the calibrated score on the
    human scale (exactly ``judgetune score``'s), its ``metadata`` the raw score, the scale and the judge kind.
    A failed judgment is a Feedback with an ``error`` (the reason) and no value, which MLflow leaves out of the
    scorer's mean.

    The answer is the row's ``outputs`` (a string, or a dict's ``answer``/``response``/... key); the question is
    ``inputs[question]`` (or the only input), the reference ``expectations[reference]``, the context
    ``inputs[context]``. MLflow calls scorers from several threads: the judge scores one row at a time.

    Example:
        >>> scorer = mlflow_scorer("runs/demo/judge.json")  # doctest: +SKIP
        >>> mlflow.genai.evaluate(data=rows, scorers=[scorer]).metrics["judgetune/mean"]  # doctest: +SKIP

    Raises:
        JudgetuneError: mlflow not installed (``pip install 'judgetune[mlflow]'``), or a judge that scores only
            in groups.
    """
    scorers = require("mlflow.genai.scorers", "mlflow")
    entities = require("mlflow.entities", "mlflow")
    frozen = load_judge(judge)
    low, high = frozen.label_range
    source = entities.AssessmentSource(source_type="CODE", source_id=f"judgetune:{frozen.config.judge}")
    lock = threading.Lock()  # MLflow runs scorers on a thread pool; the judge's LM takes one item at a time

    def judge_row(*, inputs: Any = None, outputs: Any = None, expectations: Any = None) -> Any:
        inputs = inputs if isinstance(inputs, dict) else {question: inputs}
        asked = inputs.get(question) if question in inputs or len(inputs) != 1 else next(iter(inputs.values()))
        item = harness_item(answer=outputs, question=asked, context=inputs.get(context),
                            reference=(expectations or {}).get(reference))
        with lock:
            scored = score_item(frozen, item)
        metadata = {"judge": frozen.config.judge, "label_range": f"{low:g}-{high:g}",
                    "raw_score": "" if scored.raw_score is None else repr(scored.raw_score)}
        if scored.score is None:
            return entities.Feedback(name=name, error=failure_text(frozen, scored), source=source, metadata=metadata,
                                     rationale=failure_text(frozen, scored))
        rationale = (f"calibrated score {scored.score:.4g} on the human scale {low:g}-{high:g} "
                     f"(raw {scored.raw_score:.4g}, {frozen.config.judge} judge)")
        return entities.Feedback(name=name, value=scored.score, source=source, metadata=metadata, rationale=rationale)

    return scorers.scorer(judge_row, name=name)
