"""Instruction proposals: a proposer LM writes candidate instructions for the judge, in rounds.

Each candidate comes from one bounded, greedy generation, grounded on the criterion and on labeled
training examples (a high-scored and a low-scored one side by side); after the first round the
prompt also shows the current best instruction and the items where its calibrated scores were
furthest from the human ones (reflection). Candidates of one round differ by the examples shown and
by a writing hint. The answer is cleaned (quotes, markup and labels stripped, first paragraph, one
line) and refused when empty, too long or a repeat of one in the pool (see ``_pool``).
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna

from judgetune.calibration import cross_fitted
from judgetune.datasets import Example
from judgetune.judges import judge_class
from judgetune.lm import JudgeLM, ServerError, load_lm
from judgetune.tuning._objective import lm_calls, ranked
from judgetune.tuning._pool import InstructionPool
from judgetune.tuning._space import prompted
from judgetune.tuning._spec import RunSpec
from judgetune.tuning._splits import Splits

log = logging.getLogger(__name__)

MAX_TOKENS = 120
STOP = ("\n\n", "[[", "<|im_end|>", "Example", "Examples:")
SNIPPET = 220  # characters of each example field shown to the proposer
HINTS = (
    "Say what the lowest and the highest scores mean.",
    "Tell the grader what to ignore, such as wording, length or style.",
    "Tell the grader which differences must lower the score.",
    "Keep it short and concrete, in plain words.",
    "Ask the grader to compare the content point by point.",
)


@dataclass(frozen=True)
class ProposalTask:
    """What the proposer is told about the judge: what is judged, the fields it reads, its answer."""

    criterion: str | None
    fields: tuple[str, ...]
    answer: str  # e.g. "a score from 0 (worst) to 5 (best)"
    form: str = "instruction"  # what the proposer writes: "instruction", or "checklist" (yes/no questions)


@dataclass(frozen=True)
class Miss:
    """One item the current best instruction got wrong: its text fields, the human and the judge's score."""

    fields: dict[str, str]
    human: float
    judged: float


def shown_fields(example: Example) -> dict[str, str]:
    """The text an example shows the proposer (question, best reference, answer), each cut short."""
    fields = {"question": example.question or "", "reference": example.references[0].text if example.references else "",
              "answer": example.answer}
    return {k: _short(v) for k, v in fields.items() if v}


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SNIPPET else text[:SNIPPET].rsplit(" ", 1)[0] + " ..."


