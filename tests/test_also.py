"""``tune --also KIND``: another family's default judge joins the gate's challengers and ships in the run's default
place only through the nested gate; the panel keeps to the run's own family."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from judgetune import datasets
from judgetune.tuning import RunSpec
from judgetune.tuning._selection import Candidate, SelectionItems, choose
from judgetune.tuning._space import FAMILY, PANEL


def test_the_spec_takes_other_families_only_through_the_nested_gate():
    assert RunSpec(name="r", judge="rouge1", data="x.csv", also=["embedding"]).also == ["embedding"]
    with pytest.raises(ValueError, match="nested gate"):
        RunSpec(name="r", judge="rouge1", data="x.csv", also=["embedding"], gate="on")
    with pytest.raises(ValueError, match="other than --judge rouge1"):
        RunSpec(name="r", judge="rouge1", data="x.csv", also=["rouge1"])
    with pytest.raises(ValueError, match="unknown judge"):
        RunSpec(name="r", judge="rouge1", data="x.csv", also=["nonsense"])


def test_an_unknown_family_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "judgetune.cli", "tune", "--judge", "rouge1", "--data", "x.csv",
                           "--also", "hybrid,nonsense"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2
    assert "--also" in done.stderr and "'hybrid,nonsense'" in done.stderr and "Traceback" not in done.stderr


def test_the_panel_is_made_of_the_runs_own_family_only():
    rng = np.random.default_rng(3)
    n_search, n = 40, 200
    gold = rng.normal(size=n)
    own = [0.5 * gold + rng.normal(size=n) for _ in range(3)]
    other = 0.5 * gold + rng.normal(size=n)
    candidates = [Candidate(0, {"c": 0}, (1.0, 0.3)), Candidate(1, {"c": 1}, (1.0, 0.3)),
                  Candidate(2, {"c": 2}, (1.0, 0.3)),
                  Candidate(None, {FAMILY: {"judge": "embedding", "params": {"model": "minilm"}}})]
    spec = RunSpec(name="p", judge="rouge1", data="x.csv", panel=True, also=["embedding"])
    _, record = choose(spec, candidates, [*own, other], SelectionItems(gold, None, n_search, (-4.0, 4.0)),
                       calibrate=False, early_stop=False)
    panels = [row for row in record["rows"] if row.get("panel")]
    assert len(panels) == 1
    members = panels[0]["params"][PANEL]["members"]
    assert members and all(FAMILY not in m for m in members)
    assert [row.get("family") for row in record["rows"]].count("embedding") == 1


@pytest.mark.slow
def test_a_much_better_family_ships_in_place_of_the_default_and_reloads(tmp_path, mirror):
    """STS-B pairs: ROUGE-1 ranks them far worse than a sentence encoder (both without an LM); with --also the
    encoder's default judge passes the nested gate, is frozen as what it is, and its test gain is shown."""
    examples = datasets.load("stsb", root=tmp_path / "datasets", mirror=mirror)
    rows = [e for e in examples if e.meta["split"] == "train"][:300]
    with (tmp_path / "pairs.csv").open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "answer", "reference", "label"])
        writer.writerows([e.id, e.answer, e.references[0].text, e.label] for e in rows)
    done = subprocess.run([sys.executable, "-m", "judgetune.cli", "tune", "--judge", "rouge1", "--data", "pairs.csv",
                           "--run", "also", "--trials", "3", "--also", "embedding"], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert ("chosen: the embedding judge at its defaults (another family, --also), in place of the rouge1 judge's "
            "default") in done.stdout
    config = json.loads((tmp_path / "runs" / "also" / "judge.json").read_text())
    assert config["judge"] == "embedding" and config["lm"] is None
    chosen = [row for row in config["metrics"]["selection"]["rows"] if row["chosen"]]
    assert [row.get("family") for row in chosen] == ["embedding"]
    assert config["metrics"]["gain"]["spearman"]["low"] > 0
    import judgetune

    with judgetune.load(tmp_path / "runs" / "also" / "judge.json") as judge:
        again = [s.score for s in judge.score_many(rows[:5])]
    assert all(s is not None for s in again)


def test_left_out_the_other_families_are_the_cheap_ones_beside_a_judge_that_needs_an_lm():
    """``also`` left out: hybrid and embedding beside an LM judge under the nested gate; none beside a judge without
    an LM or under another gate; ``--also none`` and a named list are the user's."""
    assert RunSpec(name="r", judge="likelihood", data="x.csv").also_families() == ["hybrid", "embedding"]
    assert RunSpec(name="r", judge="rubric", data="x.csv", panel=True).also_families() == ["hybrid", "embedding"]
    assert RunSpec(name="r", judge="embedding", data="x.csv").also_families() == []
    assert RunSpec(name="r", judge="hybrid", data="x.csv").also_families() == []
    assert RunSpec(name="r", judge="likelihood", data="x.csv", gate="on").also_families() == []
    assert RunSpec(name="r", judge="likelihood", data="x.csv", also=[]).also_families() == []
    assert RunSpec(name="r", judge="likelihood", data="x.csv", also=["embedding"]).also_families() == ["embedding"]
    assert RunSpec(name="r", judge="hybrid", data="x.csv", fixed={"use_rubric": True}).also_families() == ["embedding"]


def test_also_none_on_the_command_line_leaves_every_other_family_out():
    from judgetune.cli._parser import build_parser

    args = build_parser().parse_args(["tune", "--judge", "likelihood", "--data", "x.csv", "--also", "none"])
    assert args.also == []
    assert build_parser().parse_args(["tune", "--judge", "likelihood", "--data", "x.csv"]).also is None


def _rows_csv(path, with_reference: bool) -> str:
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["id", "answer", *(["reference"] if with_reference else []), "label"])
        for i in range(120):
            words = ["alpha", "beta", "gamma", "delta", "epsilon"][: 1 + i % 5]
            out.writerow([f"r{i}", " ".join(words), *([" ".join(reversed(words))] if with_reference else []), i % 5])
    return str(path)


