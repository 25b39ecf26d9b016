"""judgetune: tune, calibrate and freeze LLM judges against human labels.

    >>> import judgetune
    >>> judge = judgetune.load("runs/demo/judge.json")  # doctest: +SKIP
    >>> judge.score(question="...", answer="...", reference="...")  # doctest: +SKIP

The API (``load``, ``tune``, ``evaluate``, ``compare``, ``estimate``, ``FrozenJudge``) is imported on first use, so
``import judgetune`` stays light.
"""

from judgetune.errors import DataValidationError, JudgetuneError

__version__ = "0.1.0"
__all__ = ["DataValidationError", "FrozenJudge", "JudgetuneError", "JudgmentFailedError", "Picked", "Rows", "Scored",
           "Scores", "TunedJudge", "__version__", "compare", "estimate", "evaluate", "load", "pick", "tune"]
_API = ("FrozenJudge", "JudgmentFailedError", "Picked", "Rows", "Scored", "Scores", "TunedJudge", "compare", "estimate",
        "evaluate", "load", "pick", "tune")


def __getattr__(name: str):
    if name in _API:
        from judgetune import _api

        return getattr(_api, name)
    raise AttributeError(f"module 'judgetune' has no attribute {name!r}")
