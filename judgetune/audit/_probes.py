"""The probes: each scores a frozen judge on the items and on a changed copy of them, and returns the
per-item paired differences (or why it does not apply to this judge).

Every probe changes one thing that should not matter and measures how far the judge's score moves:
the order of two answers (position), neutral padding (verbosity), an irrelevant sentence
(distraction), which references are shown (stability) and which demos and seed the judge was built
with (self-consistency). Scores are the frozen judge's calibrated scores on the human scale, except
where a probe says otherwise in its ``unit``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from judgetune.audit._stats import paired_effect
from judgetune.config import JudgeConfig
from judgetune.datasets import Example
from judgetune.errors import NothingJudgedError
from judgetune.judges import BuildContext, JudgeSpec, Verdict, build, judge_class

# neutral padding: restates that the answer is above, adds no claim
PADDING = ("To restate it plainly and without adding anything new: the answer is the one given in the words above, "
           "and nothing further is claimed here.")
# an irrelevant sentence: true, but about nothing any judged item asks
DISTRACTION = "Unrelated to this, the Pacific is the largest and deepest of the oceans on Earth."
HUMAN_SCALE = "calibrated score on the human scale"
PAIRWISE_UNIT = "preference for the second-shown answer (raw, -1..1)"
LISTWISE_UNIT = "share of items placed first, minus the share the human grade places first"


@dataclass(frozen=True)
class Paired:
    """A probe's per-item differences (changed minus original) and their clusters (the items' groups),
    the items whose judgment failed on either side (left out and counted), the unit of the
    differences, and probe-specific figures."""

    diffs: list[float]
    clusters: list[str]
    failed: int
    unit: str = HUMAN_SCALE
    extra: dict[str, Any] = field(default_factory=dict)


class Scorer:
    """A frozen judge ready to score the audit's items and changed copies of them.

    Every variant is built like the frozen judge (``config.spec()``), scores calibrated by the frozen
    calibrator. The original items' verdicts
    are computed once and shared by the probes.
    """

    def __init__(self, config: JudgeConfig, examples: Sequence[Example], lm: Any = None, *,
                 progress: bool = False):
        self.config, self.examples, self.lm, self.progress = config, list(examples), lm, progress
        self._judge = config.build_judge(lm)
        self._base: tuple[list[Verdict], list[float | None]] | None = None

    @property
    def kind(self) -> str:
        return self.config.judge

    def build(self, spec: JudgeSpec, train: Sequence[Example] = ()):
        return build(spec, BuildContext(lm=self.lm, demo_pool=train,
                                        label_range=tuple(self.config.label_range)))

    def score(self, examples: Sequence[Example], judge=None) -> tuple[list[Verdict], list[float | None]]:
        """Verdicts and calibrated scores of ``examples`` (by the frozen judge, or ``judge``)."""
        judge = judge or self._judge
        verdicts = judge.judge_all(list(examples), progress=self.progress)
        return verdicts, self.config.calibrated(verdicts, judge, list(examples))

    def base(self) -> tuple[list[Verdict], list[float | None]]:
        """The frozen judge's verdicts and scores of the items as they are.

        Raises:
            NothingJudgedError: the judge failed on every item (nothing to compare).
        """
        if self._base is None:
            self._base = self.score(self.examples)
            failed = [v.raw for v in self._base[0] if not v.parsed]
            if len(failed) == len(self.examples):
                raise NothingJudgedError(f"the {self.kind} judge failed on every one of the {len(failed)} items "
                                         f"audited; the first because: {failed[0]}")
        return self._base


def _differences(before: Sequence[float | None], after: Sequence[float | None],
                 examples: Sequence[Example], keep: Callable[[int], bool] = lambda i: True) -> Paired:
    diffs, clusters, failed = [], [], 0
    for i, (a, b) in enumerate(zip(before, after)):
        if not keep(i):
            continue
        if a is None or b is None:
            failed += 1
            continue
        diffs.append(b - a)
        clusters.append(examples[i].group_key)
    return Paired(diffs, clusters, failed)


def _append(example: Example, text: str) -> Example:
    """The example with ``text`` appended to the judged answer (``answer_b`` for a pairwise item)."""
    if example.answer_b is not None:
        return replace(example, answer_b=f"{example.answer_b.rstrip()} {text}")
    return replace(example, answer=f"{example.answer.rstrip()} {text}")


def verbosity(scorer: Scorer) -> Paired | str:
    """The score change when neutral padding (no content) is appended to the answer (to answer_b of a pair)."""
    _, before = scorer.base()
    _, after = scorer.score([_append(e, PADDING) for e in scorer.examples])
    return replace(_differences(before, after, scorer.examples), extra={"padding_words": len(PADDING.split())})


def distraction(scorer: Scorer) -> Paired | str:
    """The score change when an irrelevant sentence is appended to the answer (to answer_b of a pair)."""
    _, before = scorer.base()
    _, after = scorer.score([_append(e, DISTRACTION) for e in scorer.examples])
    return replace(_differences(before, after, scorer.examples), extra={"sentence": DISTRACTION})


def _winner(preference: float) -> int:
    return int(np.sign(preference))


def _position_figures(first_order: Sequence[float], second_order: Sequence[float]) -> dict[str, float]:
    """Flip rate and first-position preference of preferences for the second-shown answer, given in
    both orders for each pair (order 2 shows the pair swapped)."""
    flips = [_winner(s1) != -_winner(s2) for s1, s2 in zip(first_order, second_order)]
    first = [s < 0 for s in (*first_order, *second_order)]
    return {"flip_rate": float(np.mean(flips)), "first_preferred": float(np.mean(first))}


def position(scorer: Scorer) -> Paired | str:
    """Pairwise: the pair shown in both orders; listwise: how often the first position is chosen.

    Pairwise (mode answers): per pair, the mean of the judge's preference for the second-shown answer
    over the two orders (raw judge scale, -1..1): an order-blind judge gives exactly 0. Extras: the
    flip rate (the preferred answer changes with the order) and the share of presentations where the
    first-shown answer is preferred; with the judge's own swap on, the same figures for one order alone.
    Listwise: per item, whether the most probable position is 1 minus whether the human grade puts the
    answer there (needs labels): the excess rate of choosing the first position.
    """
    if scorer.kind == "linkage":
        return _listwise_position(scorer)
    if scorer.kind != "pairwise":
        return "applies to pairwise and listwise judges (nothing is shown in an order)"
    if scorer.config.params.get("mode") != "answers":
        return "pairwise mode 'references': each comparison's order is the judge's own swap setting"
    pairs = [i for i, e in enumerate(scorer.examples) if e.answer_b is not None]
    if not pairs:
        return "no item has answer_b"
    base, _ = scorer.base()
    swapped = [replace(scorer.examples[i], answer=scorer.examples[i].answer_b, answer_b=scorer.examples[i].answer,
                       preference=None if scorer.examples[i].preference is None else -scorer.examples[i].preference)
               for i in pairs]
    flipped, _ = scorer.score(swapped)
    diffs, clusters, s1, s2, failed = [], [], [], [], 0
    one_a, one_b = [], []
    for i, v2 in zip(pairs, flipped):
        v1 = base[i]
        if v1.score is None or v2.score is None:
            failed += 1
            continue
        diffs.append((v1.score + v2.score) / 2)
        clusters.append(scorer.examples[i].group_key)
        s1.append(v1.score)
        s2.append(v2.score)
        if "forward" in v1.detail:  # the judge's own two orders (swap on): preference for the second-shown
            one_a.append(v1.detail["forward"])
            one_b.append(-v1.detail["backward"])
    extra: dict[str, Any] = _position_figures(s1, s2)
    if one_a:  # what the swap pays for: the same figures for one order alone (its statistics uncorrected)
        one = paired_effect([(a + b) / 2 for a, b in zip(one_a, one_b)], clusters)
        extra["one_order"] = {"effect": one.effect, "low": one.low, "high": one.high, "p": one.p,
                              **_position_figures(one_a, one_b)}
    return Paired(diffs, clusters, failed, PAIRWISE_UNIT, extra)


def _listwise_position(scorer: Scorer) -> Paired | str:
    base, _ = scorer.base()
    diffs, clusters, failed, chosen, human = [], [], 0, [], []
    for e, v in zip(scorer.examples, base):
        if e.label is None:
            continue
        if v.score is None or not v.distribution or not v.detail.get("draws"):
            failed += 1
            continue
        top = max(v.distribution, key=v.distribution.get) == "1"
        true_first = all(g is None or g <= e.label for g in v.detail["draws"][0]["grades"])
        diffs.append(float(top) - float(true_first))
        clusters.append(e.group_key)
        chosen.append(top)
        human.append(true_first)
    if not diffs and not failed:
        return "no labeled item: the first position's share is measured against the human grade"
    return Paired(diffs, clusters, failed, LISTWISE_UNIT,
                  {"first_preferred": float(np.mean(chosen)) if chosen else None,
                   "first_by_human": float(np.mean(human)) if human else None})


def stability(scorer: Scorer) -> Paired | str:
    """The score change when the references change but not their worth.

    A judge that draws references (listwise, pairwise against references): another seeded draw of the
    same grade composition, demos kept. A judge that reads an item's own references: the references
    in reverse order (items with at least two). Meaning-preserving rewrites of the answer need an LM
    that writes them and are not run (see docs/audit.md).
    """
    _, before = scorer.base()
    draws = judge_class(scorer.kind).uses_references and scorer.config.params.get("mode") != "answers"
    if draws:
        spec = replace(scorer.config.spec(), seed=scorer.config.seed + 1)
        _, after = scorer.score(scorer.examples, scorer.build(spec))
        return replace(_differences(before, after, scorer.examples), extra={"variant": "another reference draw"})
    several = [i for i, e in enumerate(scorer.examples) if len(e.references) >= 2]
    if not several:
        return "no item has two or more references to reorder, and the judge draws none"
    changed = [replace(scorer.examples[i], references=tuple(reversed(scorer.examples[i].references))) for i in several]
    _, after_some = scorer.score(changed)
    after: list[float | None] = [None] * len(scorer.examples)
    for i, s in zip(several, after_some):
        after[i] = s
    kept = set(several)
    return replace(_differences(before, after, scorer.examples, keep=lambda i: i in kept),
                   extra={"variant": "references reversed"})


def self_consistency(scorer: Scorer) -> Paired | str:
    """The score change when the judge is rebuilt with another seed: demos drawn afresh (by the judge's
    own rule, from the audit's labeled items; items drawn as demos are left out of the comparison)
    and seeded parts (reference draws) redrawn."""
    if not scorer.config.demos:
        return "the frozen judge shows no demos (nothing to redraw; reference draws are the stability probe)"
    labeled = [e for e in scorer.examples if e.judgment is not None]
    spec = replace(scorer.config.spec(), demos=None, seed=scorer.config.seed + 1)
    judge = scorer.build(spec, train=labeled)
    shown = {d.id for d in judge.spec().demos or ()}
    _, before = scorer.base()
    _, after = scorer.score(scorer.examples, judge)
    paired = _differences(before, after, scorer.examples, keep=lambda i: scorer.examples[i].id not in shown)
    abs_mean = float(np.mean(np.abs(paired.diffs))) if paired.diffs else None
    return replace(paired, extra={"variant": "demos redrawn, seed + 1", "demos": len(shown),
                                  "mean_abs_change": abs_mean})


def rewrite(scorer: Scorer) -> Paired | str:
    """Meaning-preserving rewrites of the answer: not run (they need an LM that writes faithful
    paraphrases; the embedded model does not)."""
    return "meaning-preserving rewrites need an LM that writes faithful paraphrases; none is run (docs/audit.md)"


PROBES: dict[str, Callable[[Scorer], Paired | str]] = {
    "position": position, "verbosity": verbosity, "distraction": distraction, "stability": stability,
    "self_consistency": self_consistency, "rewrite": rewrite,
}
