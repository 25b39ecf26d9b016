"""Frozen means frozen: a frozen judge's score of an item is a function of its frozen state and that item
alone. For every registered kind (read from the live registry, so a new kind is covered at once), an
item's score is identical alone, in a batch, in a shuffled batch, and in a batch whose items carry no
labels. LM kinds run on the embedded model, on few items (answers are cached)."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from judgetune import FrozenJudge, datasets
from judgetune.config import JudgeConfig
from judgetune.datasets import Example, Reference
from judgetune.judges import KINDS, SIGNALS, JudgeSpec, build, judge_class, make_judge, member_record

TOPICS = [("How do you boil an egg?", ["Put the egg in boiling water for eight minutes, then cool it.",
                                      "Boil it in water for a while.", "Eggs come from hens.",
                                      "The stock market fell on Friday."]),
          ("Why is the sky blue?", ["Air scatters short blue wavelengths of sunlight more than red ones.",
                                    "Because of the way air scatters light.", "The sky is sometimes grey.",
                                    "I like to eat pasta."]),
          ("What does a thermometer measure?", ["It measures temperature, how hot or cold something is.",
                                                "Heat, more or less.", "It is made of glass.",
                                                "Trains run on rails."])]


def _items(prefix: str) -> list[Example]:
    """Per topic, each answer graded 3..0 and carrying the topic's graded references (its own list)."""
    out = []
    for t, (question, answers) in enumerate(TOPICS):
        refs = tuple(Reference(f"{a} (reference)", float(3 - g)) for g, a in enumerate(answers))
        for g, answer in enumerate(answers):
            out.append(Example(id=f"{prefix}{t}-{g}", question=question, answer=answer, references=refs,
                               label=float(3 - g), group=f"{prefix}{t}"))
    return out


def _kinds():
    """Every kind; those that need an LM marked ``model``, and the pairwise judge (two long answers, both
    orders) and the checklist judge (four questions per item; tests/test_checklist.py covers it fast)
    ``slow`` too."""
    return [pytest.param(kind, marks=[pytest.mark.model, *([pytest.mark.slow] if kind in ("pairwise", "checklist")
                                                           else [])])
            if judge_class(kind).needs_lm_with({}) else kind for kind in KINDS]


@pytest.mark.parametrize("kind", _kinds())
def test_an_items_score_is_the_same_alone_in_any_batch_and_without_labels(kind, request):
    lm = request.getfixturevalue("embedded_lm") if judge_class(kind).needs_lm_with({}) else None
    train = _items("train")
    params = {f"use_{n}": False for n in SIGNALS if "mpnet" in n} if kind == "hybrid" else {}
    if kind == "checklist":  # the fitted combiner's batch independence: tests/test_checklist.py
        params = {"combiner": "mean"}
    if kind == "panel":  # made by the tuner from judges it scored: here two signals, with made-up centres
        members = [member_record(make_judge(k, train=train, label_range=(0.0, 3.0)), 0.3, 0.2)
                   for k in ("rouge1", "length")]
        judge = build(JudgeSpec("panel", {}, fitted={"members": members, "label_range": [0.0, 3.0]}))
    else:
        judge = make_judge(kind, lm, train=train, label_range=(0.0, 3.0), params=params, seed=1)
    config = JudgeConfig.from_dict(json.loads(json.dumps(
        JudgeConfig.from_judge(judge, lm={"spec": "local:smollm2"} if lm else None, calibrator=None,
                               label_range=(0.0, 3.0)).to_dict())))
    frozen = FrozenJudge(config, lm=lm)
    items = _items("test")
    if lm is not None:  # a few items keep the LM kinds fast
        items = [items[0], items[5], items[10]]
    target = items[1]
    others = [e for e in items if e.id != target.id]
    shuffled = [*others, target]
    random.Random(3).shuffle(shuffled)
    unlabeled = [replace(e, label=None) for e in items]

    def score_of(batch: list[Example]) -> float | None:
        return next(s.raw_score for s in frozen.score_many(batch) if s.id == target.id)

    alone = score_of([target])
    assert alone is not None, f"{kind} failed on the item"
    assert score_of(items) == alone
    assert score_of(shuffled) == alone
    assert score_of(unlabeled) == alone
    calibrated = {s.id: s.score for s in frozen.score_many(items)}
    assert frozen.score_many([target])[0].score == calibrated[target.id]


