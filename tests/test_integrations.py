"""A frozen judge where evaluations already run: MLflow GenAI, inspect_ai, promptfoo (from npm) and DSPy's
save(), each scoring the same items with the same numbers as ``judgetune score``; regrading one file or eval
log with two judge versions.

The judge is BM25 tuned and calibrated in a temporary folder on synthetic rows (no model), so every figure
holds on any CPU. The harness tests skip when their extra is absent; CI installs them with
``pip install -e '.[test,mlflow,inspect]'`` and promptfoo from npm (see .ci/run; found through
$JUDGETUNE_PROMPTFOO, ``promptfoo`` on PATH or .ci/node), and sets $JUDGETUNE_REQUIRE_INTEGRATIONS so that a
missing harness fails instead of skipping.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _kits import overlap_rows as rows

import judgetune
from judgetune import datasets
from judgetune.config import JudgeConfig
from judgetune.datasets import example_from_record
from judgetune.evaluation import regrade_scores
from judgetune.integrations import harness_item, load_judge

REPO = Path(__file__).resolve().parents[1]


def need(what: str, found: bool, hint: str) -> None:
    """Skip without ``what``; fail instead under $JUDGETUNE_REQUIRE_INTEGRATIONS (CI installs every harness)."""
    if found:
        return
    if os.environ.get("JUDGETUNE_REQUIRE_INTEGRATIONS"):
        pytest.fail(f"JUDGETUNE_REQUIRE_INTEGRATIONS is set but {what} is not installed ({hint})")
    pytest.skip(f"{what} not installed ({hint})")


def installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


# five new items; the last one's reference has no content term, so BM25 fails on it (a failed judgment)
ITEMS = [{"id": f"n{i}", "answer": r["answer"], "reference": r["reference"]} for i, r in enumerate(rows(4, seed=7))]
ITEMS.append({"id": "n4", "answer": "a lazy dog", "reference": "the of and"})


@pytest.fixture(scope="module")
def judges(tmp_path_factory) -> dict[str, Path]:
    """``v1``: BM25 tuned and calibrated (isotonic); ``v2``: the same judge with its calibrator removed (a second
    version of the judge, its raw score mapped linearly onto the human scale)."""
    folder = tmp_path_factory.mktemp("judges")
    tuned = judgetune.tune(rows(), judge="bm25", name="bm25", runs_dir=folder, n_trials=1, search_items=8,
                           report=False, fixed={"target": "reference"})
    assert tuned.config.calibrator is not None
    v2 = folder / "bm25-v2.json"
    data = tuned.config.to_dict()
    data["calibrator"] = None
    JudgeConfig.from_dict(data).save(v2)
    return {"v1": folder / "bm25" / "judge.json", "v2": v2}


@pytest.fixture(scope="module")
def items_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("items") / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ITEMS), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def expected(judges, items_file, tmp_path_factory) -> dict[str, dict[str, float | None]]:
    from judgetune import cli

    folder = tmp_path_factory.mktemp("scored")
    out = {}
    for name, config in judges.items():
        path = folder / f"{name}.jsonl"
        assert cli.main(["score", "--config", str(config), "--data", str(items_file), "--out", str(path)]) == 0
        out[name] = {r["id"]: r["score"] for r in map(json.loads, path.read_text().splitlines())}
    scores = out["v1"]
    assert scores["n4"] is None and all(scores[f"n{i}"] is not None for i in range(4))  # one failed judgment
    assert out["v1"] != out["v2"]  # the two versions score differently
    return out


def test_a_harness_item_scores_as_judgetune_score(judges, expected):
    judge = load_judge(judges["v1"])
    for row in ITEMS:
        scored = judge.score_many([harness_item(answer={"response": row["answer"]}, reference=row["reference"])])[0]
        assert scored.score == expected["v1"][row["id"]]


@pytest.mark.slow
def test_mlflow_genai_evaluate_with_the_judge_as_scorer(judges, expected, tmp_path, monkeypatch):
    need("mlflow", installed("mlflow.genai"), "pip install 'judgetune[mlflow]'")
    import mlflow

    from judgetune.integrations import mlflow_scorer

    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    data = [{"inputs": {"question": f"item {r['id']}"}, "outputs": r["answer"],
             "expectations": {"expected_response": r["reference"]}} for r in ITEMS]
    result = mlflow.genai.evaluate(data=data, scorers=[mlflow_scorer(judges["v1"])])
    frame = result.result_df
    by_answer = {r["answer"]: r["id"] for r in ITEMS}
    got = {}
    for _, row in frame.iterrows():
        value = row["judgetune/value"]
        got[by_answer[row["response"]]] = None if value is None or (isinstance(value, float) and math.isnan(value)) \
            else float(value)
    assert got == expected["v1"]
    failed = frame[frame["response"] == ITEMS[-1]["answer"]].iloc[0]
    assert "no content terms" in str(failed["judgetune/error_message"])  # reported as failed, with the reason
    scored = [s for s in expected["v1"].values() if s is not None]
    assert result.metrics["judgetune/mean"] == pytest.approx(np.mean(scored))  # the failure is not averaged in


def _mock_outputs(answers: list[str]):
    from inspect_ai.model import ModelOutput, ModelUsage

    outputs = []
    for text in answers:
        output = ModelOutput.from_content("mockllm/model", text)
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)  # else mockllm counts with tiktoken
        outputs.append(output)
    return outputs


@pytest.fixture(scope="module")
def eval_log(judges, tmp_path_factory) -> Path:
    """An inspect_ai eval of the mock model answering the items, scored by the judge (v1)."""
    need("inspect_ai", installed("inspect_ai"), "pip install 'judgetune[inspect]'")
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import get_model
    from inspect_ai.solver import generate

    from judgetune.integrations import inspect_scorer

    model = get_model("mockllm/model", custom_outputs=_mock_outputs([r["answer"] for r in ITEMS]))
    task = Task(dataset=[Sample(id=r["id"], input=f"Restate: {r['reference']}", target=r["reference"]) for r in ITEMS],
                solver=generate(), scorer=inspect_scorer(judges["v1"]))
    folder = tmp_path_factory.mktemp("inspect")
    log = inspect_eval(task, model=model, log_dir=str(folder), display="none", max_samples=1)[0]
    assert log.status == "success"
    return Path(log.location)


@pytest.mark.slow
def test_inspect_eval_with_the_judge_as_scorer(eval_log, expected):
    from inspect_ai.log import read_eval_log

    log = read_eval_log(str(eval_log))
    got = {}
    for sample in log.samples:
        score = sample.scores["judgetune"]
        got[sample.id] = None if math.isnan(score.value) else score.value
        if got[sample.id] is None:
            assert score.reason == "grader_failed" and "no content terms" in score.explanation
    assert got == expected["v1"]
    scored = [s for s in expected["v1"].values() if s is not None]
    metrics = log.results.scores[0].metrics
    assert metrics["mean"].value == pytest.approx(np.mean(scored))  # the unscored sample is left out


@pytest.mark.slow
def test_regrading_an_eval_log_with_a_new_judge_version(eval_log, judges, expected, run_cli):
    code, out, err = run_cli(["compare", "--regrade", "--configs", str(judges["v1"]), str(judges["v2"]),
                              "--data", str(eval_log), "--json", "--resamples", "200"])
    assert code == 0, err
    result = json.loads(out)
    both = [i for i in expected["v1"] if expected["v1"][i] is not None and expected["v2"][i] is not None]
    difference = np.mean([expected["v2"][i] for i in both]) - np.mean([expected["v1"][i] for i in both])
    assert result["items"] == len(ITEMS) and result["scored_by_both"] == len(both) == 4
    assert result["failed_old"] == result["failed_new"] == 1
    assert result["mean_difference"] == pytest.approx(difference)
    low, high = result["mean_difference_ci"]
    assert low <= difference <= high
    assert "mae_difference" not in result  # the log carries no human labels


def test_regrading_a_labeled_file_reports_the_paired_error_difference(judges, run_cli, tmp_path):
    path = tmp_path / "labeled.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows(30, seed=3)), encoding="utf-8")
    code, out, err = run_cli(["compare", "--regrade", "--configs", str(judges["v1"]), str(judges["v2"]),
                              "--data", str(path), "--resamples", "200"])
    assert code == 0, err
    assert "regrading 30 items" in out and "MAE against the human labels" in out
    code, out, _ = run_cli(["compare", "--regrade", "--configs", str(judges["v1"]), str(judges["v1"]),
                            "--data", str(path), "--json", "--resamples", "200"])
    same = json.loads(out)
    assert same["changed"] == 0 and same["mean_difference"] == 0.0 and same["mean_difference_ci"] == [0.0, 0.0]


def test_regrading_a_catalog_split_uses_the_judges_own_split_seed(judges, run_cli, tmp_path, data_root, monkeypatch):
    """``compare --regrade`` on a catalog source splits with the seed the judges were tuned on (as
    ``evaluate`` does), never a fresh random split; another --seed is refused."""
    from judgetune.config import JudgeConfig

    paths = []
    for name in ("v1", "v2"):
        data = JudgeConfig.load(judges[name]).to_dict()
        data["data"] = {**(data.get("data") or {}), "split_seed": 3}
        paths.append(str(JudgeConfig.from_dict(data).save(tmp_path / f"{name}.json")))
    seeds = []
    real = datasets.split_examples
    monkeypatch.setattr(datasets, "split_examples", lambda examples, *, seed=0, **k: (
        seeds.append(seed), real(examples, seed=seed, **k))[1])
    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(data_root))
    argv = ["compare", "--regrade", "--configs", *paths, "--data", "sts2012-msrpar", "--limit", "4", "--resamples", "20"]
    code, _, err = run_cli(argv)
    assert code == 0, err
    assert seeds == [3]
    code, _, err = run_cli([*argv, "--seed", "1"])
    assert code == 2 and "tuned on the split of seed 3" in err


def test_regrade_scores_counts_failures_and_pairs_the_items():
    examples = [example_from_record({"answer": "x", "label": g}, where="t", default_id=str(i),
                                                       problems=[]) for i, g in enumerate([1, 2, 3, 4, 5])]
    old, new = [1.0, 2.5, None, 4.0, 4.0], [1.5, 2.0, 3.0, None, 5.0]
    result = regrade_scores(old, new, examples, n_resamples=300)
    assert result["failed_old"] == 1 and result["failed_new"] == 1 and result["scored_by_both"] == 3
    assert result["mean_difference"] == pytest.approx((0.5 - 0.5 + 1.0) / 3)
    assert result["mae_old"] == pytest.approx((0 + 0.5 + 1) / 3) and result["mae_new"] == pytest.approx((0.5 + 0) / 3)
    assert result["mae_difference"] == pytest.approx(result["mae_new"] - result["mae_old"])


def _promptfoo() -> str | None:
    found = os.environ.get("JUDGETUNE_PROMPTFOO") or shutil.which("promptfoo")
    local = REPO / ".ci" / "node" / "node_modules" / ".bin" / "promptfoo"
    return found or (str(local) if local.exists() else None)


@pytest.mark.slow
def test_promptfoo_runs_the_exported_assertion(judges, expected, run_cli, tmp_path):
    promptfoo = _promptfoo()
    need("promptfoo", promptfoo is not None, "see .ci/run for the npm line, or set $JUDGETUNE_PROMPTFOO")
    assertion = tmp_path / "judgetune_assert.py"
    code, _, err = run_cli(["export", "--config", str(judges["v1"]), "--to", "promptfoo", "--out", str(assertion),
                            "--threshold", "3"])
    assert code == 0, err
    items = [*ITEMS[:2], ITEMS[-1]]  # promptfoo starts a Python per assertion: three items keep it short
    tests = "".join(f"  - vars: {json.dumps({'answer': r['answer'], 'reference': r['reference']})}\n" for r in items)
    (tmp_path / "promptfooconfig.yaml").write_text(
        "prompts: ['{{answer}}']\nproviders: [echo]\n"
        "defaultTest:\n  assert:\n    - type: python\n      value: file://judgetune_assert.py\n"
        f"tests:\n{tests}", encoding="utf-8")
    env = {**os.environ, "PROMPTFOO_PYTHON": sys.executable, "PYTHONPATH": str(REPO),
           "PROMPTFOO_CONFIG_DIR": str(tmp_path / ".promptfoo"), "PROMPTFOO_DISABLE_TELEMETRY": "1",
           "PROMPTFOO_DISABLE_UPDATE": "1", "PROMPTFOO_DISABLE_SHARING": "1", "NO_COLOR": "1"}
    run = subprocess.run([promptfoo, "eval", "-c", "promptfooconfig.yaml", "-o", "out.json", "--no-cache",
                          "--no-table", "-j", "2"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert (tmp_path / "out.json").exists(), run.stdout[-2000:] + run.stderr[-2000:]
    results = json.loads((tmp_path / "out.json").read_text())["results"]["results"]
    by_answer = {r["answer"]: r["id"] for r in ITEMS}
    got, passed = {}, {}
    for result in results:
        item = by_answer[result["vars"]["answer"]]
        grading = result["gradingResult"]
        got[item] = grading.get("namedScores", {}).get("judgetune")
        passed[item] = grading["pass"]
        if got[item] is None:
            assert "no content terms" in grading["reason"]
    want = {r["id"]: expected["v1"][r["id"]] for r in items}
    assert got == want  # a failed judgment has no judgetune score (never 0)
    assert passed == {i: s is not None and s >= 3 for i, s in want.items()}


def test_export_refuses_what_it_would_ignore_and_the_assertion_checks_its_threshold(judges, run_cli, tmp_path):
    """--threshold with --to dspy (unused there) and a promptfoo assertion named other than .py are refused; the
    assertion refuses a config threshold that is no number on the judge's scale, where it would fail every output."""
    code, _, err = run_cli(["export", "--config", str(judges["v1"]), "--to", "dspy", "--out", str(tmp_path / "p.json"),
                            "--threshold", "3"])
    assert code == 2 and "--threshold: only --to promptfoo takes a threshold" in err
    code, _, err = run_cli(["export", "--config", str(judges["v1"]), "--to", "promptfoo", "--out",
                            str(tmp_path / "a.json"), "--threshold", "3"])
    assert code == 2 and "a.json: --to promptfoo writes a Python assertion: name it with .py" in err
    assert not (tmp_path / "a.json").exists() and not (tmp_path / "p.json").exists()
    out = tmp_path / "sub" / "a.py"
    out.parent.mkdir()
    code, stdout, err = run_cli(["export", "--config", str(judges["v1"]), "--to", "promptfoo", "--out", str(out),
                                 "--threshold", "3"])
    assert code == 0 and f"file://{out}" in stdout, err
    namespace = {"__file__": str(out)}
    exec(compile(out.read_text(encoding="utf-8"), str(out), "exec"), namespace)
    assert namespace["_threshold"](4) == 4.0 and namespace["_threshold"]("2.5") == 2.5
    for bad in (99, "abc", float("nan"), None):
        with pytest.raises(ValueError, match=r"config threshold .*: expected a number on the judge's human scale"):
            namespace["_threshold"](bad)


