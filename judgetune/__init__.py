"""judgetune: tune, calibrate and freeze LLM judges against human labels."""

from judgetune import _offline  # noqa: F401  (keeps litellm off the network; see _offline.py)
from judgetune.errors import DataValidationError, JudgetuneError

__version__ = "0.1.0"
__all__ = ["DataValidationError", "JudgetuneError", "__version__"]
