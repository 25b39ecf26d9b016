"""Which labeled rows the gate scores (``tuning._splits``): at the default every non-test row of a file up to
``GATE_ITEMS_CAP``, a row left out is said in one line, a small ``--dev-items`` request beside the demo pool's rows is
said in one line, and the choosing stage states its judgments before it starts. No model: ``prepare_splits`` reads
the file, and the one tuning run uses the ``overlap`` judge."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from _kits import overlap_rows

import judgetune
from judgetune.tuning import GATE_ITEMS_CAP, RunSpec, prepare_splits


def _file(folder: Path, n: int) -> Path:
    path = folder / f"rows-{n}.csv"
    path.write_text("id,answer,reference,label\n" + "".join(f"r{i},a {i},b {i},{i % 6}\n" for i in range(n)))
    return path


def _splits(path: Path, caplog: pytest.LogCaptureFixture, **options):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="judgetune.tuning"):
        splits = prepare_splits(RunSpec(name="x", judge="embedding", data=str(path), **options))
    return splits, [r.getMessage() for r in caplog.records if "gate" in r.getMessage()]


@pytest.mark.parametrize("n", [300, 1000])
def test_at_the_default_the_gate_scores_every_labeled_non_test_row(tmp_path, caplog, n):
    splits, said = _splits(_file(tmp_path, n), caplog)
    assert len(splits.selection) == len(splits.train) + len(splits.dev) == n * 4 // 5  # 240 and 800 rows
    assert {e.id for e in splits.confirming_pool} == {e.id for e in splits.demo_pool}
    assert not said


def test_past_the_cap_the_gate_scores_the_cap_and_says_how_many_rows_it_leaves_out(tmp_path, caplog):
    splits, said = _splits(_file(tmp_path, 3000), caplog)
    assert len(splits.selection) == GATE_ITEMS_CAP == 2000 and len(splits.search) == 40 and len(splits.dev) == 600
    assert len(said) == 1, said
    assert "every labeled non-test row up to 2000" in said[0]
    assert "scores 2000 of the 2400 labeled non-test items" in said[0] and "other 400 are left out" in said[0]


def test_a_small_dev_items_request_says_in_one_line_why_the_gate_scores_more(tmp_path, caplog):
    path = _file(tmp_path, 300)
    splits, said = _splits(path, caplog, dev_items=20)
    assert len(splits.dev) == 20 and len(splits.confirming_pool) == 140  # the training rows the search left
    assert len(said) == 1, said
    assert said[0].startswith("x: --dev-items 20: the gate also confirms on 140 of the demo pool's items")
    assert "--gate-items N bounds them" in said[0]
    # a --gate-items the user gave bounds them: named in that line, and the rows it leaves out in a second one
    splits, said = _splits(path, caplog, dev_items=20, gate_items=100)
    assert len(splits.selection) == 100 and len(splits.confirming_pool) == 40
    assert len(said) == 2 and "--gate-items 100 bounds them" in said[0]
    assert "--gate-items 100: the gate scores 100 of the 200" in said[1] and "other 100 are left out" in said[1]


def test_the_choosing_stage_states_its_judgments_before_it_starts(tmp_path, monkeypatch):
    """60 rows: 36 train (8 search, 28 pool), 12 dev, 12 test; the default and 4 trials judged on the 40 confirming
    rows at most (the search rows' judgments come from the search)."""
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in overlap_rows()))
    said: list[str] = []
    real = judgetune.tuning._run.stage

    def recorded(desc: str, **options):
        said.append(desc)
        return real(desc, **{**options, "enabled": False})

    monkeypatch.setattr(judgetune.tuning._run, "stage", recorded)
    spec = RunSpec(name="cost", judge="overlap", data=str(data), n_trials=2, search_items=8,
                   fixed={"target": "reference"})
    judgetune.tuning.tune(spec, runs_dir=tmp_path, progress=False, n_resamples=20)
    line = next(d for d in said if "choosing" in d)
    assert line == ("cost: choosing among the default, up to 4 trials on 48 items (8 search, 28 pool, 12 dev): "
                    "at most 200 judgments, fewer as losers stop early (--gate-items bounds the items)")
