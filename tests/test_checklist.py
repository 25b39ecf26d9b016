"""The checklist judge: questions parsed from its instruction, P(yes) read on the embedded model, a monotone
combiner fitted on labels, frozen into judge.json and reloaded to the same scores, and an item's answers
the same alone as in a batch. Mechanics only: SmolLM2 is no grader."""

from __future__ import annotations

import json

import numpy as np
import pytest

from judgetune import datasets
from judgetune.config import JudgeConfig
from judgetune.datasets import Example
from judgetune.judges import BuildContext, ChecklistError, ChecklistJudge, JudgeSpec, build, parse_checklist
from judgetune.tuning import ProposalTask, clean_checklist, proposal_prompt

TWO = "Does the answer say the same thing as the reference?\nIs the answer free of added claims?"


def test_a_checklist_is_one_question_per_line_and_a_statement_becomes_a_question():
    assert parse_checklist("1. Is it correct?\n\n- Is it complete?\n") == ["Is it correct?", "Is it complete?"]
    assert parse_checklist("The answer is polite.") == ["Does the answer meet this: The answer is polite?"]
    with pytest.raises(ChecklistError, match="at least one"):
        parse_checklist("\n \n")
    with pytest.raises(ChecklistError, match="at most 8"):
        parse_checklist("\n".join(f"Is {i} fine?" for i in range(9)))


def test_a_proposed_checklist_keeps_its_questions_only():
    text = " Does the answer name the cause?\n2. **Is it short?**\nNote: be fair.\n3) Is it short?\n[[ ## x"
    assert clean_checklist(text) == "Does the answer name the cause?\nIs it short?"
    task = ProposalTask("whether the summary is faithful", ("reference", "answer"), "a score", "checklist")
    prompt = proposal_prompt(task, None, "hint", current="Is it true?")[0]["content"]
    assert "yes/no questions" in prompt and "The current checklist:\nIs it true?" in prompt


@pytest.fixture(scope="module")
def msrpar(data_root):
    pairs = datasets.load("sts2012-msrpar", root=data_root)
    train = [e for e in pairs if e.meta["split"] == "train"]
    # four training pairs of spread labels; two test pairs
    train = sorted(train[:40], key=lambda e: e.label)[::10][:4]
    return train, [e for e in pairs if e.meta["split"] == "test"][:2]


@pytest.fixture(scope="module")
def fitted(embedded_lm, msrpar):
    train, _ = msrpar
    spec = JudgeSpec("checklist", {"combiner": "monotone", "alpha": 0.1}, instruction=TWO)
    return build(spec, BuildContext(lm=embedded_lm, demo_pool=train, label_range=(0.0, 5.0)))


def test_answers_are_probabilities_and_the_monotone_combiner_never_weighs_a_yes_down(fitted, msrpar):
    _, items = msrpar
    verdicts = fitted.judge_all(items)
    assert all(v.parsed for v in verdicts), [v.raw for v in verdicts]
    for v in verdicts:
        answers = list(v.detail["answers"].values())
        assert len(answers) == 2 and all(0.0 <= p <= 1.0 for p in answers)
    model = fitted.spec().fitted["model"]
    assert model["monotone"] and min(model["coef"]) >= 0.0
    assert fitted.spec().fitted["questions"] == parse_checklist(TWO)


def test_a_frozen_checklist_reloads_to_the_same_scores_and_its_dspy_state_is_the_checklist(fitted, msrpar,
                                                                                            embedded_lm):
    _, items = msrpar
    config = JudgeConfig.from_judge(fitted, lm={"spec": "local:smollm2"}, calibrator=None, label_range=(0.0, 5.0))
    loaded = JudgeConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert loaded.instruction == TWO and loaded.fitted["questions"] == parse_checklist(TWO)
    again = loaded.build_judge(embedded_lm)
    assert [v.score for v in again.judge_all(items)] == [v.score for v in fitted.judge_all(items)]
    assert dict(fitted.named_predictors())["predict"].signature.instructions == TWO
    state = fitted.dump_state()
    blank = ChecklistJudge(embedded_lm, instruction="quality")
    blank.load_state(json.loads(json.dumps(state)))
    assert blank.questions == parse_checklist(TWO)


def test_a_fitted_state_for_other_questions_is_refused(fitted, embedded_lm):
    state = fitted.spec().fitted
    with pytest.raises(ValueError, match="fitted: questions"):
        build(JudgeSpec("checklist", {"combiner": "monotone", "alpha": 0.1}, instruction="Is it correct?",
                        fitted=state), BuildContext(lm=embedded_lm, label_range=(0.0, 5.0)))


def test_an_items_answers_are_the_same_alone_and_in_a_batch(uncached_lm, msrpar):
    """Batch independence on a model without a cache: alone, the item is one prompt prefix; in a batch its
    prompts share a decode with other items' (the same numbers up to float rounding of batched decodes)."""
    _, items = msrpar
    judge = ChecklistJudge(uncached_lm, instruction_text="Is the answer free of added claims?", combiner="mean")
    judge.fit([])
    other = Example(id="x", answer="The stock market fell on Friday.", references=items[0].references, label=1.0)
    together = judge.judge_all([other, *items])
    alone = judge.judge_all(items[1:])
    a = np.asarray(list(together[2].detail["answers"].values()))
    b = np.asarray(list(alone[0].detail["answers"].values()))
    assert np.max(np.abs(a - b)) < 0.005


def test_a_pairwise_item_scores_answer_b_minus_answer(embedded_lm):
    judge = ChecklistJudge(embedded_lm, instruction_text="Is the answer correct?", combiner="mean")
    judge.fit([])
    item = Example(id="p", question="What is 2+2?", answer="5", answer_b="4", preference=1.0)
    verdict = judge.judge_all([item])[0]
    assert verdict.parsed and -1.0 <= verdict.score <= 1.0
    assert judge.range_for([item]) == (-1.0, 1.0)


def test_the_tuners_incumbent_checklist_fits_the_fields_the_items_carry():
    """The untuned default a tuned checklist is measured against is the one ``evaluate`` would build on this
    data: ``content`` needs references, so reference-free answers start from ``quality``."""
    from judgetune.datasets import Reference
    from judgetune.tuning import RunSpec, default_params, pool_seeds

    bare = [Example(id=str(i), question="q", answer=f"a {i}", label=i % 3) for i in range(6)]
    cited = [Example(id=str(i), question="q", answer=f"a {i}", references=(Reference("r"),), label=i % 3)
             for i in range(6)]
    spec = RunSpec(name="t", judge="checklist", data="unused")
    assert default_params(spec, demo_pool=bare, label_range=(0.0, 2.0))["instruction"] == "quality"
    assert default_params(spec, demo_pool=cited, label_range=(0.0, 2.0))["instruction"] == "content"
    texts = [text for _, text in pool_seeds(spec)]
    chosen = default_params(spec, demo_pool=bare, label_range=(0.0, 2.0), instructions=texts)["instruction"]
    assert texts[chosen] == ChecklistJudge.INSTRUCTIONS["quality"]
