"""judgetune judges as DSPy citizens: a frozen judge is the metric a DSPy optimizer compiles a user's
program against, on the embedded model."""

from __future__ import annotations

import dspy
import pytest

from judgetune import FrozenJudge, datasets
from judgetune.config import JudgeConfig
from judgetune.judges import BuildContext, JudgeSpec, build
from judgetune.lm import PrefillChatAdapter


@pytest.fixture(scope="module")
def lm(embedded_lm):
    return embedded_lm


@pytest.mark.slow
def test_bootstrap_few_shot_keeps_the_demos_a_frozen_judge_passes(lm, data_root):
    pairs = [e for e in datasets.load("sts2012-msrpar", root=data_root) if e.meta["split"] == "train"][:4]
    judge = build(JudgeSpec("rubric", {"k": 0}), BuildContext(lm=lm, label_range=(0.0, 5.0)))
    frozen = FrozenJudge(JudgeConfig.from_judge(judge, lm={"spec": "local:smollm2"}, calibrator=None,
                                                label_range=(0.0, 5.0)), lm)
    metric = frozen.as_dspy_metric(answer="paraphrase", reference="sentence")
    trainset = [dspy.Example(sentence=e.references[0].text, paraphrase=e.answer).with_inputs("sentence") for e in pairs]
    program = dspy.Predict("sentence -> paraphrase", max_tokens=40)
    with dspy.context(lm=lm.dspy_lm, adapter=PrefillChatAdapter()):
        outputs = [program(sentence=ex.sentence).paraphrase for ex in trainset]
        values = [metric(ex, dspy.Prediction(paraphrase=out)) for ex, out in zip(trainset, outputs)]
        assert values[0] == pytest.approx(frozen.score(answer=outputs[0], reference=trainset[0].sentence) / 5)
        assert len(set(values)) > 1 and all(0 <= v <= 1 for v in values)
        threshold = sorted(values)[len(values) // 2]
        optimizer = dspy.BootstrapFewShot(metric=metric, metric_threshold=threshold, max_bootstrapped_demos=4,
                                          max_labeled_demos=0, max_rounds=1)
        compiled = optimizer.compile(program, trainset=trainset)
    kept = [(ex.sentence, out) for ex, out, v in zip(trainset, outputs, values) if v >= threshold]
    assert 0 < len(kept) < len(trainset)
    assert [(d.sentence, d.paraphrase) for d in compiled.demos] == kept
