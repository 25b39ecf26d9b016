"""Labels parsed from generated answers: the ``sampled`` and ``parsed`` scoring modes.

``sampled`` asks for n answers at a temperature (each with its own seed, so each is cached and
reproducible), parses the label after the output field's ``[[ ## <output> ## ]]`` marker in each,
and scores the add-alpha smoothed empirical distribution of the parsed labels (G-Eval's answer to
models without log-probabilities was n=20 samples at temperature 1). ``parsed`` is one greedy
answer. An answer whose label cannot be parsed is never a number: a judgment none of whose answers
parse fails with their text. On an in-process model the answer is prefilled up to the marker (or
up to the reasoning marker, with reasoning-first), as in the ``logprobs`` mode.
"""

from __future__ import annotations

from collections.abc import Sequence

from judgetune.judges._verdict import Verdict, add_usage

ALPHA = 0.5  # add-alpha smoothing of sampled label counts (Jeffreys' prior); 0 for one parsed answer
ANSWER_TOKENS = 24  # room for the marker, a label and the closing marker
END = "[[ ## completed ## ]]"


def _marker(field: str) -> str:
    return f"[[ ## {field} ## ]]"


def parse_label(text: str, output: str, labels: Sequence[str]) -> str | None:
    """The label an answer gives after ``[[ ## output ## ]]`` (or, with no marker, the whole answer).

    Case and blanks are ignored and the longest label that starts the answer wins, if the character
    after it is no letter or digit ("3." and "3/5" read 3; "10" is not read as "1"). None when no label
    starts it.

    >>> parse_label("[[ ## score ## ]]\\n4\\n\\n[[ ## completed ## ]]", "score", ["1", "2", "3", "4", "5"])
    '4'
    >>> parse_label("I think it is good", "score", ["1", "2"]) is None
    True
    """
    mark = _marker(output)
    answer = text.split(mark, 1)[1] if mark in text else text
    answer = answer.split("[[ ##", 1)[0].strip().lower()
    for label in sorted(labels, key=len, reverse=True):
        if answer.startswith(label.lower()):
            rest = answer[len(label):]
            if not rest or not rest[0].isalnum():
                return label
    return None


def _one_answer(lm, messages: list[dict[str, str]], output: str, *, reasoning: bool, max_reasoning_tokens: int,
                temperature: float, seed: int | None):
    """One answer as text that includes the output marker when the model wrote it (or it was prefilled)."""
    budget = (max_reasoning_tokens if reasoning else 0) + ANSWER_TOKENS
    if lm.in_process:
        prefix = f"{_marker('reasoning')}\n" if reasoning else f"{_marker(output)}\n"
        answer = lm.generate(messages, prefix=prefix, max_tokens=budget, stop=(END,) if reasoning else ("\n", "[[ ##"),
                             temperature=temperature, seed=seed)
        return prefix + answer.text, answer.usage
    answer = lm.generate(messages, max_tokens=budget, stop=(END,), temperature=temperature, seed=seed)
    return answer.text, answer.usage


def sampled_choice(lm, messages: list[dict[str, str]], output: str, labels: Sequence[str], values: Sequence[float], *,
                   n: int, temperature: float, alpha: float = ALPHA, reasoning: bool = False,
                   max_reasoning_tokens: int = 160, scoring: str = "expected") -> Verdict:
    """n answers (seeds 0..n-1) at ``temperature``; their labels' smoothed distribution and its expected
    value (``scoring='argmax'``: the most frequent label's value). ``usage`` counts every call and token.

    The distribution is p(label) = (count + alpha) / (parsed + alpha * labels), over the answers
    whose label parsed; ``detail`` keeps the counts, the number of answers and of parsed ones, and alpha.
    A failed LM call fails the whole judgment (it raises): no item is scored on fewer answers than asked.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    counts = dict.fromkeys(labels, 0)
    usage: dict[str, int] = {}
    texts = []
    for seed in range(n):
        text, spent = _one_answer(lm, messages, output, reasoning=reasoning, max_reasoning_tokens=max_reasoning_tokens,
                                  temperature=temperature, seed=seed if temperature > 0 else None)
        usage = add_usage(usage, spent, {"calls": 1})
        texts.append(text)
        label = parse_label(text, output, labels)
        if label is not None:
            counts[label] += 1
    parsed = sum(counts.values())
    detail = {"counts": counts, "answers": n, "parsed_answers": parsed, "alpha": alpha, "temperature": temperature}
    if parsed == 0:
        shown = " | ".join(repr(t[:120]) for t in texts[:3])
        return Verdict.failed(f"no label of {list(labels)} after {_marker(output)} in {n} answer(s): {shown}",
                              usage=usage, detail=detail)
    total = parsed + alpha * len(labels)
    probs = {label: (counts[label] + alpha) / total for label in labels}
    if scoring == "argmax":
        score = values[max(range(len(labels)), key=lambda i: (counts[labels[i]], -i))]
    else:
        score = sum(probs[label] * value for label, value in zip(labels, values))
    return Verdict(float(score), probs, True, texts[0], usage, detail)
