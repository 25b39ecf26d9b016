"""Every registered judge kind goes through the one builder and survives freezing: build, judge real
examples, freeze to a JudgeConfig, JSON round trip, reload, score again: identical scores. LM kinds
run on the embedded model (two items each), and their DSPy state is the prompt the config holds."""

from __future__ import annotations

import json

import pytest

from judgetune import datasets
from judgetune.config import JudgeConfig
from judgetune.judges import KINDS, SIGNALS, BuildContext, JudgeSpec, build, draw_references, judge_class, member_record

MINILM_ONLY = {f"use_{name}": "mpnet" not in name for name in SIGNALS}
# kind -> (data set, settings): settings keep each kind quick while exercising demos and references
SETTINGS = {
    "factcheck": ("msrpar", {"mode": "binary", "k": 1}),
    "rubric": ("msrpar", {"k": 2}),
    "correctness": ("msrpar", {"k": 1}),
    "pairwise": ("llmbar", {"k": 1, "swap": True}),
    "linkage": ("trec", {"k": 1, "generate": False}),
    "likelihood": ("msrpar", {"k": 1, "instruction": "respond", "direction": "both"}),
    "embedding": ("msrpar", {}), "rouge1": ("msrpar", {}), "rouge2": ("msrpar", {}), "rougeL": ("msrpar", {}),
    "bleu": ("msrpar", {}),
    "bm25": ("trec", {}), "overlap": ("trec", {}), "length": ("trec", {}), "refsim": ("trec", {}),
    "hybrid": ("trec", MINILM_ONLY),
    "checklist": ("msrpar", {"combiner": "mean"}),  # a fitted combiner: tests/test_checklist.py
    "panel": ("msrpar", {}),  # made from members (here two signals): tests/test_panel.py has an LM member
}


def _spec(kind: str, params: dict, train, label_range) -> JudgeSpec:
    """The kind's spec; a panel's is its members' (built on the training data), with made-up centres."""
    if kind != "panel":
        return JudgeSpec(kind, params, seed=3)
    members = [member_record(build(JudgeSpec(k, {}), BuildContext(demo_pool=train, label_range=label_range)), 0.3, 0.2)
               for k in ("rouge1", "bleu")]
    return JudgeSpec(kind, params, fitted={"members": members, "label_range": list(label_range)}, seed=3)


@pytest.fixture(scope="module")
def lm(embedded_lm):
    return embedded_lm


@pytest.fixture(scope="module")
def data(data_root):
    """(train, items, label range) per data set: a few items to judge, training examples for demos and fits."""
    msrpar = datasets.load("sts2012-msrpar", root=data_root)
    llmbar = datasets.load("llmbar-natural", root=data_root)
    trec = datasets.load("linkage-trec-dl-nf", root=data_root)
    groups = sorted({e.group_key for e in trec})
    # LINKAGE's protocol: each candidate carries its question's drawn references (what refsim, linkage read)
    trec = draw_references([e for e in trec if e.group_key in groups[:12]], per_grade=1, seed=0)
    qualified = sorted(trec.qualified)
    trec_train = datasets.sample_per_group([e for e in trec.candidates if e.group_key in qualified[:6]], 8, seed=0)
    trec_items = [e for e in trec.candidates if e.group_key == qualified[6]][:6]
    return {"msrpar": ([e for e in msrpar if e.meta["split"] == "train"][:40],
                       [e for e in msrpar if e.meta["split"] == "test"][:2], (0.0, 5.0)),
            "llmbar": (llmbar[2:12], llmbar[:2], (-1.0, 1.0)),
            "trec": (trec_train, trec_items, (0.0, 3.0))}


def test_every_registered_kind_is_covered():
    assert set(SETTINGS) == set(KINDS)


# pairwise: two long answers in both orders; checklist: four questions per item (tests/test_checklist.py: two)
@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.slow) if k in ("pairwise", "checklist") else k
                                  for k in KINDS])
def test_build_judge_freeze_reload_scores_identically(kind, lm, data):
    name, params = SETTINGS[kind]
    train, items, label_range = data[name]
    needs_lm = judge_class(kind).needs_lm
    items = items[:2] if needs_lm else items
    context = BuildContext(lm=lm if needs_lm else None, demo_pool=train, label_range=label_range)
    judge = build(_spec(kind, params, train, label_range), context)
    verdicts = judge.judge_all(items)
    assert any(v.parsed for v in verdicts), [v.raw for v in verdicts]

    config = JudgeConfig.from_judge(judge, lm={"spec": "local:smollm2"} if needs_lm else None, calibrator=None,
                                    label_range=label_range, seed=3)
    loaded = JudgeConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    again = loaded.build_judge(context.lm)
    assert again.spec() == judge.spec()
    assert [v.score for v in again.judge_all(items)] == [v.score for v in verdicts]

    if needs_lm:  # the DSPy state is the prompt the config holds, and loading it restores the judge
        predictors = dict(judge.named_predictors())
        assert predictors, f"{kind} holds no dspy.Predict"
        state = judge.dump_state()
        prompt = state["predict"]
        assert prompt["signature"]["instructions"] == config.instruction
        assert prompt["demos"] == config.demos and len(config.demos) == params.get("k", 0)
        no_demos = {"k": 0} if "k" in {p.name for p in judge_class(kind).space()} else {}
        blank = build(JudgeSpec(kind, {**params, **no_demos, "instruction": list(type(judge).INSTRUCTIONS)[-1]}, seed=3),
                      BuildContext(lm=lm, demo_pool=train, label_range=label_range))
        assert blank.instruction != judge.instruction and not blank.demos
        blank.load_state(json.loads(json.dumps(state)))
        assert blank.instruction == judge.instruction and blank.demos == judge.demos
        assert [v.score for v in blank.judge_all(items)] == [v.score for v in verdicts]