def contrast_pair(examples: Sequence[Example], *, seed: int) -> tuple[Example, Example] | None:
    """A seeded (high, low) pair: one example from the top third of the labels, one from the bottom third."""
    labeled = sorted((e for e in examples if e.judgment is not None), key=lambda e: e.judgment)
    if len(labeled) < 2:
        return None
    third = max(1, len(labeled) // 3)
    low, high = labeled[:third], labeled[-third:]
    rng = random.Random(seed)
    pair = (rng.choice(high), rng.choice(low))
    return pair if pair[0].judgment > pair[1].judgment else None


def _block(fields: dict[str, str]) -> str:
    return "\n".join(f"  {name}: {text}" for name, text in fields.items())


def proposal_prompt(task: ProposalTask, pair: tuple[Example, Example] | None, hint: str, *,
                    current: str | None = None, misses: Sequence[Miss] = ()) -> list[dict[str, str]]:
    """The proposer's chat messages for one candidate."""
    what = task.criterion.strip() if task.criterion else "how good the answer is"
    checklist = task.form == "checklist"
    lines = ["You write a checklist for a grader." if checklist else "You write the instruction for a grader.",
             f"The grader reads: {', '.join(task.fields)}. It answers with "
             + ("yes or no to each question of the checklist." if checklist else f"{task.answer}."),
             f"What the grader must judge: {what}"]
    if pair is not None:
        high, low = pair
        lines += ["", "Two items scored by people:",
                  f"Scored {high.judgment:g} (high):", _block(shown_fields(high)),
                  f"Scored {low.judgment:g} (low):", _block(shown_fields(low))]
    if current is not None:
        lines += ["", "The current checklist:\n" + current if checklist else f"The current instruction: {current}"]
        if misses:
            lines.append("With it the grader was furthest from the people on these items:")
            for miss in misses:
                direction = "too high" if miss.judged > miss.human else "too low"
                lines += [_block(miss.fields), f"  people: {miss.human:g}, grader: {miss.judged:.1f} ({direction})"]
            lines.append(f"Write a better {'checklist' if checklist else 'instruction'} that avoids these mistakes.")
    if checklist:
        lines += ["", "Write three to five yes/no questions about the answer, one per line, each ending with a question "
                  "mark. A good answer must get yes to every question. Reply with the questions only."]
    else:
        lines += ["", hint, "Write one new instruction for the grader in two or three sentences. "
                  "Reply with the instruction only."]
    return [{"role": "user", "content": "\n".join(lines)}]


REFUSALS = ("empty", "too long", "duplicate", "error")
LABEL = re.compile(r"^\s*(new\s+|improved\s+|better\s+)?(instruction|instructions|prompt)\s*:\s*", re.IGNORECASE)
QUOTES = "\"'`“”‘’«»"


def clean_proposal(text: str) -> str:
    """One plain paragraph: markup, labels and enclosing quotes gone, cut at a field marker and at
    the last full sentence when the generation stopped mid-sentence."""
    text = text.split("[[", 1)[0].strip()
    text = re.sub(r"^\s*(here is|here's)[^:\n]*:\s*", "", text, flags=re.IGNORECASE)
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    text = paragraphs[0] if paragraphs else ""
    text = LABEL.sub("", text)
    text = re.sub(r"(^|\n)\s*(#+|[-*•]|\d+[.)])\s+", " ", text)  # headings, bullets, numbering
    text = re.sub(r"[*_`#]+", "", text)  # emphasis and code marks
    text = " ".join(text.split())
    text = LABEL.sub("", text).strip().strip(QUOTES).strip()
    if text and text[-1] not in ".!?":
        end = max(text.rfind(". "), text.rfind("? "), text.rfind("! "))
        text = text[:end + 1] if end > 0 else text
    return text


def clean_checklist(text: str) -> str:
    """The questions of a proposed checklist, one per line: lines ending in a question mark, numbering,
    bullets and markup gone (at most 8)."""
    questions = []
    for line in text.split("[[", 1)[0].splitlines():
        line = re.sub(r"^\s*(?:[-*•]|\d+[.)]|q\d+[.:)])\s*", "", line, flags=re.IGNORECASE)
        line = " ".join(re.sub(r"[*_`#]+", "", line).split()).strip(QUOTES).strip()
        if line.endswith("?") and len(line) > 8 and line not in questions:
            questions.append(line)
    return "\n".join(questions[:8])


def propose_round(pool, lm, *, round: int, n: int, task: ProposalTask, examples: Sequence[Example],
                  current: str | None = None, misses: Sequence[Miss] = (), seed: int = 0) -> dict[str, Any]:
    """Ask ``lm`` for ``n`` candidates, add the accepted ones to ``pool``; the round's record (JSON).

    A generation that fails is refused with its error; nothing is dropped silently.
    """
    source = "reflection" if current is not None else "proposed"
    accepted, refused = [], []
    for i in range(n):
        pair = contrast_pair(examples, seed=seed * 1000 + round * 100 + i)
        messages = proposal_prompt(task, pair, HINTS[(round + i) % len(HINTS)], current=current, misses=misses)
        try:
            checklist = task.form == "checklist"
            start = ("Questions:\n1." if checklist else "Instruction:") if lm.in_process else ""
            generation = lm.generate(messages, prefix=start, max_tokens=MAX_TOKENS * (2 if checklist else 1),
                                     stop=STOP)
        except ServerError:  # a refused key or an unreachable proposer stops the run, said once
            raise
        except Exception as err:  # noqa: BLE001 - a failed call is a refused proposal, with its reason
            refused.append({"text": "", "reason": f"error: {err}", "raw": ""})
            continue
        text = clean_checklist(generation.text) if checklist else clean_proposal(generation.text)
        added = pool.add(text, source=source, round=round)
        if isinstance(added, str):
            refused.append({"text": text, "reason": added, "raw": generation.text[:400]})
        else:
            accepted.append(added.id)
    counts: dict[str, int] = {}
    for r in refused:
        kind = next((k for k in REFUSALS if r["reason"].startswith(k)), "other")
        counts[kind] = counts.get(kind, 0) + 1
    return {"round": round, "source": source, "asked": n, "accepted": accepted, "refused": refused,
            "refused_counts": counts}


# the proposal stage of a run (the functions above are its parts)

def proposal_task(spec: RunSpec, splits: Splits) -> ProposalTask:
    """What the proposer is told about this run's judge."""
    fields = ["question"] if any(e.question for e in splits.search) else []
    fields += ["references ranked best first"] if spec.judge == "linkage" else (
        ["reference"] if any(e.references for e in splits.search) else [])
    low, high = splits.label_range
    answer = ("the position the answer takes among the references" if spec.judge == "linkage"
              else f"a score from {low:g} (worst) to {high:g} (best)")
    return ProposalTask(spec.criterion, (*fields, "answer"), answer,
                        getattr(judge_class(spec.judge), "PROPOSES", "instruction"))


def best_misses(trial: optuna.trial.FrozenTrial, splits: Splits, *, count: int = 3, seed: int = 0) -> list[Miss]:
    """The search items where ``trial``'s cross-fitted calibrated scores were furthest from the human ones."""
    raw = trial.user_attrs.get("raw_scores") or []
    kept = [(r, e) for r, e in zip(raw, splits.search) if r is not None]
    if len(kept) < 4:
        return []
    gold = np.asarray([e.judgment for _, e in kept], dtype=float)
    pred, _, _ = cross_fitted([r for r, _ in kept], gold, label_range=splits.label_range,
                              groups=[e.group_key for _, e in kept], seed=seed)
    worst = np.argsort(-np.abs(pred - gold), kind="stable")[:count]
    return [Miss(shown_fields(kept[i][1]), float(gold[i]), float(pred[i])) for i in worst]


def proposal_round(study: optuna.Study, spec: RunSpec, splits: Splits, proposer: JudgeLM, r: int) -> dict[str, Any]:
    """Round ``r``: candidates grounded on the criterion and training examples, and from round 1 on the
    current best's misses; each accepted one is queued as a trial with the best trial's other settings."""
    pool = InstructionPool(study)
    best = None
    if r > 0:
        complete = [t for t in study.best_trials if "instruction" in t.params]
        best = ranked(complete, "spearman", 1)[0] if complete else None
    current = pool.texts()[best.params["instruction"]] if best is not None else None
    calls0 = lm_calls(proposer)
    record = propose_round(pool, proposer, round=r, n=spec.proposals, task=proposal_task(spec, splits),
                           examples=splits.demo_pool, current=current,
                           misses=best_misses(best, splits, seed=spec.seed) if best is not None else (),
                           seed=spec.seed)
    record.update(lm_calls=lm_calls(proposer) - calls0, based_on_trial=best.number if best is not None else None)
    pool.record_round(record)
    if best is not None:  # as many as the trials left allow (a queued trial past the budget would never run)
        finished = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,
                                                                optuna.trial.TrialState.PRUNED)))
        for new_id in record["accepted"][:max(0, spec.n_trials - finished)]:
            study.enqueue_trial({**best.params, "instruction": new_id}, skip_if_exists=True)
    log.info("proposal round %d: %d accepted, refused %s", r, len(record["accepted"]), record["refused_counts"])
    return record


def load_proposer(spec: RunSpec, lm: JudgeLM | None) -> JudgeLM | None:
    """The proposer LM: the judge's own unless ``spec.proposer`` names another (None: no proposals)."""
    if not spec.proposals or not prompted(spec.judge):
        return None
    if spec.proposer is None or spec.proposer == spec.lm:
        return lm
    return load_lm(spec.proposer, api_base=spec.api_base)
