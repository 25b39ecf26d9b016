"""``judgetune export --to promptfoo``: a small Python assertion file that loads a judge.json and passes or
fails an output on a threshold of its calibrated score."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import judgetune
from judgetune.config import JudgeConfig
from judgetune.errors import JudgetuneError

__all__ = ["write_promptfoo_assertion"]

_TEMPLATE = '''"""promptfoo assertion: the frozen {kind} judge {judge_name}, written by `judgetune export --to promptfoo`
(judgetune {version}). Do not edit; export again instead.

Passes when the judge's calibrated score of the output, on the human scale {low:g}-{high:g}, is at least the
threshold ({threshold:g}; an assertion's `config: {{threshold: ...}}` replaces it). The result's `score` is 1 or 0
(pass or fail, promptfoo's convention) and the judge's own score is the named score "{metric_doc}" (with its raw
score, "{metric_doc}_raw"). A failed judgment fails the assertion, says why, and has no "{metric_doc}" score: it is
never scored as 0 there. The test's vars "{question_doc}", "{reference_doc}" and "{context_doc}" give the question, the
reference and the context when present.

In promptfooconfig.yaml (promptfoo runs it with $PROMPTFOO_PYTHON, a Python that has judgetune installed):

    defaultTest:
      assert:
        - type: python
          value: file://{file_name}
"""

from pathlib import Path

JUDGE = Path(__file__).resolve().parent / {judge_rel!r}
SHA256 = {sha256!r}  # of judge.json at export: a changed judge is refused, never used unnoticed
THRESHOLD = {threshold!r}
LOW, HIGH = {low!r}, {high!r}  # the judge's human scale
QUESTION, REFERENCE, CONTEXT = {question!r}, {reference!r}, {context!r}
_loaded = []


def _judge():
    if not _loaded:
        import hashlib

        import judgetune
        from judgetune.integrations import load_judge

        found = hashlib.sha256(JUDGE.read_bytes()).hexdigest()
        if found != SHA256:
            raise RuntimeError(f"{{JUDGE}} changed since this assertion was exported (sha256 {{found[:12]}}, "
                               f"expected {{SHA256[:12]}}); run `judgetune export --to promptfoo` again")
        _loaded.append(load_judge(judgetune.load(JUDGE)))
    return _loaded[0]


def _threshold(given):
    """The assertion's threshold: a number on the judge's scale (an error otherwise, never every output failed)."""
    try:
        value = float(given)
    except (TypeError, ValueError):
        value = float("nan")
    if not LOW <= value <= HIGH:  # NaN too
        raise ValueError(f"judgetune assertion: config threshold {{given!r}}: expected a number on the judge's human "
                         f"scale {{LOW:g}}-{{HIGH:g}}")
    return value


def get_assert(output, context):
    from judgetune.integrations import harness_item

    judge = _judge()
    values = context.get("vars") or {{}}
    threshold = _threshold((context.get("config") or {{}}).get("threshold", THRESHOLD))
    item = harness_item(answer=output, question=values.get(QUESTION), reference=values.get(REFERENCE),
                        context=values.get(CONTEXT))
    scored = judge.score_many([item])[0]
    if scored.score is None:
        return {{"pass": False, "score": 0.0, "named_scores": {{}},
                "reason": f"judgetune: the {kind} judge failed on this output, so it has no score: "
                          f"{{scored.verdict.raw or 'no score'}}"}}
    passed = scored.score >= threshold
    side = "at least" if passed else "below"
    return {{"pass": passed, "score": 1.0 if passed else 0.0,
            "named_scores": {{{metric!r}: scored.score, {metric_raw!r}: scored.raw_score}},
            "reason": f"judgetune {kind} judge: {{scored.score:.4g}} on {low:g}-{high:g} ({{side}} the threshold "
                      f"{{threshold:g}}; raw {{scored.raw_score:.4g}})"}}
'''


def _in_docstring(text: str) -> str:
    """``text`` escaped for a double-quoted Python docstring: quotes, backslashes and line breaks as escapes."""
    return json.dumps(text)[1:-1]


def write_promptfoo_assertion(judge: str | Path, out: str | Path, *, threshold: float, metric: str = "judgetune",
                              question: str = "question", reference: str = "reference",
                              context: str = "context") -> Path:
    """Write ``out``, a promptfoo Python assertion that loads ``judge`` (a judge.json, found relative to ``out``)
    and passes an output whose calibrated score is at least ``threshold`` on the judge's human scale.

    Raises:
        ConfigError: ``judge`` is not a valid judge.json.
        JudgetuneError: ``threshold`` off the judge's human scale, or a judge that scores only in groups.
    """
    judge, out = Path(judge), Path(out)
    config = JudgeConfig.load(judge)
    low, high = config.label_range
    if not low <= threshold <= high:
        raise JudgetuneError(f"--threshold {threshold:g}: expected a score on the judge's human scale {low:g}-{high:g}")
    if config.protocol == "group":
        raise JudgetuneError(f"the {config.judge} judge compares an item with the other answers of its question; "
                             "promptfoo hands over one output at a time")
    shown = _in_docstring  # every user-given text enters the docstring escaped: a name cannot close it and add code
    text = _TEMPLATE.format(
        kind=config.judge, judge_name=shown(judge.name), version=judgetune.__version__, low=low, high=high,
        threshold=float(threshold), metric=metric, metric_raw=f"{metric}_raw", question=question, reference=reference,
        context=context, metric_doc=shown(metric), question_doc=shown(question), reference_doc=shown(reference),
        context_doc=shown(context), file_name=shown(out.name),
        judge_rel=os.path.relpath(judge.resolve(), out.resolve().parent),
        sha256=hashlib.sha256(judge.read_bytes()).hexdigest())
    out.write_text(text, encoding="utf-8")
    return out
