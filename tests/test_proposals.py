"""Proposal mechanics: cleaning a small model's answer, refusing with reasons, the seed pool, the
proposer's prompt, and the cross-fitted trial MAE (the calibrator that will ship, out of fold)."""

from __future__ import annotations

import numpy as np
import pytest

from judgetune.calibration import cross_fitted, fit_calibrator
from judgetune.datasets import Example, Reference, group_folds
from judgetune.judges import Verdict
from judgetune.tuning import (
    Candidate,
    Miss,
    ProposalTask,
    clean_proposal,
    objectives,
    proposal_prompt,
    refusal,
    seed_instructions,
)


@pytest.mark.parametrize("raw, clean", [
    (' "Rate how close the two sentences are in meaning."', "Rate how close the two sentences are in meaning."),
    ("**Instruction:** Compare the facts of both sentences.\n\nThis helps.", "Compare the facts of both sentences."),
    ("Here is the new instruction: Score high when both say the same. Score low", "Score high when both say the same."),
    ("- Check each fact.\n- Ignore wording.", "Check each fact. Ignore wording."),
    ("Compare meaning. [[ ## score ## ]] 3", "Compare meaning."),
    ("  ``  ", ""),
])
def test_clean_proposal_leaves_one_plain_paragraph(raw, clean):
    assert clean_proposal(raw) == clean


def test_refusals_name_their_reason():
    pool = [Candidate(0, "Rate how close in meaning the answer is.", "generic:x")]
    assert refusal("", pool).startswith("empty")
    assert refusal("ok then", pool).startswith("empty")
    assert refusal("Judge " + "very " * 200, pool).startswith("too long")
    assert refusal("rate how close, in meaning, the answer is", pool) == "duplicate of instruction 0"
    assert refusal("Rate how far apart in meaning the answer is.", pool) is None


def test_the_pool_starts_from_the_criterion_and_keeps_generic_variants_for_data_without_one():
    generic = {"faithful": "Judge it.", "strict": "Judge it strictly."}
    seeds = seed_instructions("Same meaning: 5; unrelated: 0.", generic, ["Mine."], "Judge it.")
    assert [s for s, _ in seeds] == ["criterion", "criterion", "user"]
    assert seeds[0][1] == "Same meaning: 5; unrelated: 0." and seeds[1][1].endswith("Judge it.")
    assert [s for s, _ in seed_instructions(None, generic, [], "Judge it.")] == ["generic:faithful", "generic:strict"]


def test_the_proposer_prompt_shows_criterion_examples_and_misses():
    high = Example(id="h", answer="A cat sat.", references=(Reference("The cat sat."),), label=5.0)
    low = Example(id="l", answer="Stocks fell.", references=(Reference("The cat sat."),), label=0.0)

    task = ProposalTask("Same meaning scores 5.", ("reference", "answer"), "a score from 0 (worst) to 5 (best)")
    text = proposal_prompt(task, (high, low), "Keep it short.", current="Old one.",
                           misses=[Miss({"answer": "x"}, 1.0, 4.2)])[0]["content"]
    for part in ("Same meaning scores 5.", "Scored 5 (high)", "A cat sat.", "Scored 0 (low)", "Stocks fell.",
                 "The current instruction: Old one.", "people: 1, grader: 4.2 (too high)", "Keep it short."):
        assert part in text


def grouped_items(seed: int = 0):
    """Twelve questions of eight answers; each question shifts its answers' raw scores and labels alike,
    so a calibrator that saw a question's other answers knows its offset (an optimistic fold)."""
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"q{i}" for i in range(12)], 8)
    offset = rng.uniform(0, 4, 12).repeat(8)
    raw = offset + rng.normal(0, 0.05, 96)
    gold = np.clip(np.round(offset + rng.normal(0, 0.6, 96)), 0, 5)
    return raw, gold, groups


def test_folds_never_put_one_question_on_both_sides():
    _, _, groups = grouped_items()
    cv, keys = group_folds(len(groups), groups.tolist(), seed=3)
    tested = []
    for train, test in cv.split(np.zeros(len(keys)), groups=keys):
        assert not set(groups[train]) & set(groups[test])
        tested += test.tolist()
    assert sorted(tested) == list(range(len(groups)))  # every item held out exactly once


def test_the_search_objective_uses_the_calibrators_group_folds():
    raw, gold, groups = grouped_items()
    pred, kind, maes = cross_fitted(raw, gold, label_range=(0, 5), groups=groups.tolist(), seed=3)
    _, cv = fit_calibrator(raw, gold, label_range=(0, 5), groups=groups.tolist(), seed=3)
    assert maes == cv and kind == min(cv, key=cv.get)
    assert float(np.mean(np.abs(pred - gold))) == pytest.approx(cv[kind])
    # the trial objective on the same items, with their questions, gives the same MAE
    examples = [Example(id=f"a{i}", question=f"question {g}", answer=f"answer {i}", group=g, label=float(y))
                for i, (g, y) in enumerate(zip(groups, gold))]
    mae, _, info = objectives([Verdict(float(r)) for r in raw], examples, label_range=(0, 5), seed=3)
    assert mae == pytest.approx(cv[kind]) and info["calibrator"] == kind
    # item-wise folds leak each question's offset to the isotonic map: its MAE is lower, so the grouping is real
    _, _, by_item = cross_fitted(raw, gold, label_range=(0, 5), seed=3)
    assert by_item["isotonic"] < cv["isotonic"] - 0.05, (by_item, cv)
