"""Where a judge reads its labels over a server, on real servers on 127.0.0.1 with the embedded model behind them:
llama-cpp-python's server (``llama_server``) and llama.cpp's C++ ``llama-server``, built from the llama.cpp source
llama-cpp-python vendors by ``.ci/llama_server.sh``. ``$JUDGETUNE_LLAMA_SERVER`` names that binary; without it the
C++ server's tests skip, saying so, unless ``$JUDGETUNE_REQUIRE_LLAMA_SERVER`` is set (CI), when they fail."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import jsonlines
import pytest

from judgetune.cli import main
from judgetune.lm import LabelPositionError, load_lm
from judgetune.lm._spec import model_file, parse_lm_spec
from judgetune.testing import LlamaCppServer

pytestmark = pytest.mark.server

SERVER_ENV, REQUIRE_ENV = "JUDGETUNE_LLAMA_SERVER", "JUDGETUNE_REQUIRE_LLAMA_SERVER"
LOGPROB_TOLERANCE = 0.05  # nats: the same weights in another build (the C++ server's kernels may differ)
RATING = ["1", "2", "3", "4", "5"]
PROMPTS = [
    [{"role": "user", "content": "Rate how similar these sentences are, 1 to 5. A: A man plays a guitar. "
                                 "B: A man is playing the guitar. Answer with one digit."}],
    [{"role": "system", "content": "You are a strict grader."},
     {"role": "user", "content": "Grade the answer 1, 2, 3, 4 or 5. Q: What is the capital of France? A: Berlin."}],
]
PREFIX = "Rating: "


def gguf() -> str:
    return str(model_file(parse_lm_spec("local:smollm2")))


def cpp_binary() -> str:
    binary = os.environ.get(SERVER_ENV, "")
    if binary and Path(binary).is_file() and os.access(binary, os.X_OK):
        return binary
    why = (f"${SERVER_ENV} names no executable ({binary!r})" if binary else
           f"${SERVER_ENV} is not set (build llama-server with: bash .ci/llama_server.sh)")
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"${REQUIRE_ENV} is set but {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def cpp_server(tmp_path_factory):
    with LlamaCppServer(cpp_binary(), gguf(), tmp_path_factory.mktemp("cpp") / "server.log") as server:
        yield server


@pytest.fixture
def server(request):
    """The server a test is parametrized with: ``python`` (llama-cpp-python's) or ``cpp`` (llama-server)."""
    return request.getfixturevalue({"python": "llama_server", "cpp": "cpp_server"}[request.param])


def served(server, model: str | None = None, **options):
    return load_lm(f"openai/{model or gguf()}", api_base=server.base_url, use_cache=False, **options)


@pytest.mark.parametrize("server", ["python", "cpp"], indirect=True)
def test_with_the_models_gguf_named_the_probe_takes_completions_first_and_says_why(server, caplog):
    lm = served(server)
    with caplog.at_level(logging.WARNING, logger="judgetune"):
        assert lm.label_position == "completions"
    assert f"label position completions: openai/{gguf()} at {server.base_url}: /completions with the prompt ending " \
           f"at the label (template of {gguf()})" in caplog.text
    record = lm.label_record()
    assert record["label_position"] == "completions" and record["chat_template"]["source"] == gguf()
    assert len(record["chat_template"]["sha256"]) == 64


@pytest.mark.parametrize("server, position", [("python", "completions"), ("cpp", "completions"), ("cpp", "prefill")],
                         indirect=["server"])
def test_every_label_position_a_server_offers_reads_what_the_model_reads_in_process(server, position, uncached_lm):
    """At the label position (the prompt rendered here for /completions, or an assistant turn the server continues),
    each label the server lists has the in-process log-probability, and the likeliest label is listed."""
    lm = served(server, label_position=position)
    assert lm.label_position == position
    for messages in PROMPTS:
        remote = lm.label_distribution(messages, RATING, prefix=PREFIX)
        local = uncached_lm.label_distribution(messages, RATING, prefix=PREFIX)
        best = max(range(len(RATING)), key=lambda i: local.logprobs[i])
        assert math.isfinite(remote.logprobs[best]), (RATING[best], remote.missing)
        for label, a, b in zip(RATING, remote.logprobs, local.logprobs):
            if math.isfinite(a):
                assert abs(a - b) < LOGPROB_TOLERANCE, (position, label, a, b)


@pytest.mark.parametrize("server", ["python", "cpp"], indirect=True)
def test_generated_reads_the_labels_in_a_generated_answer(server, data_root):
    """Asked for ``generated``, no label distribution is read at the label: the judge reads the answer it generated
    (an item whose answer has no marker fails, saying so), whatever else the server offers."""
    from judgetune import datasets
    from judgetune.judges import make_judge

    lm = served(server, label_position="generated")
    assert lm.label_position is None and lm.label_record()["label_position"] == "generated"
    examples = datasets.load("sts2012-msrpar", root=data_root)
    train = [e for e in examples if e.meta["split"] == "train"]
    test = [e for e in examples if e.meta["split"] == "test"][:2]
    judge = make_judge("rubric", lm, train=train, label_range=(0, 5), params={"k": 0, "scoring_mode": "logprobs"})
    for example in test:
        verdict = judge(example)
        assert verdict.parsed or "no [[ ## score ## ]] followed by a label in the answer" in verdict.raw
    assert lm.label_calls == 0


def test_prefill_asked_of_a_server_that_opens_a_new_turn_stops_in_one_line(llama_server):
    """llama-cpp-python's server opens a new turn after a trailing assistant message (llama-server continues one when
    asked, even when started with --no-prefill-assistant)."""
    lm = served(llama_server, label_position="prefill")
    with pytest.raises(LabelPositionError) as err:
        _ = lm.label_position
    message = str(err.value)
    assert len(message.splitlines()) == 1 and message.startswith("label position prefill (asked for): ")
    assert "does not continue a trailing assistant turn" in message


def test_with_no_template_known_the_probe_tries_prefill_then_reads_generated_answers(llama_server, caplog):
    lm = served(llama_server, model="some-served-model")
    with caplog.at_level(logging.WARNING, logger="judgetune"):
        assert lm.label_position is None
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("label position"))
    assert line.startswith("label position generated: openai/some-served-model at ")
    assert "no chat template known here" in line and "does not continue a trailing assistant turn" in line


