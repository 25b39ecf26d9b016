"""Picking what to label: the first round covers the default judge's score strata and the groups, later
rounds go where the calibrator has few or scattered labels; picks are reproducible by seed, written in
the input's format, and bad input is refused with the file, option and what was expected."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

import judgetune
from judgetune.datasets import Example
from judgetune.errors import JudgetuneError
from judgetune.picking import cover, narrow, pick_examples, pick_file


def test_the_first_round_takes_one_item_per_score_stratum_from_the_least_represented_group():
    scores = list(np.linspace(0, 1, 40))
    groups = ["a"] * 20 + ["b"] * 10 + ["c"] * 10  # "a" holds the lower half of the scores
    picked = cover(scores, groups, 8, seed=0)
    strata = sorted(i // 5 for i in picked)
    assert strata == list(range(8))  # one per fifth of the sorted scores
    assert {groups[i] for i in picked} == {"a", "b", "c"}
    assert picked == cover(scores, groups, 8, seed=0)
    assert cover(scores, groups, 8, seed=0) != cover(scores, groups, 8, seed=1)  # the draw inside a stratum


def test_later_rounds_go_where_labels_are_few_or_scattered():
    pool = list(np.linspace(0, 1, 101))
    labeled = [0.05, 0.1, 0.15, 0.2, 0.25, 0.3]  # labels only at low scores, on a clean line
    labels = [1.0, 1.2, 1.4, 1.6, 1.8, 2.0]
    first = narrow(pool, ["g"] * 101, labeled, labels, ["g"] * 6, 3, seed=0)
    assert all(pool[i] > 0.5 for i in first[:1])  # the unlabeled high end first
    picks = narrow(pool, ["g"] * 101, labeled, labels, ["g"] * 6, 5, seed=0)
    assert len(set(picks)) == 5 and max(pool[i] for i in picks) - min(pool[i] for i in picks) > 0.3  # spread out


def _items(n: int = 60) -> list[Example]:
    return [Example(id=f"i{k}", answer=f"answer {k} " + "word " * (1 + k % 30), question=f"q{k % 6}", group=f"g{k % 6}")
            for k in range(n)]


def test_picks_skip_labeled_items_and_refuse_a_budget_beyond_the_pool():
    pool = _items()
    labeled = [Example(id=e.id, answer=e.answer, question=e.question, group=e.group, label=float(len(e.answer)))
               for e in pool[:10]]
    picks = pick_examples(pool, 12, labeled=labeled, judge="length", seed=0)
    assert picks.round == "next" and not {p.id for p in picks.picks} & {e.id for e in labeled}
    first = pick_examples(pool, 12, judge="length", seed=0)
    assert first.round == "first" and len({p.group for p in first.picks}) == 6
    with pytest.raises(JudgetuneError, match="more than the 50 unlabeled items"):
        pick_examples(pool, 51, labeled=labeled, judge="length")
    with pytest.raises(JudgetuneError, match="fitted on labels"):
        pick_examples(pool, 5, judge="hybrid")


def test_picked_rows_are_written_in_the_inputs_format(tmp_path: Path):
    src = tmp_path / "items.csv"
    with src.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "question", "answer", "group"])
        for e in _items():
            writer.writerow([e.id, e.question, f'{e.answer}, "quoted"', e.group])
    out = tmp_path / "todo.csv"
    picks = pick_file(src, 6, out=out, judge="length", seed=2)
    with out.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["id", "question", "answer", "group"]
    assert [r[0] for r in rows[1:]] == picks.ids and all(r[2].endswith(', "quoted"') for r in rows[1:])
    assert pick_file(src, 6, judge="length", seed=2).ids == picks.ids
    with pytest.raises(JudgetuneError, match="expected a .csv file"):
        pick_file(src, 6, out=tmp_path / "todo.jsonl", judge="length")


def test_python_pick_on_a_dataframe_returns_its_rows(tmp_path: Path):
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame([{"id": e.id, "question": e.question, "answer": e.answer, "group": e.group}
                              for e in _items()])
    picked = judgetune.pick(frame, 5, judge="length", seed=0, out=tmp_path / "todo.jsonl")
    assert list(picked.rows["id"]) == picked.ids and len(picked.rows) == 5
    assert [json.loads(line)["id"] for line in (tmp_path / "todo.jsonl").read_text().splitlines()] == picked.ids
    labeled = frame.iloc[:5].assign(label=[1.0, 2.0, 3.0, 4.0, 5.0])
    more = judgetune.pick(frame, 5, labeled=labeled, judge="length", seed=0)
    assert not set(more.ids) & set(labeled["id"])


def test_the_cli_writes_the_picks_and_refuses_bad_input(run_cli, tmp_path: Path):
    src = tmp_path / "items.jsonl"
    src.write_text("".join(json.dumps({"id": e.id, "question": e.question, "answer": e.answer, "group": e.group})
                           + "\n" for e in _items()))
    out = tmp_path / "todo.jsonl"
    code, stdout, _ = run_cli(["pick", "--data", str(src), "--n", "4", "--out", str(out), "--judge", "length"])
    assert code == 0 and "4 of 60 unlabeled items" in stdout
    assert len(out.read_text().splitlines()) == 4
    code, _, err = run_cli(["pick", "--data", str(src), "--n", "4", "--out", str(out), "--judge", "length"])
    assert code == 2 and "--force" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "answer": "x"}\n{"id": "b"}\n')
    code, _, err = run_cli(["pick", "--data", str(bad), "--n", "1", "--out", str(tmp_path / "o.jsonl"),
                            "--judge", "length"])
    assert code == 2 and "bad.jsonl:2" in err and "answer" in err
    code, _, err = run_cli(["pick", "--data", str(src), "--n", "0", "--out", str(tmp_path / "o.jsonl")])
    assert code == 2


def test_labels_already_in_the_data_count_as_labeled_and_are_never_picked(tmp_path: Path):
    """Rows of --data that carry a label are labeled already: they are not picked again, and with
    them the round is a next round (given those labels), not a first one."""
    items = _items()
    rows = [{"id": e.id, "question": e.question, "answer": e.answer, "group": e.group,
             **({"label": float(i % 5)} if i < 12 else {})} for i, e in enumerate(items)]
    src = tmp_path / "items.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    picks = pick_file(src, 6, judge="length", seed=2)
    labeled_ids = {r["id"] for r in rows if "label" in r}
    assert not set(picks.ids) & labeled_ids and picks.round != "first" and picks.labeled == 12
