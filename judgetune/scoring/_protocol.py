"""A frozen judge's scores: under a protocol or item by item, and the LM its config names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from judgetune.config import JudgeConfig
from judgetune.datasets import Example
from judgetune.errors import JudgetuneError
from judgetune.judges import PROTOCOLS, Judge, Verdict, apply_protocol

__all__ = ["ProtocolRun", "load_config_lm", "score_examples", "score_protocol"]


@dataclass(frozen=True)
class ProtocolRun:
    """A frozen judge's scores under a protocol: the scored ``items`` (under ``linkage`` the candidates,
    carrying their drawn references; the drawn answers are no candidates), their verdicts and calibrated
    scores, and the protocol record every figure made from them carries."""

    items: list[Example]
    verdicts: list[Verdict]
    scores: list[float | None]
    protocol: dict[str, Any]


def score_protocol(config: JudgeConfig, examples: list[Example], lm=None, *, protocol: str | None = None,
                   per_grade: int = 1, seed: int = 0, grades: list[float] | None = None, judge: Judge | None = None,
                   progress: bool = False) -> ProtocolRun:
    """Score ``examples`` with a frozen judge under ``protocol`` (None: each item from the judge's state and
    the item alone). ``judge``: the config's judge, already built (built here otherwise).

    Raises:
        JudgetuneError: a judge that compares an item with its group scored without a protocol, an unknown
            protocol, or items without a group under one.
    """
    judge = judge if judge is not None else config.build_judge(lm)
    if protocol is None and judge.needs_groups:
        raise JudgetuneError(f"judge {config.judge} with {judge.group_reason()} compares an item with the other "
                             "answers of its question; score it under a protocol (--protocol group, or "
                             "protocol='group' and a group on every item)")
    if protocol is not None and protocol not in PROTOCOLS:
        raise JudgetuneError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)} (or none)")
    draw = apply_protocol(examples, protocol, per_grade=per_grade, seed=seed, grades=grades)
    verdicts = judge.judge_all(draw.candidates, progress=progress)
    record = {"protocol": protocol} if protocol != "linkage" else {
        **draw.summary(), "qualified": draw.qualified, "skipped": draw.skipped}
    return ProtocolRun(draw.candidates, verdicts, config.calibrated(verdicts, judge, draw.candidates), record)


def score_examples(config: JudgeConfig, examples: list[Example], lm=None, *, protocol: str | None = None,
                   judge: Judge | None = None, progress: bool = False) -> tuple[list[Verdict], list[float | None]]:
    """Verdicts and calibrated scores of a frozen judge on ``examples``, in order: each item from the judge's
    state and the item alone (``protocol`` None), or its group's items' texts (``group``). LINKAGE's protocol
    changes which items are candidates: use :func:`score_protocol`.

    Raises:
        JudgetuneError: see :func:`score_protocol`.
    """
    if protocol == "linkage":
        raise JudgetuneError("the linkage protocol removes the drawn references from the candidates: "
                             "use score_protocol, whose result names the scored items")
    scoring = score_protocol(config, examples, lm, protocol=protocol, judge=judge, progress=progress)
    return scoring.verdicts, scoring.scores


def load_config_lm(config: JudgeConfig, *, timeout: float = 60.0, api_base: str | None = None,
                   where: str = "the judge config", **server: Any):
    """The LM a config names (None for judges without one); ``timeout`` is per attempt of a server call;
    ``server``: ``concurrency``, ``rps``, ``rate_limit_wait`` (see ``load_lm``).

    ``api_base`` (the user's ``--api-base``) replaces the config's endpoint. A server's key comes from the
    environment, and goes to the config's own endpoint only when the user trusts it (``where`` names the
    config in the warning; see ``judgetune._endpoints``): a judge.json is untrusted input.
    """
    if not config.needs_lm():
        return None
    from judgetune.lm import load_lm

    named = api_base is not None
    return load_lm(config.lm["spec"], api_base=api_base if named else config.lm.get("api_base"), timeout=timeout,
                   reasoning=config.lm.get("reasoning"), trust_endpoint=named, endpoint_source=where, **server)