def test_llama_cpp_server_with_no_template_known_gets_prefill(cpp_server):
    assert served(cpp_server, model="some-served-model").label_position == "prefill"


def test_label_position_is_for_a_model_behind_a_server(run_cli):
    code, out, err = run_cli(["evaluate", "--judge", "rubric", "--data", "x.csv", "--label-position", "prefill"])
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "--label-position prefill: applies to a model behind a server (--lm openai/MODEL)" in err


# --- a frozen judge -------------------------------------------------------------------------------------------------

def tune(base_url: str, runs: Path, name: str, position: str | None) -> Path:
    chosen = ["--label-position", position] if position else []
    code = main(["tune", "--judge", "rubric", "--data", "sts2012-msrpar", "--lm", f"openai/{gguf()}", "--api-base",
                 base_url, *chosen, "--runs-dir", str(runs), "--run", name, "--trials", "1", "--search-items", "4",
                 "--dev-items", "4", "--test-items", "4", "--gate-items", "8", "--fix", "k=0", "--fix",
                 "reasoning=false", "--fix", "scoring_mode=logprobs", "--also", "none", "--json"])
    assert code == 0
    return runs / name


def score(run: Path, out: Path, *extra: str) -> tuple[int, list[dict]]:
    code = main(["score", "--config", str(run / "judge.json"), "--data", str(run / "test.jsonl"), "--out", str(out),
                 "--force", *extra])
    return code, (list(jsonlines.open(out)) if code == 0 else [])


def predictions(run: Path) -> list[dict]:
    return list(jsonlines.open(run / "test_predictions.jsonl"))


