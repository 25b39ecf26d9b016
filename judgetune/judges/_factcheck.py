"""Binary fact check (the iterative method of the Queryloop retrieval study), and its single-call
variants.

``iterative``: self-contained facts are extracted from a source text as a JSON list (schema-
constrained on an in-process model), then each fact is checked against the text under test and
scored by p("1"); the score is the mean over facts. ``binary`` / ``scale5``: one call that answers
0/1 or 1-5 for the whole text (with ``reasoning`` for the reasoning-first variants).

``direction`` says which texts: ``correctness`` (facts of the reference, checked in the answer),
``retrieval`` (facts of the reference, checked in the retrieved context), ``support`` (facts of the
answer, checked in the context: is the answer backed by its source).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from judgetune.datasets import Example
from judgetune.judges._base import LMJudge, nearest_label
from judgetune.judges._space import Choice, IntRange, Param
from judgetune.judges._verdict import Verdict, add_usage

DIRECTIONS = {"correctness": ("reference", "answer"), "retrieval": ("reference", "context"),
              "support": ("answer", "context")}
EXTRACT_INSTRUCTION = ("List the facts stated in the text as a JSON array of strings. Each fact is one short "
                       "sentence that can be understood on its own: replace pronouns with the names they stand for. "
                       "Do not add anything the text does not say.")


def parse_fact_list(text: str, *, max_facts: int) -> list[str]:
    """The facts in a generated JSON array of strings.

    Raises:
        ValueError: the text holds no JSON array of non-empty strings.
    """
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end < start:
        raise ValueError(f"no JSON array in {text[:200]!r}")
    try:
        facts = json.loads(text[start:end + 1], strict=False)  # llama.cpp's JSON grammar lets raw newlines into strings
    except json.JSONDecodeError as err:
        raise ValueError(f"invalid JSON array ({err.msg}) in {text[:200]!r}") from None
    if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
        raise ValueError(f"expected a JSON array of strings, found {text[:200]!r}")
    facts = list(dict.fromkeys(f.strip() for f in facts if f.strip()))  # small models repeat themselves
    if not facts:
        raise ValueError("the JSON array holds no facts")
    return facts[:max_facts]


MAX_FACT_CHARS = 200


def fact_list_schema(max_facts: int) -> dict:
    """A JSON array of 1..max_facts strings of bounded length, so a constrained answer always closes."""
    return {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": MAX_FACT_CHARS},
            "minItems": 1, "maxItems": max_facts}


class FactCheckJudge(LMJudge):
    kind = "factcheck"
    INSTRUCTIONS = {
        "faithful": "Does the text state the given fact, or something that clearly implies it? Answer 1 if it does "
                    "and 0 if it does not or contradicts it.",
        "entailment": "Decide whether the fact is entailed by the text. 1: entailed. 0: not entailed (missing, "
                      "unclear or contradicted).",
        "strict": "Answer 1 only if the text explicitly supports every part of the statement, including names, "
                  "numbers and dates; otherwise answer 0.",
        "reader": "Read the text carefully. Would a careful reader of this text alone know that the statement is "
                  "true? 1 for yes, 0 for no.",
    }
    MAX_FACTS = 12

    @classmethod
    def data_defaults(cls, examples, label_range):
        return {"direction": "correctness" if any(ex.references for ex in examples) else "support"}

    def prompt_fields(self) -> tuple[tuple[str, ...], str, str]:
        if self.params["mode"] == "iterative":  # a question per fact
            return ("text", "fact"), "supported", "1 or 0"
        return ("source", "text"), "verdict", "the share of the source's information that the text contains"

    @classmethod
    def space(cls) -> list[Param]:
        return [*cls.lm_space(), Choice("mode", ("iterative", "binary", "scale5"), "iterative"),
                Choice("direction", tuple(DIRECTIONS), "correctness"), IntRange("max_facts", 2, cls.MAX_FACTS, 8)]

    @property
    def score_range(self) -> tuple[float, float]:
        return (1.0, 5.0) if self.params["mode"] == "scale5" else (0.0, 1.0)

    def texts(self, example: Example) -> tuple[str, str] | None:
        """(source of the facts, text they are checked against), or None when the example lacks one."""
        source, target = DIRECTIONS[self.params["direction"]]

        def text(field: str) -> str | None:
            if field == "reference":
                return example.references[0].text if example.references else None
            if field == "context":
                return "\n".join(example.context) if example.context else None
            return example.answer

        return (text(source), text(target)) if text(source) and text(target) else None

    def extract_facts(self, source: str, *, question: str | None = None,
                      demos: Sequence[tuple[str, Sequence[str]]] = ()) -> tuple[list[str], dict]:
        """The facts of ``source`` and the tokens spent. Raises ValueError when the list is unreadable.

        ``question``, when given, is shown as what the text answers (so that "Yes, it does" yields a
        self-contained fact); ``demos`` are worked examples ``(text, facts)`` shown as earlier turns.
        """
        messages = [{"role": "system", "content": EXTRACT_INSTRUCTION}]
        for text, facts in demos:
            messages += [{"role": "user", "content": f"Text: {text}"},
                         {"role": "assistant", "content": json.dumps(list(facts), ensure_ascii=False)}]
        asked = f"Question the text answers: {question}\n\n" if question else ""
        messages.append({"role": "user", "content": f"{asked}Text: {source}"})
        max_facts = self.params["max_facts"]
        # a token holds at least one character: this budget always fits a schema-constrained answer
        budget = max_facts * (MAX_FACT_CHARS + 4) + 4
        answer = self.lm.generate(messages, max_tokens=budget, json_schema=fact_list_schema(max_facts))
        return parse_fact_list(answer.text, max_facts=max_facts), answer.usage

    def forward(self, example: Example) -> Verdict:
        texts = self.texts(example)
        if texts is None:
            return Verdict.failed(f"direction {self.params['direction']} needs "
                                  f"{' and '.join(DIRECTIONS[self.params['direction']])}; this example lacks one")
        source, target = texts
        if self.params["mode"] == "iterative":
            return self._iterative(source, target)
        labels, values = (["0", "1"], [0.0, 1.0]) if self.params["mode"] == "binary" else (
            ["1", "2", "3", "4", "5"], [1.0, 2.0, 3.0, 4.0, 5.0])
        demos = []
        for d in self.demos:
            demo_texts = self.texts(d)
            if demo_texts:
                label = nearest_label(self.demo_value(d, self.score_range), labels, values)
                demos.append({"source": demo_texts[0], "text": demo_texts[1], "verdict": label})
        description = ("1 if the text contains the information of the source, else 0" if self.params["mode"] == "binary"
                       else "1 (none of the source's information is in the text) to 5 (all of it is)")
        return self.ask({"source": source, "text": target}, "verdict", description, labels, values, demos)

    def check_fact(self, text: str, fact: str) -> Verdict:
        """Is ``fact`` supported by ``text``: ``distribution["1"]`` is p("1") renormalized over "1" and "0"
        (the score too, unless the judge's ``scoring`` is argmax)."""
        return self.ask({"text": text, "fact": fact}, "supported", "1 or 0", ["1", "0"], [1.0, 0.0])

    def _iterative(self, source: str, target: str) -> Verdict:
        try:
            facts, usage = self.extract_facts(source)
        except ValueError as err:
            return Verdict.failed(f"fact extraction: {err}")
        scores = []
        for fact in facts:
            verdict = self.check_fact(target, fact)
            usage = add_usage(usage, verdict.usage)
            if not verdict.parsed:
                return Verdict.failed(f"checking {fact!r}: {verdict.raw}", usage=usage, detail={"facts": facts})
            scores.append(verdict.score)
        return Verdict(sum(scores) / len(scores), {}, True, json.dumps(facts), usage,
                       {"facts": facts, "fact_scores": scores})
