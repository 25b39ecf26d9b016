"""The Judge contract, and the shared machinery of judges that prompt an LM."""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

import dspy
import numpy as np

from judgetune.datasets import Example, example_from_record
from judgetune.errors import JudgetuneError
from judgetune.judges._adapter import ForcedChoiceAdapter
from judgetune.judges._prompting import SCORING, make_signature
from judgetune.judges._space import Choice, IntRange, Param, check_params
from judgetune.judges._spec import JudgeSpec
from judgetune.judges._verdict import Verdict
from judgetune.lm import SCORING_MODES, JudgeLM, resolve_scoring_mode, run_items

log = logging.getLogger(__name__)
MAX_DEMOS = 8
SAMPLED_SPACE = [IntRange("n_samples", 2, 20, 10), Choice("temperature", (0.5, 0.7, 1.0), 1.0)]


class Judge(dspy.Module):
    """Maps an Example to a Verdict.

    Subclasses set ``kind``, declare their knobs in :meth:`space` and implement :meth:`forward`.
    A judge holds its settings (``params``) and never results: every call returns a new Verdict.
    ``score_range`` is the range of ``Verdict.score``.

    What building one needs is declared on the class (read by ``judges.build``): ``needs_lm`` (or
    :meth:`needs_lm_with` when a setting switches an LM on); ``uses_references`` (its demos carry
    graded references drawn from the training examples, seeded); ``seeded`` (it takes the spec's
    seed); ``uses_prompt`` (an instruction and demos picked from training examples); ``fits``
    (fitted on training examples, its fitted state checked by :meth:`check_fitted`); and
    :meth:`data_defaults`, settings that fit the data when the user sets none; ``STACKED``, the settings
    that add an LM's features, searched only in a stacking run.

    What a judge reads when it scores: its own state and the item (with the references the item
    carries), never another item, unless :meth:`needs_groups_with` says its settings compare an item
    with the other items of its group; such a judge scores only under a protocol (``group``,
    ``linkage``) and refuses items without a group.
    """

    kind: ClassVar[str]
    needs_lm: ClassVar[bool] = True
    uses_references: ClassVar[bool] = False
    seeded: ClassVar[bool] = False
    uses_prompt: ClassVar[bool] = False
    fits: ClassVar[bool] = False
    # settings that switch an LM's features on beside a judge's own (off by default, not searched): the tuner
    # searches them only when a run asks to stack (``RunSpec.stack``)
    STACKED: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def needs_groups_with(cls, params: dict[str, Any]) -> bool:
        """Whether a judge of these settings compares an item with the other items of its group."""
        return False

    @classmethod
    def check_fitted(cls, fitted: dict[str, Any]) -> None:
        """Check a fitting judge's fitted state (from judge.json). Raises ValueError naming the field."""

    @classmethod
    def needs_lm_with(cls, params: dict[str, Any]) -> bool:
        """Whether a judge of these settings needs an LM: ``needs_lm``, or a setting that switches one on."""
        return cls.needs_lm

    def __init__(self, lm: JudgeLM | None = None, **params: Any):
        super().__init__()
        if self.needs_lm and lm is None:
            raise ValueError(f"judge {self.kind} needs an LM (pass --lm SPEC, e.g. local:smollm2)")
        self.lm = lm
        self.params = check_params(self.space_for(params), params, judge=self.kind)

    @classmethod
    def space(cls) -> list[Param]:
        """The tunable knobs; empty for a judge without any."""
        return []

    @classmethod
    def space_for(cls, settled: dict[str, Any]) -> list[Param]:
        """Every setting a judge with these ``settled`` ones accepts: ``space()`` plus settings that
        depend on others (an LM judge's scoring mode and, when sampled, its knobs)."""
        return cls.space()

    @classmethod
    def data_defaults(cls, examples: Sequence[Example], label_range: tuple[float, float] | None) -> dict[str, Any]:
        """Settings that fit these examples when the user sets none (the tuner searches them instead)."""
        return {}

    @property
    def score_range(self) -> tuple[float, float]:
        raise NotImplementedError

    @property
    def needs_groups(self) -> bool:
        """Whether this judge compares an item with the other items of its group (a protocol's judge)."""
        return self.needs_groups_with(self.params)

    @property
    def scores_alone(self) -> bool:
        """Whether an item's score is independent of the other items judged with it (NRP needs this)."""
        return not self.needs_groups

    def require_groups(self, examples: Sequence[Example]) -> None:
        """Refuse items without a group when this judge compares an item with its group.

        Raises:
            JudgetuneError: naming the judge, why it needs groups and the items without one.
        """
        missing = [e.id for e in examples if e.group is None]
        if missing:
            raise JudgetuneError(
                f"judge {self.kind} with {self.group_reason()} compares an item with the other answers of its "
                f"question: it scores only under the group or linkage protocol, with a group on every item; "
                f"{len(missing)} item(s) have none (first: {missing[0]})")

    def group_reason(self) -> str:
        return "these settings"

    def range_for(self, examples: Sequence[Example]) -> tuple[float, float]:
        """The range of the scores this judge gives these examples (``score_range`` unless the data changes it)."""
        return self.score_range

    def forward(self, example: Example) -> Verdict:
        raise NotImplementedError

    def judge_all(self, examples: Sequence[Example], *, progress: bool = False) -> list[Verdict]:
        """A Verdict per Example, in order; an Example whose judgment raised gets a failed Verdict."""
        if self.lm is None:
            outcomes = run_items(self, list(examples), concurrency=1, progress=progress, description=self.kind)
        else:  # in-process, label reads of several items go to the model together (not worth it after a reasoning)
            outcomes = self.lm.run(self, list(examples), progress=progress,
                                   batched=not self.params.get("reasoning", False))
        verdicts = []
        for outcome in outcomes:
            if outcome.ok:
                verdicts.append(outcome.value)
            else:
                log.warning("%s: item %d failed: %s", self.kind, outcome.index, outcome.error)
                verdicts.append(Verdict.failed(f"error: {outcome.error}"))
        return verdicts

    def settings(self) -> dict[str, Any]:
        """The judge's settings as plain JSON (the part of a frozen config that is the judge's own)."""
        return {"judge": self.kind, "params": dict(self.params)}

    def spec(self) -> JudgeSpec:
        """The judge as plain data: ``judges.build(judge.spec(), context)`` rebuilds it."""
        return JudgeSpec(self.kind, dict(self.params), seed=getattr(self, "seed", 0))


