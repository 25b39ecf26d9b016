"""A frozen judge inside the evaluation harnesses teams already run: an MLflow GenAI scorer, an inspect_ai
scorer, a promptfoo Python assertion, and the judge's DSPy prompt saved with DSPy's own ``save()``.

Each adapter scores an item exactly as ``judgetune score`` does (the same judge.json, the same item: the
same calibrated score) and reports a failed judgment as failed, never as a number. The harnesses are
optional extras, imported only when their adapter is built::

    pip install 'judgetune[mlflow]'    # mlflow_scorer
    pip install 'judgetune[inspect]'   # inspect_scorer, items_from_eval_log

promptfoo is a Node.js tool (``npx promptfoo``); :func:`write_promptfoo_assertion` needs nothing extra.
See docs/integrations.md.
"""

from judgetune.integrations._dspy import save_dspy_program
from judgetune.integrations._inspect import inspect_scorer, items_from_eval_log
from judgetune.integrations._items import harness_item, load_judge
from judgetune.integrations._mlflow import mlflow_scorer
from judgetune.integrations._promptfoo import write_promptfoo_assertion

__all__ = ["harness_item", "inspect_scorer", "items_from_eval_log", "load_judge", "mlflow_scorer",
           "save_dspy_program", "write_promptfoo_assertion"]
