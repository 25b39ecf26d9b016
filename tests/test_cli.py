"""The data commands of the CLI."""

from __future__ import annotations

import json
import re

from judgetune import cli


def test_data_list(capsys):
    assert cli.main(["data", "list", "--json"]) == 0
    names = [s["name"] for s in json.loads(capsys.readouterr().out)["sources"]]
    assert "linkage-antique" in names and "nrp-clef-ehealth" in names


def test_data_show(data_root, monkeypatch, capsys):
    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(data_root))
    assert cli.main(["data", "show", "linkage-webglm", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["histogram"] == {"1": 94, "2": 105, "3": 101} and info["scale"]["low"] == 1
    assert cli.main(["data", "show", "sts2012-msrpar"]) == 0
    out = capsys.readouterr().out
    assert "splits {'train': 750, 'test': 750}" in out and "license:" in out


def test_data_fetch_from_mirror_and_errors(tmp_path, mirror, monkeypatch, capsys):
    monkeypatch.delenv("JUDGETUNE_DATA_MIRROR", raising=False)
    assert cli.main(["data", "fetch", "llmbar-natural", "--mirror", str(mirror), "--dir", str(tmp_path)]) == 0
    assert "llmbar-natural: 1 file(s)" in capsys.readouterr().out
    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(tmp_path / "empty"))
    assert cli.main(["data", "show", "stsb"]) == 2
    assert "judgetune: error: stsb: 5 file(s) missing" in capsys.readouterr().err
    assert cli.main(["data", "fetch", "stsb", "--mirror", str(tmp_path / "nowhere")]) == 2
    assert "nowhere: expected a folder holding copies of the catalog's files, found nothing" in capsys.readouterr().err


def test_import_writes_no_environment_and_the_entry_points_keep_litellm_offline(tmp_path):
    """Importing judgetune changes no environment variable; the CLI sets litellm's offline switch before
    any work (a user's own setting wins)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    # scikit-learn sets two KMP_ variables at its import: imported first, so only judgetune's writes are seen
    imported = ("import os, sklearn; before = dict(os.environ); import judgetune, judgetune.cli, judgetune.tuning, "
                "judgetune.scoring, judgetune.lm; print(dict(os.environ) == before)")
    out = subprocess.run([sys.executable, "-c", imported], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
    entry = ("import os, sys; from judgetune import cli; cli.main(['data', 'list']); "
             "print(os.environ['LITELLM_LOCAL_MODEL_COST_MAP'], file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", entry], env=env, capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "True"
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "False"
    out = subprocess.run([sys.executable, "-c", entry], env=env, capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "False"


def _length_configs(tmp_path, *ranges):
    from judgetune.config import JudgeConfig

    return [str(JudgeConfig(judge="length", params={}, lm=None, instruction=None, demos=[], calibrator=None,
                            label_range=list(r)).save(tmp_path / f"judge{i}.json")) for i, r in enumerate(ranges)]


def _graded_csv(path, labels):
    rows = [f"r{i},q{i},{'word ' * (i % 7 + 1)},reference {i},{label}" for i, label in enumerate(labels)]
    path.write_text("id,question,answer,reference,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return str(path)


def test_compare_refuses_labels_off_a_judges_scale_and_a_judge_given_twice(tmp_path, run_cli):
    five, hundred = _length_configs(tmp_path, (0.0, 5.0), (0.0, 100.0))
    data = _graded_csv(tmp_path / "d.csv", [i * 7 % 95 for i in range(30)])
    code, out, err = run_cli(["compare", "--data", data, "--configs", hundred, five])
    assert code == 2 and out == ""
    assert f"of 30 labels lie outside the scale 0-5 of {five} (labels 0 to 94)" in err
    code, out, err = run_cli(["compare", "--data", data, "--configs", hundred, hundred])
    assert code == 2 and "expected two or more different judge configs, found one given twice" in err


def test_evaluate_says_why_agreement_figures_are_missing(tmp_path, run_cli):
    code, out, err = run_cli(["evaluate", "--judge", "length", "--data", _graded_csv(tmp_path / "few.csv", [1, 2, 2, 3, 0])])
    assert code == 0, err
    assert out.splitlines()[-1] == "no agreement figures: fewer than 2 labeled items were scored (measure on a larger " \
                                   "file or split)"
    code, out, err = run_cli(["evaluate", "--judge", "length", "--data", _graded_csv(tmp_path / "top.csv", [5] * 30),
                              "--scale", "1-5"])
    assert code == 0, err
    assert "mae" in out and out.splitlines()[-1] == ("no rank correlations: the labels (or every judge's scores) are "
                                                     "all equal on these items")


def test_tune_says_the_scale_it_inferred_and_the_least_rows_it_needs(tmp_path, run_cli):
    runs = str(tmp_path / "runs")
    ceiling = _graded_csv(tmp_path / "top.csv", [4 + (i % 5 == 0) for i in range(40)])  # labels 4 and 5 only
    code, out, err = run_cli(["tune", "--judge", "bm25", "--data", ceiling, "--run", "top", "--runs-dir", runs,
                              "--trials", "2"])
    assert code == 0, err
    assert f"human scale 4-5, inferred from the labels of {ceiling} (state it with --scale LOW-HIGH)" in out
    assert re.search(r"^top: 2 trials( \(\d+ complete, \d+ pruned\))?, 0 LM calls, chosen: ", out, re.M), out
    code, out, err = run_cli(["tune", "--judge", "bm25", "--data", _graded_csv(tmp_path / "five.csv", range(5)),
                              "--run", "five", "--runs-dir", runs])
    assert code == 2 and "(search 3, dev 1, test 1; tuning needs at least 4, 4 and 2: label more rows" in err


def test_score_and_export_refuse_an_out_they_cannot_write_as_named(tmp_path, run_cli):
    config, = _length_configs(tmp_path, (0.0, 5.0))
    data = _graded_csv(tmp_path / "d.csv", [1, 2, 3])
    code, out, err = run_cli(["score", "--config", config, "--data", data, "--out", str(tmp_path / "s.tsv")])
    assert code == 2 and "--out" in err and "expected a file named .jsonl, .csv or .parquet" in err
    assert not (tmp_path / "s.tsv").exists()
    code, out, err = run_cli(["export", "--config", config, "--to", "promptfoo", "--threshold", "3",
                              "--out", str(tmp_path / "missing" / "a.py")])
    assert code == 2 and "expected a file to write in an existing folder" in err and "Errno" not in err


def test_report_reads_a_run_folder_copied_under_another_name(tmp_path, run_cli):
    import shutil

    runs = tmp_path / "runs"
    data = _graded_csv(tmp_path / "d.csv", [i % 6 for i in range(40)])
    code, out, err = run_cli(["tune", "--judge", "bm25", "--data", data, "--run", "first", "--runs-dir", str(runs),
                              "--trials", "2"])
    assert code == 0, err
    shutil.copytree(runs / "first", tmp_path / "shared-copy")
    (tmp_path / "shared-copy" / "report.html").unlink()
    code, out, err = run_cli(["report", str(tmp_path / "shared-copy")])
    assert code == 0, err
    assert (tmp_path / "shared-copy" / "report.html").is_file()
