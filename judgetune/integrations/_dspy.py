"""A frozen judge's DSPy prompt saved with DSPy's own ``Module.save`` (JSON state, never a pickle)."""

from __future__ import annotations

from pathlib import Path

from judgetune._api import offline_judge
from judgetune.config import JudgeConfig
from judgetune.errors import JudgetuneError

__all__ = ["save_dspy_program"]


def save_dspy_program(judge: str | Path, out: str | Path) -> Path:
    """Save the DSPy module of the frozen judge ``judge`` (a judge.json; no LM is loaded or contacted) with
    ``dspy.Module.save(out)``: the JSON state of its predictors (signature instruction and fields, demos),
    with DSPy's record of its dependency versions. DSPy loads it back into any
    module with predictors of the same names and signatures (``program.load(out)``) without judgetune, e.g.
    ``self.predict = dspy.Predict("question, reference, answer -> score")``; ``judgetune.load(judge).judge.load(out)``
    restores it into the judge itself.

    What DSPy cannot carry, and the judge.json does: how a label is read (a label distribution at the answer
    position, its expected value), the calibrator, the human scale, a signal judge's fitted state. A plain
    DSPy program on this state answers with a label, not the calibrated score; score with the judge.json
    (``judgetune score``, ``judgetune.load``) for the same numbers. The whole program is not saved
    (``save_program=True`` pickles it, and judgetune never pickles).

    Raises:
        ConfigError: ``judge`` is not a valid judge.json.
        JudgetuneError: the judge has no DSPy predictor (signal judges: bm25, embedding, overlap, ...), or
            ``out`` is not a ``.json`` file.
    """
    out = Path(out)
    if out.suffix != ".json":
        raise JudgetuneError(f"--out {out}: expected a .json file (DSPy's JSON state; judgetune never pickles)")
    config = JudgeConfig.load(judge)
    if config.instruction is None:  # checked before an LM is loaded
        raise JudgetuneError(f"the {config.judge} judge has no DSPy predictor (no prompt): its judge.json is the "
                             "whole judge; score with `judgetune score` or judgetune.load")
    # the predictors' state needs no model: the judge is built on a stand-in that never connects, so export works
    # offline and no server the judge.json names is contacted
    with offline_judge(config) as built:
        built.save(str(out))
    return out
