"""The second reliability sweep, each case fixed at its root: one strict JSON reader, atomic
outputs compared with the inputs by identity, a per-item size limit, server errors classified once,
option errors without tracebacks, and nothing silently accepted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _kits import jsonl, length_config
from _kits import length_rows as rows

from judgetune._files import atomic_write
from judgetune.config import ConfigError, JudgeConfig
from judgetune.datasets import MAX_DEPTH, read_examples
from judgetune.errors import DataValidationError
from judgetune.testing.fault_server import FaultServer
from judgetune.testing.llama_server import free_port

REPO = Path(__file__).resolve().parents[1]


# --- 1. memory: an item too large is refused with its line, in bounded memory ------------------------------

def test_a_row_over_the_item_limit_is_refused_with_its_line(tmp_path):
    data = rows(6)
    data[3]["answer"] = "word " * 300_000  # 1.5 MB
    path = jsonl(tmp_path / "big.jsonl", data)
    with pytest.raises(DataValidationError) as err:
        read_examples(path)
    assert err.value.problems == [f"{path}:4: row: expected at most 1,048,576 bytes (the per-item size limit), "
                                  "found a longer row; shorten its texts"]


def test_rouge_l_refuses_a_pair_whose_table_would_not_fit(tmp_path):
    from judgetune.judges import make_judge

    data = [r for r in read_examples(jsonl(tmp_path / "d.jsonl", rows(4)))]
    long = data[0].__class__(**{**data[0].__dict__, "answer": "alpha " * 6000, "references": (
        data[0].references[0].__class__("beta " * 6000),)})
    judge = make_judge("rougeL", None, train=data, label_range=(1.0, 5.0), params={}, seed=0)
    verdicts = judge.judge_all([long, data[1]])
    assert not verdicts[0].parsed and "too long for rougeL" in verdicts[0].raw
    assert verdicts[1].parsed  # the other item is scored


@pytest.mark.slow
def test_a_50_mb_row_stays_within_2_gb_in_every_command(tmp_path):
    data = rows(24)
    data[5]["answer"] = "word " * 10_000_000  # 50 MB
    path = jsonl(tmp_path / "big.jsonl", data)
    config = length_config(tmp_path / "judge.json")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    commands = [["evaluate", "--judge", "length", "--data", str(path)],
                ["evaluate", "--judge", "rougeL", "--data", str(path)],
                ["score", "--config", str(config), "--data", str(path), "--out", str(tmp_path / "o.jsonl")],
                ["compare", "--data", str(path), "--configs", str(config)],
                ["tune", "--judge", "length", "--data", str(path), "--runs-dir", str(tmp_path / "runs"), "--trials", "1"]]
    for argv in commands:
        code, stderr, peak_kb = run_measured([sys.executable, "-m", "judgetune.cli", *argv], env=env, cwd=tmp_path)
        assert code == 2, (argv, stderr[-500:])
        assert f"{path}:6: row: expected at most" in stderr and "Traceback" not in stderr
        assert peak_kb < 2 * 1024 * 1024, (argv, peak_kb)


def run_measured(argv: list[str], *, env: dict, cwd: Path, timeout: float = 300) -> tuple[int, str, int]:
    """Exit code, standard error and peak resident memory (KiB) of the command ``argv``.

    The command runs under a small Python parent that reports its children's peak. Measured from this
    process instead, a child's ``ru_maxrss`` starts at the RSS this (large) test process had when it
    forked, so a full suite's pytest would read as the command's own peak."""
    wrapper = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", wrapper, *argv], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout)
    stderr, _, peak = done.stderr.rstrip("\n").rpartition("\n")
    return done.returncode, stderr, int(peak)


# --- 2. outputs never written through an input; atomic -----------------------------------------------------

@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_out_linked_to_the_input_is_refused_and_the_data_unchanged(tmp_path, run_cli, link):
    path = jsonl(tmp_path / "data.jsonl", rows(6))
    before = path.read_bytes()
    out = tmp_path / "h.jsonl"
    os.link(path, out) if link == "hard" else out.symlink_to(path)
    code, _, err = run_cli(["score", "--config", str(length_config(tmp_path / "judge.json")), "--data", str(path),
                            "--out", str(out), "--force"])
    assert code == 2 and "that is an input of this command" in err
    assert path.read_bytes() == before


def test_an_output_replaces_a_link_instead_of_writing_through_it_and_a_failed_write_keeps_the_old_file(tmp_path):
    source = tmp_path / "source.txt"
    source.write_text("input")
    out = tmp_path / "out.txt"
    os.link(source, out)
    with atomic_write(out) as handle:
        handle.write("output")
    assert source.read_text() == "input" and out.read_text() == "output"
    with pytest.raises(RuntimeError), atomic_write(out) as handle:
        handle.write("half")
        raise RuntimeError("interrupted")
    assert out.read_text() == "output"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt", "source.txt"]  # no temporary file left


def test_score_replaces_its_out_whole(tmp_path, run_cli):
    path = jsonl(tmp_path / "data.jsonl", rows(6))
    out = tmp_path / "scores.jsonl"
    out.write_text("old\n")
    code, _, _ = run_cli(["score", "--config", str(length_config(tmp_path / "judge.json")), "--data", str(path),
                          "--out", str(out), "--force"])
    assert code == 0 and [json.loads(line)["id"] for line in out.read_text().splitlines()] == [str(i) for i in range(6)]


# --- 3. deep nesting: exit 2 with the file and line ----------------------------------------------------------

def test_a_deeply_nested_row_is_refused_with_its_line(tmp_path, run_cli):
    path = tmp_path / "deep.jsonl"
    good = "".join(json.dumps(r) + "\n" for r in rows(8))
    path.write_text(good + '{"answer": "a", "label": 1, "meta": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    code, _, err = run_cli(["evaluate", "--judge", "length", "--data", str(path)])
    assert code == 2 and f"{path}:9: row: expected JSON nested at most {MAX_DEPTH} levels deep" in err
    assert "Traceback" not in err and "RecursionError" not in err


def test_a_deeply_nested_judge_json_is_refused_with_its_line(tmp_path, run_cli):
    path = length_config(tmp_path / "judge.json")
    text = path.read_text().replace('"metrics": {}', '"metrics": ' + "[" * 100_000 + "]" * 100_000)
    path.write_text(text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if '"metrics"' in row)
    code, _, err = run_cli(["score", "--config", str(path), "--data", str(jsonl(tmp_path / "d.jsonl", rows(4))),
                            "--out", str(tmp_path / "o.jsonl")])
    assert code == 2 and f"{path}:{line}: file: expected JSON nested at most" in err


# --- 4 and 7. server errors classified once -------------------------------------------------------------------

def test_a_401_is_said_once_as_an_auth_error_before_any_scoring(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    data = jsonl(tmp_path / "d.jsonl", rows(24))
    with FaultServer(fault_rate=1.0, faults=("401",)) as server:
        code, out, err = run_cli(["evaluate", "--judge", "rubric", "--data", str(data), "--lm", "openai/m",
                                  "--api-base", server.base_url, "--no-cache", "--resamples", "10"])
    assert code == 2
    assert "refused the credentials (HTTP 401" in err and "$OPENAI_API_KEY" in err
    assert "top_logprobs" not in err and "sampled" not in err
    assert err.count("HTTP 401") == 1 and len(server.log) == 1  # the probe: nothing scored


@pytest.mark.parametrize("status, words", [("403", "refused access"), ("401", "refused the credentials")])
def test_tune_with_a_refused_key_stops_at_once(tmp_path, run_cli, monkeypatch, status, words):
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    data = jsonl(tmp_path / "d.jsonl", rows(24))
    with FaultServer(fault_rate=1.0, faults=(status,)) as server:
        code, _, err = run_cli(["tune", "--judge", "rubric", "--data", str(data), "--lm", "openai/m", "--api-base",
                                server.base_url, "--runs-dir", str(tmp_path / "runs"), "--trials", "2"])
    assert code == 2 and words in err and "sampled" not in err
    assert len(server.log) <= 8  # one round of concurrent calls at most, never every item of every trial


def test_refused_connections_stop_early(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    data = jsonl(tmp_path / "d.jsonl", rows(90))
    start = time.monotonic()
    code, _, err = run_cli(["evaluate", "--judge", "rubric", "--data", str(data), "--lm", "openai/m", "--api-base",
                            f"http://127.0.0.1:{free_port()}/v1", "--param", "scoring_mode=sampled", "--no-cache"])
    assert code == 2 and "connection attempts in a row failed" in err and "stopping" in err
    assert time.monotonic() - start < 15


def test_an_overloaded_server_is_said_as_such(tmp_path):
    from judgetune.lm import LMCallError, classify, load_lm

    with FaultServer(fault_rate=1.0, faults=("429",)) as server:
        lm = load_lm("openai/m", api_base=server.base_url, use_cache=False, max_retries=1, rate_limit_wait=2.5)
        with pytest.raises(LMCallError) as err:
            lm.client.complete([{"role": "user", "content": "hi"}], max_tokens=1)
    assert classify(err.value) == "overload" and "overloaded" in str(err.value)
    assert "--rate-limit-wait" in str(err.value)
    assert len(server.log) > 2  # a rate limit is waited out (for rate_limit_wait), not retried max_retries times


# --- 5. option errors: exit 2, one line ---------------------------------------------------------------------------

def test_labels_that_cannot_name_a_run_are_an_option_error(tmp_path, run_cli):
    code, _, err = run_cli(["tune", "--judge", "length", "--data", str(jsonl(tmp_path / "d.jsonl", rows())),
                            "--labels", "..,label"])
    assert code == 2 and "argument --labels" in err and "Traceback" not in err


def test_a_storage_that_is_no_database_is_an_error(tmp_path, run_cli):
    (tmp_path / "notdb.db").write_text("not a database")
    code, _, err = run_cli(["tune", "--judge", "length", "--data", str(jsonl(tmp_path / "d.jsonl", rows())),
                            "--storage", f"sqlite:///{tmp_path / 'notdb.db'}", "--runs-dir", str(tmp_path / "runs")])
    assert code == 2 and "cannot be opened as an Optuna storage (file is not a database)" in err
    assert (tmp_path / "notdb.db").read_text() == "not a database"


# --- 6. nothing silently accepted -------------------------------------------------------------------------------

def test_a_judge_json_with_the_judge_key_twice_is_refused(tmp_path):
    path = length_config(tmp_path / "judge.json")
    path.write_text(path.read_text().replace('"judge": "length",', '"judge": "length",\n  "judge": "rougeL",'))
    with pytest.raises(ConfigError, match=r"judge.json:4: judge: expected each key once in an object, found 'judge' twice"):
        JudgeConfig.load(path)


def test_a_data_row_with_a_key_twice_is_refused(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"answer": "a", "label": 1}\n{"answer": "b", "label": 2, "label": 5}\n')
    with pytest.raises(DataValidationError, match=r"d.jsonl:2: label: expected each key once"):
        read_examples(path)


@pytest.mark.parametrize("field, value, expected", [("seed", '"3"', "seed: input should be a valid integer"),
                                                     ("lm", '{"spec": "openai/m", "reasoning": "yes"}',
                                                      "lm.reasoning: input should be a valid boolean")])
def test_judge_json_values_of_the_wrong_json_type_are_refused(tmp_path, field, value, expected):
    path = length_config(tmp_path / "judge.json")
    text = path.read_text()
    start = text.index(f'"{field}": ')
    end = text.index("\n", start)
    path.write_text(text[:start] + f'"{field}": {value}' + ("," if text[end - 1] == "," else "") + text[end:])
    with pytest.raises(ConfigError, match=expected):
        JudgeConfig.load(path)


@pytest.mark.parametrize("label", ["٣", "３", "1_0"])
def test_numbers_in_other_scripts_are_refused_in_csv(tmp_path, label):
    path = tmp_path / "d.csv"
    path.write_text(f"answer,label\na,1\nb,{label}\n", encoding="utf-8")
    with pytest.raises(DataValidationError, match=r"d.csv:3: label: expected a number"):
        read_examples(path)


def test_a_calibrator_off_the_scale_is_warned_about(tmp_path, run_cli, caplog):
    config = JudgeConfig(judge="length", params={}, lm=None, instruction=None, demos=[], label_range=[1.0, 5.0],
                         calibrator={"kind": "linear", "label_range": [1.0, 5.0], "slope": 1.0, "intercept": 100.0})
    path = config.save(tmp_path / "judge.json")
    code, _, err = run_cli(["score", "--config", str(path), "--data", str(jsonl(tmp_path / "d.jsonl", rows(6))),
                            "--out", str(tmp_path / "o.jsonl")])
    assert code == 0 and "maps all 6 items" in caplog.text and "off the scale, clipped to its top, 5" in caplog.text


def test_items_beyond_an_isotonic_maps_last_knot_are_not_called_off_the_scale(tmp_path, run_cli, caplog):
    """An isotonic map ends on the scale: items beyond its fitted raw scores get its top by design (the audit's
    padded copies do), and nothing is said to lie off the scale."""
    config = JudgeConfig(judge="length", params={}, lm=None, instruction=None, demos=[], label_range=[1.0, 5.0],
                         calibrator={"kind": "isotonic", "label_range": [1.0, 5.0], "x": [0.0, 0.1], "y": [1.0, 5.0]})
    path = config.save(tmp_path / "judge.json")
    code, _, err = run_cli(["score", "--config", str(path), "--data", str(jsonl(tmp_path / "d.jsonl", rows(6))),
                            "--out", str(tmp_path / "o.jsonl")])
    scores = [json.loads(line)["score"] for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert code == 0 and scores == [5.0] * 6, err
    assert "maps all" not in caplog.text and "off the scale" not in caplog.text + err


@pytest.mark.parametrize("calibrator", [{"kind": "isotonic", "x": [0.2, 0.9], "y": [1.0, 1.0]},
                                        {"kind": "linear", "slope": 0.0, "intercept": 1.0},
                                        {"kind": "constant", "value": 1.0}])
def test_a_flat_calibrator_at_the_bottom_is_not_called_off_the_scale(tmp_path, run_cli, caplog, calibrator):
    """A fitted map that gives every item the labels' median (1 here: a binary-like label mostly at its bottom) is on
    the scale; it was said to be flat when it was fitted, and scoring does not call it off the scale."""
    config = JudgeConfig(judge="length", params={}, lm=None, instruction=None, demos=[], label_range=[1.0, 5.0],
                         calibrator={**calibrator, "label_range": [1.0, 5.0]})
    path = config.save(tmp_path / "judge.json")
    code, _, err = run_cli(["score", "--config", str(path), "--data", str(jsonl(tmp_path / "d.jsonl", rows(6))),
                            "--out", str(tmp_path / "o.jsonl")])
    assert code == 0, err
    assert "maps all" not in caplog.text and "off the scale" not in caplog.text + err


@pytest.mark.parametrize("calibrator, field", [
    ({"kind": "constant", "label_range": [1.0, 5.0], "value": 100.0}, "calibrator: constant calibrator: value"),
    ({"kind": "constant", "label_range": [0.0, 100.0], "value": 100.0}, "calibrator.label_range"),
    ({"kind": "isotonic", "label_range": [1.0, 5.0], "x": [0.2, 0.9], "y": [100.0, 100.0]}, "y"),
    ({"kind": "linear", "label_range": [1.0, 5.0], "slope": 0.0, "intercept": 100.0}, "intercept (slope 0)"),
])
def test_a_flat_calibrator_off_the_scale_is_refused_at_load_in_one_line(tmp_path, run_cli, calibrator, field):
    """A map that gives every item one value (a constant, a flat line or flat knots) is never warned about as pinned
    when it scores, so a value off the 1-5 scale (or a calibrator on another scale) is refused when judge.json loads,
    in one line naming the field; nothing is scored."""
    config = {**json.loads(length_config(tmp_path / "ok.json").read_text()), "calibrator": calibrator}
    path = tmp_path / "judge.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "o.jsonl"
    code, stdout, err = run_cli(["score", "--config", str(path), "--data", str(jsonl(tmp_path / "d.jsonl", rows(6))),
                                 "--out", str(out)])
    assert code == 2 and not out.exists() and stdout == ""
    assert err.startswith(f"judgetune: error: {path}: ") and f"{field}" in err and len(err.splitlines()) == 1
    assert "100" in err


def test_a_resumed_study_takes_more_trials(tmp_path):
    from judgetune.tuning import RunSpec, finished_trials, open_study

    data = jsonl(tmp_path / "d.jsonl", rows())
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    spec = RunSpec(name="more", judge="length", data=str(data), n_trials=1)
    study = open_study(spec, storage)
    study.enqueue_trial({})
    assert finished_trials(study) == 0
    resumed = open_study(RunSpec(**{**spec.to_dict(), "n_trials": 3}), storage)
    assert resumed.user_attrs["spec"]["n_trials"] == 3
    with pytest.raises(ValueError, match=r"other settings \(seed\)"):
        open_study(RunSpec(**{**spec.to_dict(), "n_trials": 3, "seed": 1}), storage)


# --- the label position over a server -------------------------------------------------------

@pytest.mark.server
@pytest.mark.model
@pytest.mark.slow
def test_rubric_over_a_server_reads_labels_at_the_label_position_as_in_process(llama_server, embedded_lm, data_root,
                                                                               tmp_path, caplog):
    """`evaluate --judge rubric --data sts2012-msrpar --limit 4` through llama-cpp-python's server: the prompt ends
    at ``[[ ## score ## ]]`` (the /completions way, the template from the embedded GGUF of the same name), so no
    item depends on the model writing the marker, and each item's label distribution is the in-process one."""
    from judgetune import datasets, judges
    from judgetune.lm import ResponseCache, load_lm

    examples = datasets.load("sts2012-msrpar", root=data_root)
    splits = datasets.split_examples(examples, seed=0)
    test = datasets.limit_by_group(splits["test"], 4, seed=0)
    served = load_lm("openai/smollm2", api_base=llama_server.base_url, cache=ResponseCache(tmp_path / "cache"))

    def verdicts(lm):
        judge = judges.make_judge("rubric", lm, train=splits["train"], label_range=(0.0, 5.0),
                                  params={}, seed=0)
        return judge.judge_all(test)

    remote, local = verdicts(served), verdicts(embedded_lm)
    assert served.label_position == "completions" and "/completions with the prompt ending at the label" in caplog.text
    assert all(v.parsed for v in remote), [v.raw for v in remote if not v.parsed]  # 7 of 8 failed before the fix
    for r, loc in zip(remote, local):
        assert set(r.distribution) == set(loc.distribution)
        tv = 0.5 * sum(abs(r.distribution[k] - loc.distribution[k]) for k in r.distribution)
        assert tv < 0.02  # tolerance: total variation of the renormalized label distributions
        assert abs(r.score - loc.score) < 0.1  # expected score on the 0-5 scale


# --- the fresh sweep's findings ------------------------------------------------------------------------------------

def test_a_csv_line_over_the_item_limit_is_refused_without_reading_it_whole(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("answer,label\na,1\n" + "x" * (2 << 20) + ",2\nb,3\n", encoding="utf-8")
    with pytest.raises(DataValidationError, match=r"d.csv:3: row: expected at most 1,048,576 characters"):
        read_examples(path)
    quoted = tmp_path / "q.csv"  # one quoted cell over many lines
    quoted.write_text('answer,label\n"' + "x\n" * 600_000 + '",1\nb,2\n', encoding="utf-8")
    with pytest.raises(DataValidationError, match=r"q.csv:2: row: expected at most"):
        read_examples(quoted)


@pytest.mark.parametrize("option, value", [("--limit", "٣"), ("--scale", "١-٥"), ("--seed", "３")])
def test_numbers_in_other_scripts_are_refused_in_options(tmp_path, run_cli, option, value):
    code, _, err = run_cli(["evaluate", "--judge", "length", "--data", str(jsonl(tmp_path / "d.jsonl", rows())),
                            option, value])
    assert code == 2 and f"argument {option}: expected" in err


@pytest.mark.parametrize("value, words", [("[" * 100_000 + "]" * 100_000, "nested at most"),
                                          ('{"a": 1, "a": 2}', "found 'a' twice")])
def test_param_values_go_through_the_strict_reader(tmp_path, run_cli, value, words):
    code, _, err = run_cli(["evaluate", "--judge", "rougeL", "--data", str(jsonl(tmp_path / "d.jsonl", rows())),
                            "--param", f"target={value}"])
    assert code == 2 and "argument --param: target:" in err and words in err


def test_an_instructions_file_goes_through_the_strict_reader(tmp_path, run_cli):
    deep = tmp_path / "ins.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    code, _, err = run_cli(["tune", "--judge", "rubric", "--data", str(jsonl(tmp_path / "d.jsonl", rows())),
                            "--instructions", str(deep), "--runs-dir", str(tmp_path / "runs")])
    assert code == 2 and f"{deep}:1: file: expected JSON nested at most" in err
    binary = tmp_path / "ins.txt"
    binary.write_bytes(b"\xff\xfe\x00")
    code, _, err = run_cli(["tune", "--judge", "rubric", "--data", str(jsonl(tmp_path / "d.jsonl", rows())),
                            "--instructions", str(binary), "--runs-dir", str(tmp_path / "runs")])
    assert code == 2 and f"--instructions {binary}: expected UTF-8 text" in err


def test_nrp_out_cannot_be_its_data_folder(tmp_path, run_cli):
    folder = tmp_path / "nrp"
    folder.mkdir()
    for name in ("queries.jsonl", "documents.jsonl", "answers.jsonl"):
        (folder / name).write_text("")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    code, _, err = run_cli(["nrp", "--data", str(folder), "--ranker", "bm25", "--out", str(folder)])
    assert code == 2 and "that is the --data folder" in err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_data_error_given_as_text_lists_its_lines():
    assert DataValidationError("item 0: answer: expected text, found 5").problems == [
        "item 0: answer: expected text, found 5"]