def test_a_judge_file_name_cannot_add_code_to_the_exported_assertion(judges, tmp_path):
    """The judge.json's file name and the vars' names enter the generated module's docstring escaped: a name that
    closes the docstring and adds a statement stays text (the module's top level is what the template writes)."""
    import ast

    from judgetune.integrations import write_promptfoo_assertion

    evil = 'v1"""\nimport os; os.system("touch PWNED")\n"""x.json'
    judge = tmp_path / evil
    judge.write_bytes(judges["v1"].read_bytes())
    out = write_promptfoo_assertion(judge, tmp_path / "assert.py", threshold=3.0, metric='m"""\nimport sys',
                                    question='q"""; import os')
    tree = ast.parse(out.read_text(encoding="utf-8"))
    imports = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert imports == ["from pathlib import Path"]
    doc = ast.get_docstring(tree)
    assert evil in doc and 'q"""; import os' in doc
    namespace = {"__file__": str(out)}
    exec(compile(out.read_text(encoding="utf-8"), str(out), "exec"), namespace)  # defines names, runs nothing
    assert not (tmp_path / "PWNED").exists() and namespace["QUESTION"] == 'q"""; import os'


def test_export_refuses_bad_options(judges, run_cli, tmp_path):
    out = tmp_path / "a.py"
    code, _, err = run_cli(["export", "--config", str(judges["v1"]), "--to", "promptfoo", "--out", str(out)])
    assert code == 2 and "--threshold" in err
    code, _, err = run_cli(["export", "--config", str(judges["v1"]), "--to", "promptfoo", "--out", str(out),
                            "--threshold", "9"])
    assert code == 2 and "0-5" in err
    code, _, err = run_cli(["export", "--config", str(judges["v1"]), "--to", "dspy", "--out", str(tmp_path / "p.json")])
    assert code == 2 and "no DSPy predictor" in err
    code, _, err = run_cli(["compare", "--regrade", "--configs", str(judges["v1"]), "--data", "x.jsonl"])
    assert code == 2 and "two judge.json files" in err


