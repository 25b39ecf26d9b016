"""A planted-optimum testbed for the tuner (tests and benchmarks only; never proof that judging works).

Synthetic items carry integer labels 0-5. :class:`PlantedLM` answers label questions with a
distribution that puts weight ``s`` on the true label and ``1 - s`` on a noise distribution fixed
by the prompt, where ``s`` grows with how much of a planted configuration the prompt carries:

    s = 0.5 * [the planted instruction is the system prompt's instruction]
      + 0.3 * Jaccard(demo items shown, planted demo items)
      + 0.2 * (1 - |demos shown - planted k| / 8)

so only one instruction, one demo subset and one k give ``s = 1`` (a Spearman of 1). As a
proposer, it writes decoys, an empty, an over-long and a repeated proposal, and the planted
instruction only when its prompt holds a reflection (the current instruction and its misses).
Answers are cached like :class:`judgetune.lm.JudgeLM`'s, and only computed ones are counted.

The gate's testbeds (:class:`GateLM`) use the same distributions with a weight that depends on the
instruction alone: in the null testbed every instruction gets the same weight (judges differ by
noise only), in the planted one :data:`GATE_INSTRUCTION` gets more. ``GATE_SPEC`` holds the run
settings both use (a rubric judge whose only searched knob is the instruction).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from collections.abc import Sequence

import numpy as np

from judgetune.datasets import Example, Reference
from judgetune.lm import Generation, LabelDistribution, run_items
from judgetune.testing.scripted_lm import refusing_dspy_lm

PLANTED_INSTRUCTION = ("Count the facts of the reference that the answer repeats: all of them give the top score, "
                       "none of them give the lowest.")
DECOYS = ("Rate the answer by how fluent and polite it sounds.",
          "Give a high score to long answers and a low score to short ones.",
          "Score the answer by whether it uses the same first word as the reference.")
ITEM = re.compile(r"item-(\d+)")


def planted_examples(n: int = 160, *, seed: int = 0, per_group: int | None = None) -> list[Example]:
    """``n`` items with labels 0-5 (seeded), each naming itself ``item-N`` in its answer; with ``per_group``,
    grouped into questions of that many answers (split, resampled and correlated per question)."""
    rng = random.Random(seed)
    return [Example(id=f"p{i}", answer=f"Answer item-{i}: statement number {rng.randint(0, 999)}.",
                    references=(Reference(f"Reference sentence {i} about topic {i % 7}."),), label=float(rng.randint(0, 5)),
                    group=None if per_group is None else f"q{i // per_group}")
            for i in range(n)]


class _Counter:
    """Stands in for ``JudgeLM.engine``: ``calls`` counts generations actually computed."""

    def __init__(self) -> None:
        self.calls = 0


class PlantedLM:
    in_process = True
    concurrency = 1

    def __init__(self, labels: dict[str, float], planted_demos: Sequence[str], planted_k: int):
        self.labels = {ITEM.search(k).group(1) if ITEM.search(k) else k: v for k, v in labels.items()}
        self.planted_demos, self.planted_k = set(planted_demos), planted_k
        self.engine, self.label_calls = _Counter(), 0
        self._cache: dict[str, object] = {}
        self.transcript = None
        self.salt = ""  # mixed into the noise's seed: one testbed, independent noise per seeded run

    @functools.cached_property
    def dspy_lm(self):
        """The ``dspy.LM`` a judge installs around its predictor (see ``refusing_dspy_lm``)."""
        return refusing_dspy_lm()

    @classmethod
    def for_examples(cls, examples: Sequence[Example], planted_demos: Sequence[Example], planted_k: int) -> PlantedLM:
        """The LM for these items, whose optimum shows exactly ``planted_demos`` (``planted_k`` of them)."""
        number = {e.id: ITEM.search(e.answer).group(1) for e in examples}
        return cls({number[e.id]: e.label for e in examples}, [number[d.id] for d in planted_demos], planted_k)

    def signal(self, messages: list[dict]) -> float:
        """The weight on the true label for this prompt (see the module docstring)."""
        instruction = PLANTED_INSTRUCTION in messages[0]["content"]
        shown = {m for msg in messages[1:-1] if msg["role"] == "user" for m in ITEM.findall(msg["content"])}
        union = shown | self.planted_demos
        jaccard = len(shown & self.planted_demos) / len(union) if union else 1.0
        k_fit = 1 - abs(len(shown) - self.planted_k) / 8
        return 0.5 * instruction + 0.3 * jaccard + 0.2 * k_fit

    def label_distribution(self, messages: list[dict], labels: Sequence[str], *, prefix: str = "") -> LabelDistribution:
        key = json.dumps(["labels", messages, list(labels), prefix])
        if key not in self._cache:
            self.label_calls += 1
            item = ITEM.findall(messages[-1]["content"])[-1]
            s = self.signal(messages)
            noise = np.random.default_rng(int(hashlib.sha256((self.salt + key).encode()).hexdigest()[:12], 16)).dirichlet(
                np.full(len(labels), 0.7))
            truth = np.asarray([float(label) == self.labels[item] for label in labels], dtype=float)
            probs = s * truth + (1 - s) * noise
            self._cache[key] = LabelDistribution(tuple(labels), tuple(float(np.log(max(p, 1e-12))) for p in probs),
                                                 usage={"prompt_tokens": 10})
        return self._cache[key]

    def generate(self, messages: list[dict], *, prefix: str = "", max_tokens: int = 256, stop: Sequence[str] = (),
                 json_schema: dict | None = None, top_logprobs: int | None = None) -> Generation:
        key = json.dumps(["generate", messages, prefix])
        if key not in self._cache:
            self.engine.calls += 1
            self._cache[key] = Generation(self.propose(messages[-1]["content"]),
                                          {"prompt_tokens": 10, "completion_tokens": 20})
        return self._cache[key]

    @staticmethod
    def propose(prompt: str) -> str:
        """A proposer's answer, with the markup a small model adds (quotes, bold, a trailing paragraph)."""
        if "The current instruction:" in prompt:
            return f' **"{PLANTED_INSTRUCTION}"**\n\nThis instruction helps the grader.'
        answers = {"lowest and the highest": f" {DECOYS[0]}", "what to ignore": " ``",
                   "must lower the score": " Judge " + "very " * 200 + "carefully.",
                   "short and concrete": f" '{DECOYS[0]}'", "point by point": f" {DECOYS[1]}"}
        return next((text for hint, text in answers.items() if hint in prompt), f" {DECOYS[2]}")

    def run(self, fn, items, *, progress: bool = False, batched: bool = False):
        """One item at a time (``batched`` is accepted as :class:`judgetune.lm.JudgeLM` takes it, and ignored)."""
        return run_items(fn, items, concurrency=1, progress=progress, description="planted")

    def close(self) -> None:
        pass


