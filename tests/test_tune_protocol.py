"""`tune` under the LINKAGE protocol: every split draws its references from its own questions' labeled
answers, which then leave the candidates, and the frozen judge records the protocol."""

from __future__ import annotations

import json
import random

import optuna
import pytest

from judgetune.datasets import read_examples
from judgetune.tuning import RunSpec, tune

WORDS = "river stone bridge lamp window garden letter candle harbor meadow".split()


def grouped_rows(questions: int = 24, per_grade: int = 3) -> list[dict]:
    """Questions with answers of grades 0-2; a grade-g answer shares g+1 words with its question."""
    rng = random.Random(7)
    rows = []
    for q in range(questions):
        topic = rng.sample(WORDS, 3)
        for grade in (0, 1, 2):
            for a in range(per_grade):
                words = topic[:grade + 1] + rng.sample([w for w in WORDS if w not in topic], 3 - grade)
                rows.append({"id": f"q{q}-g{grade}-{a}", "group": f"q{q}", "question": " ".join(topic),
                             "answer": " ".join(words + [str(a)]), "label": grade})
    return rows


@pytest.mark.slow
def test_tune_under_linkage_draws_references_per_split_and_records_the_protocol(tmp_path):
    path = tmp_path / "grouped.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in grouped_rows()), encoding="utf-8")
    spec = RunSpec(name="p", judge="refsim", data=str(path), n_trials=2, search_items=12, protocol="linkage")
    config, run_dir, _ = tune(spec, runs_dir=tmp_path / "runs", storage=optuna.storages.InMemoryStorage(),
                              progress=False, n_resamples=200)
    assert config.protocol == "linkage"
    test = read_examples(run_dir / "test.jsonl")
    assert test and all(len(e.references) == 3 for e in test)  # one drawn reference of each grade
    for ex in test:  # a drawn reference is no longer a candidate of its question
        siblings = {e.answer for e in test if e.group == ex.group}
        assert not siblings & {r.text for r in ex.references}
    # 24 questions of 9 answers: 3 drawn per question, so 6 of each question's answers are judged
    assert len(test) % 6 == 0 and len(test) < sum(1 for r in grouped_rows() if r["group"] in {e.group for e in test})