def test_automatic_families_the_data_cannot_judge_are_left_out_and_said(tmp_path, caplog):
    """Answer-only rows: the embedding judge has nothing to compare the answer with and the hybrid only the
    answer's length, so neither joins a likelihood run's challengers; with references both do."""
    from judgetune.tuning._candidates import family_candidates
    from judgetune.tuning._splits import prepare_splits

    spec = RunSpec(name="auto", judge="likelihood", data=_rows_csv(tmp_path / "bare.csv", False))
    candidates, left_out = family_candidates(spec, prepare_splits(spec), None)
    assert candidates == [] and set(left_out) == {"hybrid", "embedding"}
    assert "length" in left_out["hybrid"] and "failed on" in left_out["embedding"]
    assert "not among the challengers" in caplog.text
    spec = RunSpec(name="auto", judge="likelihood", data=_rows_csv(tmp_path / "ref.csv", True))
    candidates, left_out = family_candidates(spec, prepare_splits(spec), None)
    assert [c.params[FAMILY]["judge"] for c in candidates] == ["hybrid", "embedding"] and left_out == {}


def test_a_study_resumes_under_another_also(tmp_path):
    """``--also`` decides only which other families the gate adds, never a trial: a study stored with ``also: []``
    (or any list) resumes with it left out, and the stored spec follows."""
    import optuna

    from judgetune.tuning import open_study

    storage = optuna.storages.InMemoryStorage()
    spec = RunSpec(name="resume", judge="likelihood", data=_rows_csv(tmp_path / "ref.csv", True), also=[])
    open_study(spec, storage)
    resumed = open_study(RunSpec(**{**spec.to_dict(), "also": None}), storage)
    assert resumed.user_attrs["spec"]["also"] is None