GATE_INSTRUCTION = ("Check the answer against the reference one fact at a time and score by how many of the "
                    "reference's facts it keeps.")
GATE_CRITERION = "Score how well the answer agrees with the reference, from 0 (not at all) to 5 (fully)."
GATE_ITEMS = 250  # items per testbed run: 60/20/20 by the default split, so 50 dev and 50 test items
# run settings of the gate testbeds: only the instruction is searched, among three (the criterion alone,
# which is the default, the criterion with the rubric's task wording, and GATE_INSTRUCTION)
GATE_SPEC = {"judge": "rubric", "fixed": {"reasoning": False, "scoring": "expected", "scale": "0-5", "k": 0},
             "criterion": GATE_CRITERION, "instructions": [GATE_INSTRUCTION], "n_trials": 10, "search_items": 30,
             "chunk": 30, "rescore": 4, "also": []}  # the planted trials only: no other family's default

# the gate's testbeds (benchmarks/tuning_gain.py measures their rates; tests run a few seeds): the LM kind,
# the items and the run settings beyond GATE_SPEC. "null" and "planted" at the benchmark's quick dev size (40
# items); "null-grouped": 20 questions of 12 answers, 4 of them in dev; "planted-150": 150 dev items;
# "planted-weak": a smaller boost (0.07) at a user's sizes.
TESTBEDS = {"null": {"kind": "null", "items": GATE_ITEMS, "spec": {"dev_items": 40}},
            "null-grouped": {"kind": "null", "items": 240, "per_group": 12, "spec": {}},
            "planted": {"kind": "planted", "items": GATE_ITEMS, "spec": {"dev_items": 40}},
            "planted-150": {"kind": "planted", "items": 750, "spec": {"dev_items": 150, "test_items": 100}},
            # a small planted gain at a user's sizes (60 search, 80 dev, 150 test items): the gate's power
            "planted-weak": {"kind": "planted", "items": 750, "boost": 0.07,
                             "spec": {"search_items": 60, "dev_items": 80, "test_items": 150}}}


class GateLM(PlantedLM):
    """Weight ``base`` on the true label for every instruction, ``base + boost`` when the system prompt
    carries :data:`GATE_INSTRUCTION` (``boost=0``: the null testbed). Noise is independent per prompt
    and per ``salt``."""

    def __init__(self, labels: dict[str, float], *, base: float = 0.3, boost: float = 0.0, salt: str = ""):
        super().__init__(labels, (), 0)
        self.base, self.boost, self.salt = base, boost, salt

    @classmethod
    def for_testbed(cls, examples: Sequence[Example], kind: str, seed: int, boost: float = 0.35) -> GateLM:
        """The LM of the ``"null"`` or ``"planted"`` testbed (``boost`` on the planted instruction) for run
        ``seed`` on these items."""
        if kind not in ("null", "planted"):
            raise ValueError(f"testbed must be 'null' or 'planted', got {kind!r}")
        number = {e.id: ITEM.search(e.answer).group(1) for e in examples}
        return cls({number[e.id]: e.label for e in examples}, boost=boost if kind == "planted" else 0.0,
                   salt=f"{kind}:{seed}:")

    def signal(self, messages: list[dict]) -> float:
        return self.base + self.boost * (GATE_INSTRUCTION in messages[0]["content"])



def gate_testbed(name: str, seed: int, folder) -> tuple[dict, GateLM]:
    """The inputs of one seeded run of the gate testbed ``name`` (of :data:`TESTBEDS`): its items written
    to ``folder``, the keyword arguments of its ``RunSpec``, and its LM."""
    from judgetune.datasets import write_examples

    bed = TESTBEDS[name]
    examples = planted_examples(bed["items"], seed=seed, per_group=bed.get("per_group"))
    data = f"{folder}/{name}{seed}.jsonl"
    write_examples(data, examples)
    spec = {"name": f"{name}{seed}", "data": data, "seed": seed, **GATE_SPEC, **bed["spec"]}
    return spec, GateLM.for_testbed(examples, bed["kind"], seed, **({"boost": bed["boost"]} if "boost" in bed else {}))