def test_export_to_dspy_works_offline_without_contacting_the_judges_server(run_cli, tmp_path, monkeypatch):
    """The predictors' state needs no model, so ``export --to dspy`` of a judge on a server builds it on a
    stand-in: nothing is sent to the server the judge.json names (here a closed port: before, the export failed)."""
    from judgetune.judges import BuildContext, JudgeSpec, build
    from judgetune.lm import load_lm

    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    stand_in = load_lm("test:deterministic", use_cache=False)
    judge = build(JudgeSpec("rubric", {"scoring_mode": "logprobs"}), BuildContext(lm=stand_in, label_range=(0.0, 5.0)))
    stand_in.close()
    config = JudgeConfig.from_judge(judge, lm={"spec": "openai/m", "api_base": "http://127.0.0.1:9/v1"},
                                    calibrator=None, label_range=(0.0, 5.0))
    path = config.save(tmp_path / "judge.json")
    out = tmp_path / "rubric.json"
    code, _, err = run_cli(["export", "--config", str(path), "--to", "dspy", "--out", str(out)])
    assert code == 0, err
    assert json.loads(out.read_text())["predict"]["signature"]["instructions"] == config.instruction


def test_the_dspy_prompt_saved_with_dspy_loads_into_a_plain_dspy_module(run_cli, tmp_path, embedded_lm):
    import dspy

    from judgetune.judges import BuildContext, JudgeSpec, build

    demos = [example_from_record(r, where="t", default_id=r["id"], problems=[]) for r in rows(4)]
    judge = build(JudgeSpec("rubric", {"k": 2}), BuildContext(lm=embedded_lm, demo_pool=demos, label_range=(0.0, 5.0)))
    config = JudgeConfig.from_judge(judge, lm={"spec": "local:smollm2"}, calibrator=None, label_range=(0.0, 5.0))
    path = config.save(tmp_path / "judge.json")
    out = tmp_path / "rubric.json"
    code, _, err = run_cli(["export", "--config", str(path), "--to", "dspy", "--out", str(out)])
    assert code == 0, err

    class Plain(dspy.Module):  # no judgetune class: the predictor's name and fields are enough
        def __init__(self):
            super().__init__()
            self.predict = dspy.Predict("question, reference, answer -> score")

    plain = Plain()
    plain.load(str(out))
    assert plain.predict.signature.instructions == config.instruction
    assert [d["answer"] for d in plain.predict.demos] == [d["answer"] for d in config.demos] and len(config.demos) == 2