def test_the_demos_frozen_hybrid_scores_a_pair_the_same_alone_and_in_a_group(data_root):
    """A hybrid as the demo freezes it (normalization global, BM25 on), fitted on a few MSRpar pairs."""
    msrpar = [e for e in datasets.load("sts2012-msrpar", root=data_root) if e.meta["split"] == "train"][:30]
    params = {f"use_{n}": "mpnet" not in n for n in SIGNALS}
    judge = make_judge("hybrid", train=msrpar, label_range=(0.0, 5.0), params=params)
    assert judge.params["normalization"] == "global" and "bm25" in judge.signals
    config = JudgeConfig.from_judge(judge, lm=None, calibrator=None, label_range=(0.0, 5.0))
    frozen = FrozenJudge(JudgeConfig.from_dict(json.loads(json.dumps(config.to_dict()))))
    alone = frozen.score(answer="The cat sat on the mat.", reference="A cat was sitting on the mat.")
    pairs = [("The cat sat on the mat.", "A cat was sitting on the mat."),
             ("Stocks fell sharply on Monday.", "Shares dropped steeply on Monday."),
             ("The meeting was moved to Tuesday.", "It rained all weekend in the city."),
             ("He sold his car last year.", "Last year he sold the car he owned.")]
    group = [{"id": str(i), "answer": a, "reference": r, "group": "g"} for i, (a, r) in enumerate(pairs)]
    together = frozen.score_many(group)
    # the same to float precision: a batch of texts meets the encoder's matrix products in another order on some
    # CPUs (1e-15 apart here), never another score
    assert together[0].score == pytest.approx(alone, rel=1e-12, abs=1e-12)
    assert frozen.score_many(list(reversed(group)))[-1].score == pytest.approx(alone, rel=1e-12, abs=1e-12)
    assert len({round(s.score, 6) for s in together}) == 4  # the items still score differently


def test_an_uncalibrated_judges_score_stays_on_the_human_scale():
    """Without a calibrator a raw score is mapped linearly from the judge's range; a raw score past that range (a
    length judge on a 100,000-word answer) is the scale's end, never a 5.6 on a 1-5 scale."""
    config = JudgeConfig(judge="length", params={}, lm=None, instruction=None, demos=[], calibrator=None,
                         label_range=[1.0, 5.0])
    frozen = FrozenJudge(config)
    assert frozen.score(answer="word " * 100_000) == 5.0
    assert 1.0 < frozen.score(answer="a few words here") < 5.0


@pytest.mark.parametrize("change, message", [
    ({"seed": "3"}, "seed: input should be a valid integer"),
    ({"seed": True}, "seed: input should be a valid integer"),
    ({"label_range": [0, "5"]}, r"label_range\[1\]: input should be a valid number"),
    ({"instruction": 3}, "instruction: input should be a valid string"),
    ({"params": {"target": "question", "colour": 2}}, "params.colour: unknown setting of judge overlap; known: target"),
    ({"params": {"target": 1}}, "target must be one of"),
    ({"protocol": "siblings"}, "protocol: input should be 'group' or 'linkage'"),
    ({"judge": "nope"}, "judge: expected one of"),
    ({"schema_version": True}, "schema_version: expected the integer 1, found true"),
    ({"schema_version": 1.0}, "schema_version: expected the integer 1, found 1.0"),
    ({"lm": {"spec": "openai/m", "label_position": "sideways"}}, "lm.label_position: input should be 'completions'"),
    ({"lm": {"spec": "openai/m", "label_position": "completions"}}, "lm.chat_template: expected the template's"),
    ({"lm": {"spec": "openai/m", "label_position": "prefill", "chat_template": {"source": "local:smollm2",
                                                                              "sha256": "0" * 64}}},
     "lm.chat_template: expected the template's .* only then"),
    ({"lm": {"spec": "openai/m", "label_position": "completions", "chat_template": {"source": "x", "sha256": "abc"}}},
     "lm.chat_template.sha256: string should match"),
])
def test_judge_json_is_one_strict_schema(change, message):
    """A value of the wrong JSON type is refused, never coerced; an unknown setting is refused by name."""
    from judgetune.config import ConfigError

    judge = make_judge("overlap", train=[], label_range=(0.0, 5.0))
    data = JudgeConfig.from_judge(judge, lm=None, calibrator=None, label_range=(0.0, 5.0)).to_dict()
    assert JudgeConfig.from_dict(json.loads(json.dumps(data))).to_dict() == data
    with pytest.raises(ConfigError, match=message):
        JudgeConfig.from_dict({**data, **change})


