"""Scoring modes: how a judge turns an LM's answer into a label, and which one an endpoint supports.

- ``logprobs``: the exact label distribution (in-process), or ``top_logprobs`` over a server;
- ``sampled``: n answers at a temperature, each label parsed; their empirical distribution;
- ``parsed``: one greedy answer, its label parsed.

With no mode given, an in-process model uses ``logprobs``; a server is probed once (one
one-token request asking for ``top_logprobs``) and gets ``logprobs`` when it returns them, else
``sampled``. A reasoning model returns no log-probabilities and is not probed.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from judgetune.errors import JudgetuneError
from judgetune.lm._remote import LMCallError, classify

log = logging.getLogger(__name__)

SCORING_MODES = ("logprobs", "sampled", "parsed")
PROBE_TOP_LOGPROBS = 5
_PROBE_LOCK = threading.Lock()


class LogprobsUnavailableError(JudgetuneError):
    """The endpoint returns no log-probabilities, so the ``logprobs`` scoring mode cannot run on it."""


def logprobs_support(lm: Any) -> tuple[bool, str]:
    """(does ``lm`` give log-probabilities, why we think so); a server is asked once per ``lm``."""
    if lm.in_process:
        return True, "an in-process model gives exact label probabilities"
    with _PROBE_LOCK:
        found = getattr(lm, "_logprobs_probe", None)
        if found is None:
            found = lm._logprobs_probe = _probe(lm)
        return found


def _probe(lm: Any) -> tuple[bool, str]:
    where = f"{lm.spec} at {lm.spec.endpoint}"
    if lm.spec.is_reasoning:
        return False, f"{where} is a reasoning model, which returns no log-probabilities"
    try:
        completion = lm.client.complete([{"role": "user", "content": "Reply with one word: ready?"}], max_tokens=1,
                                        top_logprobs=PROBE_TOP_LOGPROBS)
    except LMCallError as err:  # (a refused key or an unreachable server raises ServerError, which stops the run)
        if classify(err) == "unsupported":  # the request itself was refused: logprobs are not accepted there
            return False, f"{where} refused a request for top_logprobs ({err})"
        return True, f"the probe of {where} failed ({err}); assuming it returns top_logprobs"
    if completion.logprobs and completion.logprobs[0].get("top_logprobs"):
        return True, f"{where} returns top_logprobs"
    return False, f"{where} returned no top_logprobs when asked for them"


def resolve_scoring_mode(lm: Any, requested: str | None) -> str:
    """The scoring mode a judge on ``lm`` uses: ``requested``, or the endpoint's best when None.

    Raises:
        ValueError: an unknown mode.
        LogprobsUnavailableError: ``logprobs`` asked of an endpoint that gives none (one message
            naming the model, the endpoint and the mode that would work).
    """
    if requested is not None and requested not in SCORING_MODES:
        raise ValueError(f"scoring_mode must be one of {list(SCORING_MODES)}, got {requested!r}")
    if requested in ("sampled", "parsed"):
        return requested
    supported, why = logprobs_support(lm)
    if requested == "logprobs":
        if not supported:
            raise LogprobsUnavailableError(logprobs_unavailable(lm, why))
        return requested
    mode = "logprobs" if supported else "sampled"
    if not lm.in_process:
        with _PROBE_LOCK:
            if not getattr(lm, "_mode_logged", False):
                lm._mode_logged = True
                log.warning("scoring mode %s: %s (set scoring_mode to choose; logprobs | sampled | parsed)", mode, why)
    return mode


def logprobs_unavailable(lm: Any, why: str) -> str:
    """The one message for a ``logprobs`` judge on an endpoint without log-probabilities."""
    return (f"scoring_mode='logprobs' needs label log-probabilities, but {why}. Use scoring_mode='sampled' "
            f"(n answers at a temperature, labels parsed; about n times the calls) or scoring_mode='parsed' "
            f"(one answer) with {lm.spec} at {lm.spec.endpoint}, or leave scoring_mode unset to have it chosen; "
            "a llama.cpp server returns log-probabilities when started with --logits_all true.")
