"""Keep litellm (which DSPy imports when a ``dspy.LM`` calls a provider through it) from downloading its model
price list at its import.

litellm reads ``LITELLM_LOCAL_MODEL_COST_MAP`` once, when it is first imported. judgetune never imports it
itself, so nothing is set at import: the entry points (the CLI, ``judgetune.tune``, ``evaluate``, ``compare``)
call :func:`keep_litellm_offline` before any work. A value the user already set wins.
"""

import os

__all__ = ["keep_litellm_offline"]


def keep_litellm_offline() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