@pytest.mark.parametrize("value, found", [("1", "'1'"), (None, "null")])
def test_a_schema_version_of_another_type_is_said_once(tmp_path, run_cli, value, found):
    """``"schema_version": "1"`` (or null) is one problem, said in one line (the strict check and the schema's
    Literal[1] both refuse it; the field is named once)."""
    judge = make_judge("overlap", train=[], label_range=(0.0, 5.0))
    data = JudgeConfig.from_judge(judge, lm=None, calibrator=None, label_range=(0.0, 5.0)).to_dict()
    path = tmp_path / "judge.json"
    path.write_text(json.dumps({**data, "schema_version": value}))
    code, _, err = run_cli(["score", "--config", str(path), "--data", str(tmp_path / "d.jsonl"),
                            "--out", str(tmp_path / "o.jsonl")])
    assert code == 2
    assert err.splitlines() == [f"judgetune: error: {path}: schema_version: expected the integer 1, found {found}"]


def test_several_problems_of_a_judge_json_are_headed_as_the_judge_configs(tmp_path, run_cli):
    judge = make_judge("overlap", train=[], label_range=(0.0, 5.0))
    data = JudgeConfig.from_judge(judge, lm=None, calibrator=None, label_range=(0.0, 5.0)).to_dict()
    path = tmp_path / "judge.json"
    path.write_text(json.dumps({**data, "label_range": ["a", "b"]}))
    code, _, err = run_cli(["score", "--config", str(path), "--data", str(tmp_path / "d.jsonl"),
                            "--out", str(tmp_path / "o.jsonl")])
    assert code == 2
    assert err.splitlines()[0] == "judgetune: error: 2 problem(s) in the judge config:"
    assert len(err.splitlines()) == 3 and all("label_range[" in line for line in err.splitlines()[1:])


def test_a_kind_registered_later_loads_from_judge_json(monkeypatch):
    """``KINDS`` is read from the registry at every use, so a kind added with ``register`` also loads."""
    from judgetune.judges import KINDS, LengthJudge, _registry, register

    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))

    class WordsJudge(LengthJudge):
        kind = "words"

    register("words", WordsJudge)
    assert "words" in KINDS
    judge = make_judge("words", train=[], label_range=(0.0, 5.0))
    data = JudgeConfig.from_judge(judge, lm=None, calibrator=None, label_range=(0.0, 5.0)).to_dict()
    frozen = FrozenJudge(JudgeConfig.from_dict(json.loads(json.dumps(data))))
    assert frozen.judge.kind == "words" and frozen.score(answer="three short words") is not None


def test_metrics_load_as_written():
    """No renaming shim before a release: a judge.json's metrics are read exactly as they were written."""
    judge = make_judge("overlap", train=[], label_range=(0.0, 5.0))
    data = JudgeConfig.from_judge(judge, lm=None, calibrator=None, label_range=(0.0, 5.0)).to_dict()
    metrics = {"train": {"n": 6}, "gain": {"n": 6, "gated": True}, "selection": {"gate": "on", "test": {"winner": 1}}}
    assert JudgeConfig.from_dict(json.loads(json.dumps({**data, "metrics": metrics}))).metrics == metrics


def test_score_many_refuses_a_repeated_id_and_1_and_text_1_are_one_id():
    """Ids are text; two items with id 1 and "1" (or the same id twice) would collapse in every keyed
    output, so they are refused with both positions named."""
    from judgetune.errors import DataValidationError

    judge = FrozenJudge(JudgeConfig.from_judge(make_judge("overlap", train=[], label_range=(0.0, 5.0)), lm=None,
                                               calibrator=None, label_range=(0.0, 5.0)))
    rows = [{"id": 1, "answer": "a b", "reference": "a"}, {"id": "2", "answer": "c", "reference": "c"},
            {"id": "1", "answer": "d", "reference": "e"}]
    with pytest.raises(DataValidationError, match=r"item 2: id: expected each id once .* found '1' again \(first at "
                                                  r"item 0\)"):
        judge.score_many(rows)
    with pytest.raises(DataValidationError, match="found '1' again"):
        list(judge.score_iter(rows, chunk_size=2))  # across chunks too
    assert len(judge.score_many(rows[:2])) == 2