def pick_demos(pool: Sequence[Example], k: int, *, seed: int, exclude: Sequence[str] = ()) -> list[Example]:
    """``k`` labeled Examples stratified by label, so they span the scale: one per label in turn (labels in
    a seeded order), each label's Examples in a seeded order; with more distinct labels than ``k`` (a
    continuous scale), one per each of ``k`` bins of neighbouring labels (low to high in equal counts of
    distinct labels). Unlabeled Examples and ``exclude``d ids never appear."""
    rng = random.Random(seed)
    by_label: dict[float, list[Example]] = defaultdict(list)
    excluded = set(exclude)
    for ex in pool:
        if ex.id not in excluded and (ex.label is not None or ex.preference is not None):
            by_label[ex.label if ex.label is not None else ex.preference].append(ex)
    labels = sorted(by_label)
    bins = [labels[i * len(labels) // k:(i + 1) * len(labels) // k] for i in range(k)] if len(labels) > k > 0 \
        else [[label] for label in labels]
    buckets = [[ex for label in b for ex in by_label[label]] for b in bins]
    for bucket in buckets:
        rng.shuffle(bucket)
    rng.shuffle(buckets)
    picked: list[Example] = []
    while len(picked) < k and any(buckets):
        for bucket in buckets:
            if bucket and len(picked) < k:
                picked.append(bucket.pop())
    return picked


def nearest_label(value: float, labels: Sequence[str], values: Sequence[float]) -> str:
    return labels[int(np.argmin([abs(value - v) for v in values]))]


class PromptState:
    """The prompt a judge's DSPy predictors hold, as the judge's ``instruction`` and ``demos``.

    ``instruction`` is the main predictor's (``self.predict``) signature instruction; setting it sets
    every prompt predictor's, each given ``instruction_for(name, text)``. ``demos`` are the main
    predictor's demos; setting them sets every prompt predictor's.
    """

    def prompt_predictors(self) -> list[tuple[str, dspy.Predict]]:
        """The predictors that carry the judge's prompt (the main one unless a judge has more)."""
        return [("predict", self.predict)]

    def instruction_for(self, name: str, text: str) -> str:
        """The instruction predictor ``name`` gets when the judge's instruction is ``text``."""
        return text

    @property
    def instruction(self) -> str:
        return self.predict.signature.instructions

    @instruction.setter
    def instruction(self, text: str) -> None:
        for name, predictor in self.prompt_predictors():
            predictor.signature = predictor.signature.with_instructions(self.instruction_for(name, text))

    @property
    def demos(self) -> list[Example]:
        """The demos as Examples (DSPy holds them as ``dspy.Example`` records)."""
        return demo_examples(self.predict.demos)

    @demos.setter
    def demos(self, examples: Sequence[Example]) -> None:
        for _, predictor in self.prompt_predictors():
            predictor.demos = [dspy.Example(**e.to_dict()) for e in examples]


class LMJudge(PromptState, Judge):
    """A judge that asks an LM one or more forced-choice questions in DSPy's chat format.

    It holds a ``dspy.Predict`` (``self.predict``) whose signature instruction and demos are the
    judge's prompt, its tuned state: ``dump_state()``/``load_state()`` carry them, and they are what
    a frozen config's ``instruction`` and ``demos`` hold. Each question specializes the signature to
    the fields an example has and is answered through :class:`ForcedChoiceAdapter` (a label
    distribution read at the answer position), installed with ``dspy.context`` for that call only.

    The instruction comes from the class's pool (``INSTRUCTIONS``, the method-faithful one first)
    unless ``instruction_text`` replaces it; demos are human-labeled Examples, ``k`` of them picked
    from ``demo_pool`` unless ``demos`` gives them; ``label_range`` is the human scale the demos' labels are on. A judgment
    whose labels got at most ``min_label_mass`` of the probability fails (see ``forced_choice``).
    ``INPUTS``, ``OUTPUT`` and ``OUTPUT_DESCRIPTION`` declare the predictor's full signature.

    ``scoring_mode`` (``logprobs``, ``sampled`` or ``parsed``, see ``judgetune.lm.resolve_scoring_mode``)
    is a setting outside the searched space: unset, it is the LM's best (a server is probed once).
    ``sampled`` adds ``n_samples`` and ``temperature``, which the tuner searches.
    """

    INSTRUCTIONS: ClassVar[dict[str, str]]
    INPUTS: ClassVar[tuple[str, ...]] = ("question", "reference", "answer")
    OUTPUT: ClassVar[str] = "score"
    OUTPUT_DESCRIPTION: ClassVar[str] = "the judgment"
    uses_prompt = True

    def __init__(self, lm: JudgeLM | None = None, *, demo_pool: Sequence[Example] = (),
                 label_range: tuple[float, float] | None = None, instruction_text: str | None = None,
                 demo_seed: int = 0, max_reasoning_tokens: int = 160, min_label_mass: float = 0.0,
                 demos: Sequence[Example] | None = None, **params: Any):
        if lm is not None:
            params["scoring_mode"] = resolve_scoring_mode(lm, params.get("scoring_mode"))
        super().__init__(lm, **params)
        self.label_range = label_range
        self.max_reasoning_tokens, self.min_label_mass = max_reasoning_tokens, min_label_mass
        inputs, output, description = self.prompt_fields()
        self.predict = dspy.Predict(make_signature(instruction_text or self.INSTRUCTIONS[self.params["instruction"]],
                                                  inputs, output, description,
                                                  reasoning=self.params.get("reasoning", False)))
        # exact demos (a frozen config) win over picking k of them from the pool
        self.demos = list(demos) if demos is not None else pick_demos(demo_pool, self.params.get("k", 0), seed=demo_seed)

    def prompt_fields(self) -> tuple[tuple[str, ...], str, str]:
        """The predictor's input fields, output field and its description (questions use a subset)."""
        return self.INPUTS, self.OUTPUT, self.OUTPUT_DESCRIPTION

    @classmethod
    def lm_space(cls) -> list[Param]:
        return [Choice("instruction", tuple(cls.INSTRUCTIONS), next(iter(cls.INSTRUCTIONS))),
                IntRange("k", 0, MAX_DEMOS, 0), Choice("reasoning", (False, True), False),
                Choice("scoring", SCORING, "expected")]

    @classmethod
    def space(cls) -> list[Param]:
        return cls.lm_space()

    @classmethod
    def space_for(cls, settled: dict[str, Any]) -> list[Param]:
        mode = settled.get("scoring_mode", "logprobs")
        return [*cls.space(), Choice("scoring_mode", SCORING_MODES, "logprobs"),
                *(SAMPLED_SPACE if mode == "sampled" else [])]

    def ask(self, inputs: dict[str, str], output: str, output_description: str, labels: Sequence[str],
            values: Sequence[float], demos: Sequence[dict] = ()) -> Verdict:
        """One forced-choice question: the instruction, the demos, these inputs; the score is the expected value."""
        reasoning = self.params.get("reasoning", False)
        signature = make_signature(self.instruction, list(inputs), output, output_description, reasoning=reasoning)
        adapter = ForcedChoiceAdapter(self.lm, labels, values, reasoning=reasoning,
                                      max_reasoning_tokens=self.max_reasoning_tokens,
                                      min_label_mass=self.min_label_mass, scoring=self.params.get("scoring", "expected"),
                                      mode=self.params["scoring_mode"], n_samples=self.params.get("n_samples", 1),
                                      temperature=self.params.get("temperature", 0.0))
        with dspy.context(adapter=adapter, lm=self.lm.dspy_lm):
            return self.predict(signature=signature, demos=list(demos), **inputs).verdict

    def demo_value(self, example: Example, score_range: tuple[float, float]) -> float:
        """A demo's human label mapped from ``label_range`` onto ``score_range`` (linear)."""
        value = example.label if example.label is not None else example.preference
        if self.label_range is None or self.label_range == score_range:
            return float(value)
        (lo, hi), (a, b) = self.label_range, score_range
        return a + (float(value) - lo) * (b - a) / (hi - lo)

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "instruction": self.instruction, "label_range": self.label_range,
                "demos": [d.to_dict() for d in self.demos]}

    def spec(self) -> JudgeSpec:
        return replace(super().spec(), instruction=self.instruction, demos=tuple(self.demos))


def demo_examples(records: Sequence[Any]) -> list[Example]:
    """Demo records (``dspy.Example`` or dicts with the fields of a data file's rows) as Examples.

    Raises:
        ValueError: a record that is no valid example.
    """
    problems: list[str] = []
    out = [example_from_record(dict(r.items()) if isinstance(r, dspy.Example) else dict(r), where=f"demos[{i}]",
                               default_id=f"demo-{i}", problems=problems)
           for i, r in enumerate(records)]
    if problems:
        raise ValueError("\n".join(problems))
    return out


def example_inputs(example: Example, *, with_context: bool = True) -> dict[str, str]:
    """The text fields of an Example a judge shows the LM: question, reference (the best one),
    context (numbered chunks: a source document or retrieved passages) when the item has one, and
    the answer. A judge that grades against a source must see it: a SummaC claim without its article
    cannot be judged."""
    inputs = {}
    if example.question:
        inputs["question"] = example.question
    if example.references:
        inputs["reference"] = example.references[0].text
    if with_context and example.context:
        inputs["context"] = "\n".join(f"[{i}] {chunk}" for i, chunk in enumerate(example.context, 1))
    inputs["answer"] = example.answer
    return inputs
