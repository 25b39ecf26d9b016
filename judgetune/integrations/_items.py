"""What every adapter shares: a frozen judge loaded once, a harness's values turned into an Example, the
harness's optional package imported with an install hint."""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from judgetune._api import FrozenJudge, Scored, load
from judgetune.datasets import Example, Reference
from judgetune.errors import JudgetuneError

__all__ = ["ANSWER_KEYS", "failure_text", "harness_item", "load_judge", "require", "score_item", "text_of"]

# keys a harness's output dict may hold the answer under, tried in order
ANSWER_KEYS = ("answer", "response", "output", "completion", "content", "text")


def require(module: str, extra: str) -> Any:
    """Import a harness's package, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise JudgetuneError(f"this adapter needs {module.split('.')[0]}: pip install 'judgetune[{extra}]'") from None


def load_judge(judge: str | Path | FrozenJudge) -> FrozenJudge:
    """A frozen judge (loaded from a judge.json path, or the object itself), refused if it scores only in groups:
    a harness hands over one item at a time."""
    frozen = judge if isinstance(judge, FrozenJudge) else load(judge)
    if frozen.needs_groups:
        raise JudgetuneError(f"the {frozen.config.judge} judge compares an item with the other answers of its "
                             "question (it scores only under a protocol, with `judgetune score --protocol group`); "
                             "a harness scores one item at a time")
    return frozen


def text_of(value: Any, keys: Sequence[str] = ANSWER_KEYS) -> str | None:
    """A harness value as text: a string as it is; a dict's first of ``keys`` (or its only value); None as None;
    anything else as JSON."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        for key in keys:
            if value.get(key) is not None:
                return text_of(value[key], keys)
        if len(value) == 1:
            return text_of(next(iter(value.values())), keys)
    return json.dumps(value, ensure_ascii=False, default=str)


def harness_item(*, answer: Any, question: Any = None, reference: Any = None, context: Any = None,
                 item_id: str = "item") -> Example:
    """The Example a harness's values describe (``context``: a string or a list of passages).

    Raises:
        JudgetuneError: no answer text.
    """
    text = text_of(answer)
    if text is None:
        raise JudgetuneError("the harness passed no answer (output) to judge")
    ref = text_of(reference, ("reference", "expected_response", "expected", "target", "answer"))
    passages = (context,) if isinstance(context, str) else tuple(str(c) for c in context or ())
    return Example(id=item_id, answer=text, question=text_of(question, ("question", "input", "query", "prompt")),
                   references=(Reference(ref, None),) if ref else (), context=passages)


def score_item(judge: FrozenJudge, item: Example) -> Scored:
    """One item scored as ``judgetune score`` scores it (no protocol: the judge's state and the item alone)."""
    return judge.score_many([item])[0]


def failure_text(judge: FrozenJudge, scored: Scored) -> str:
    return f"the {judge.config.judge} judge failed on this item: {scored.verdict.raw or 'no score'}"