@pytest.fixture(scope="module")
def env(tmp_path_factory, data_root):
    saved = {k: os.environ.get(k) for k in ("JUDGETUNE_DATA_DIR", "JUDGETUNE_CACHE_DIR")}
    os.environ["JUDGETUNE_DATA_DIR"] = str(data_root)
    os.environ["JUDGETUNE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield tmp_path_factory.mktemp("runs")
    for key, value in saved.items():
        os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


@pytest.fixture(scope="module")
def python_run(llama_server, env) -> Path:
    return tune(llama_server.base_url, env, "python", None)


def frozen_position(run: Path) -> dict:
    return json.loads((run / "judge.json").read_text())["lm"]


def test_judge_json_records_the_label_position_and_the_template(python_run):
    lm = frozen_position(python_run)
    assert lm["label_position"] == "completions" and lm["chat_template"]["source"] == gguf()
    assert len(lm["chat_template"]["sha256"]) == 64


def assert_scores_as_its_run(run: Path, out: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="judgetune"):
        code, rows = score(run, out)
    assert code == 0
    assert [(r["id"], r["score"], r["raw_score"]) for r in rows] == \
        [(p["id"], p["score"], p["raw_score"]) for p in predictions(run)]
    assert "(as the judge was tuned)" in caplog.text


def test_a_frozen_judge_scores_its_test_items_exactly_as_its_run_did(python_run, tmp_path, monkeypatch, caplog):
    """Tuned on a server at the label position the probe chose, the frozen judge scored with ``judgetune score``
    from a cold answer cache gives the run's test predictions, to the bit."""
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cold"))
    assert_scores_as_its_run(python_run, tmp_path / "scored.jsonl", caplog)


@pytest.mark.parametrize("position", ["completions", "prefill"])
def test_a_judge_tuned_on_llama_server_scores_exactly_as_its_run_did(cpp_server, position, env, tmp_path,
                                                                      monkeypatch, caplog):
    run = tune(cpp_server.base_url, env, f"cpp-{position}", position)
    assert frozen_position(run)["label_position"] == position
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cold"))
    assert_scores_as_its_run(run, tmp_path / "scored.jsonl", caplog)


def test_score_on_another_server_of_the_same_model_keeps_the_frozen_way(python_run, cpp_server, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="judgetune"):
        code, rows = score(python_run, tmp_path / "o.jsonl", "--api-base", cpp_server.base_url)
    assert code == 0 and len(rows) == len(predictions(python_run))
    assert f"label position completions: openai/{gguf()} at {cpp_server.base_url}: /completions" in caplog.text
    for mine, theirs in zip(rows, predictions(python_run)):  # another build of the same weights
        assert mine["raw_score"] == pytest.approx(theirs["raw_score"], abs=0.05)


def edited(run: Path, tmp_path: Path, **lm) -> Path:
    folder = tmp_path / "edited"
    folder.mkdir(exist_ok=True)
    config = json.loads((run / "judge.json").read_text())
    config["lm"] = {k: v for k, v in {**config["lm"], **lm}.items() if v is not ...}
    (folder / "judge.json").write_text(json.dumps(config))
    (folder / "test.jsonl").write_text((run / "test.jsonl").read_text())
    return folder


def test_a_frozen_way_the_server_does_not_offer_stops_in_one_line(python_run, llama_server, tmp_path, capsys):
    """A judge tuned reading labels in a turn the server continues, scored where the server opens a new turn: exit 2,
    one line naming what is missing; from Python, the same error at load."""
    import judgetune

    run = edited(python_run, tmp_path, label_position="prefill", chat_template=None)
    capsys.readouterr()
    code, _ = score(run, tmp_path / "o.jsonl")
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "o.jsonl").exists() and len(err.splitlines()) == 1, err
    assert "labels are read at label position prefill, as the judge was tuned, but openai/" in err
    assert "does not continue a trailing assistant turn" in err
    with pytest.raises(LabelPositionError, match="as the judge was tuned"):
        judgetune.load(run / "judge.json")


def test_ray_reads_labels_as_the_judge_was_tuned_or_stops_before_a_cluster_starts(python_run, tmp_path, monkeypatch):
    """``score --engine ray``: the driver checks the frozen way on its own LM, so a way the server no longer offers
    stops in one line before any Ray actor is started (here no Ray is reached at all)."""
    from judgetune.scoring import ray_engine

    monkeypatch.setattr(ray_engine, "_ray", lambda: None)
    run = edited(python_run, tmp_path, label_position="prefill", chat_template=None)
    with pytest.raises(LabelPositionError) as err:
        ray_engine.score_on_ray(run / "judge.json", run / "test.jsonl", tmp_path / "o.jsonl")
    message = str(err.value)
    assert len(message.splitlines()) == 1 and f"{run / 'judge.json'}: labels are read at label position prefill" \
        in message and "does not continue a trailing assistant turn" in message


