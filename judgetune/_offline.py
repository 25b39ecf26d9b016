"""Keep litellm (pulled in by DSPy) from downloading its model price list.

litellm reads ``LITELLM_LOCAL_MODEL_COST_MAP`` once, when it is first imported, so the variable
must be set before any judgetune module imports dspy. A value the user already set wins.
"""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