def test_a_worker_reads_labels_as_its_study_records(python_run, tmp_path, capsys, caplog):
    """``judgetune worker`` takes no --label-position: the study records where its first process read labels, and a
    worker reads them there, with the same chat template, or stops in one line naming what its server lacks."""
    import shutil

    import optuna

    url = f"sqlite:///{shutil.copy(python_run / 'study.db', tmp_path / 'study.db')}"
    study = optuna.load_study(study_name="python", storage=url)
    frozen = frozen_position(python_run)
    assert study.user_attrs["label_position"] == {k: frozen[k] for k in ("label_position", "chat_template")}
    with caplog.at_level(logging.WARNING, logger="judgetune"):
        assert main(["worker", "--storage", url, "--study", "python"]) == 0
    assert "label position completions: " in caplog.text and "(as the judge was tuned)" in caplog.text
    study.set_user_attr("label_position", {"label_position": "prefill", "chat_template": None})
    capsys.readouterr()
    assert main(["worker", "--storage", url, "--study", "python"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "study python: labels are read at label position prefill" in err, err
    assert "does not continue a trailing assistant turn" in err


def test_a_chat_template_other_than_the_frozen_one_stops_in_one_line(python_run, tmp_path, capsys):
    frozen = frozen_position(python_run)["chat_template"]
    run = edited(python_run, tmp_path, chat_template={**frozen, "sha256": "0" * 64})
    capsys.readouterr()
    code, _ = score(run, tmp_path / "o.jsonl")
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"the chat template of {gguf()} here (sha256 {frozen['sha256'][:12]}...) is not the one it was tuned " \
           "with" in err


def test_score_refuses_a_label_position_other_than_the_frozen_one(python_run, tmp_path, capsys):
    code, _ = score(python_run, tmp_path / "o.jsonl", "--label-position", "generated")
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert "was tuned reading labels at completions, and scores only that way" in err


def test_a_judge_json_without_a_label_position_is_probed_as_before(python_run, tmp_path, caplog):
    """A judge.json written before the label position was recorded loads, and over a server reads labels where the
    probe finds (as it did when it was tuned): here, the same scores."""
    run = edited(python_run, tmp_path, label_position=..., chat_template=...)
    assert "label_position" not in json.loads((run / "judge.json").read_text())["lm"]
    with caplog.at_level(logging.WARNING, logger="judgetune"):
        code, rows = score(run, tmp_path / "o.jsonl")
    assert code == 0 and "label position completions" in caplog.text and "as the judge was tuned" not in caplog.text
    assert [r["score"] for r in rows] == [p["score"] for p in predictions(python_run)]


def test_a_judges_scores_on_llama_server_do_not_depend_on_the_order_of_its_requests(cpp_server, data_root, tmp_path,
                                                                                    monkeypatch):
    """One request per label read: a second request for the same prompt would be computed from llama-server's prompt
    cache in another way, so scores would depend on which requests ran before (one at a time vs 8 at a time)."""
    from judgetune import datasets
    from judgetune.config import JudgeConfig
    from judgetune.judges import make_judge

    examples = datasets.load("sts2012-msrpar", root=data_root)
    train = [e for e in examples if e.meta["split"] == "train"]
    items = [e for e in examples if e.meta["split"] == "test"][:12]
    lm = served(cpp_server)
    judge = make_judge("rubric", lm, train=train, label_range=(0, 5), params={"k": 0, "scoring_mode": "logprobs"})
    config = JudgeConfig.from_judge(judge, lm=lm.spec.to_dict(), calibrator=None, label_range=(0.0, 5.0))
    path = config.save(tmp_path / "judge.json")
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(e.to_dict()) + "\n" for e in items))
    scores = []
    for concurrency in ("1", "8"):
        monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / f"cache-{concurrency}"))
        out = tmp_path / f"scored-{concurrency}.jsonl"
        assert main(["score", "--config", str(path), "--data", str(tmp_path / "items.jsonl"), "--out", str(out),
                     "--concurrency", concurrency, "--api-base", cpp_server.base_url]) == 0
        scores.append([row["score"] for row in jsonlines.open(out)])
    assert None not in scores[0] and scores[0] == scores[1]
