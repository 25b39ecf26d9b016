"""RAG claim metrics: every metric pinned on hand-built entailment matrices (empty claim lists, zero
chunks, no context given), RAGChecker's shipped example outputs recomputed from their own matrices,
the reader's located errors, the pipeline on the embedded model, faults, and `judgetune ragcheck`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from judgetune import cli, datasets, ragcheck
from judgetune.datasets import RagItem, read_rag_items
from judgetune.errors import DataNotFoundError, DataValidationError
from judgetune.judges import FactCheckJudge
from judgetune.lm import ResponseCache, load_lm
from judgetune.ragcheck import ClaimChecks, item_metrics
from judgetune.testing.scripted_lm import ScriptedLM

# Five response claims, four gold claims, three chunks (k0 and k1 relevant, k2 not):
#   r0 correct, in k0 | r1 correct, in no chunk (self-knowledge) | r2 incorrect, in k1 and k2 (relevant
#   noise only) | r3 incorrect, in k2 only (irrelevant noise) | r4 incorrect, in no chunk (hallucination)
#   g0 in k0 and in the response | g1 in k1, not in the response | g2 in no chunk, in the response | g3 in k0 and
#   in the response
HAND = ClaimChecks(
    ("r0", "r1", "r2", "r3", "r4"), ("g0", "g1", "g2", "g3"),
    response_in_gold=np.array([1, 1, 0, 0, 0]),
    gold_in_response=np.array([1, 0, 1, 1]),
    response_in_chunks=np.array([[1, 0, 0], [0, 0, 0], [0, 1, 1], [0, 0, 1], [0, 0, 0]]),
    gold_in_chunks=np.array([[1, 0, 0], [0, 1, 0], [0, 0, 0], [1, 0, 0]]))
HAND_VALUES = {
    "precision": 2 / 5, "recall": 3 / 4, "f1": 2 * (2 / 5) * (3 / 4) / (2 / 5 + 3 / 4),
    "claim_recall": 3 / 4, "context_precision": 2 / 3, "context_utilization": 2 / 3,
    "noise_sensitivity_relevant": 1 / 5, "noise_sensitivity_irrelevant": 1 / 5, "hallucination": 1 / 5,
    "self_knowledge": 1 / 5, "faithfulness": 3 / 5,
}


def test_every_metric_equals_its_hand_computed_value():
    metrics = item_metrics(HAND)
    assert set(metrics) == set(ragcheck.METRICS) == set(HAND_VALUES)
    for name, value in HAND_VALUES.items():
        assert metrics[name] == pytest.approx(value), name
    # the three fates of a response claim partition it
    assert metrics["faithfulness"] + metrics["hallucination"] + metrics["self_knowledge"] == pytest.approx(1)


def test_a_claim_in_a_relevant_and_an_irrelevant_chunk_is_relevant_noise_only():
    both = ClaimChecks(("r",), ("g",), [0], [0], [[1, 1]], [[1, 0]])
    assert item_metrics(both)["noise_sensitivity_relevant"] == 1.0
    assert item_metrics(both)["noise_sensitivity_irrelevant"] == 0.0


def _no_response_claims() -> ClaimChecks:
    return ClaimChecks((), ("g0", "g1"), np.zeros(0), [0, 0], np.zeros((0, 2)), [[1, 0], [0, 0]])


def test_empty_response_claims():
    m = item_metrics(_no_response_claims())
    assert m["precision"] is None  # no response claims: 0/0
    assert m["recall"] == 0.0 and m["f1"] == 0.0  # the harmonic mean with recall 0 is 0, whatever precision is
    for name in ("noise_sensitivity_relevant", "noise_sensitivity_irrelevant", "hallucination", "self_knowledge",
                 "faithfulness"):
        assert m[name] is None, name  # all are fractions of the response claims
    assert m["claim_recall"] == 0.5 and m["context_precision"] == 0.5
    assert m["context_utilization"] == 0.0  # g0 is in the context and not in the (empty) response


def test_empty_gold_claims():
    c = ClaimChecks(("r0", "r1"), (), [1, 0], np.zeros(0), [[1], [0]], np.zeros((0, 1)))
    m = item_metrics(c)
    assert m["recall"] is None and m["f1"] is None and m["precision"] == 0.5
    assert m["claim_recall"] is None and m["context_utilization"] is None
    assert m["context_precision"] == 0.0  # a chunk is relevant when it holds a gold claim: none does
    # no chunk is relevant, so r0's chunk is irrelevant; r0 is correct, r1 in no chunk and incorrect
    assert m["noise_sensitivity_relevant"] == 0.0 and m["noise_sensitivity_irrelevant"] == 0.0
    assert m["faithfulness"] == 0.5 and m["hallucination"] == 0.5 and m["self_knowledge"] == 0.0
    zero_precision = ClaimChecks(("r0",), (), [0], np.zeros(0))
    assert item_metrics(zero_precision)["f1"] == 0.0


def test_zero_chunks_follow_the_definitions():
    c = ClaimChecks(("r0", "r1", "r2"), ("g0",), [1, 1, 0], [1], np.zeros((3, 0)), np.zeros((1, 0)))
    assert c.n_chunks == 0
    m = item_metrics(c)
    assert m["claim_recall"] == 0.0 and m["faithfulness"] == 0.0
    assert m["context_precision"] is None and m["context_utilization"] is None
    assert m["noise_sensitivity_relevant"] == 0.0 and m["noise_sensitivity_irrelevant"] == 0.0
    assert m["hallucination"] == pytest.approx(1 - m["precision"]) and m["self_knowledge"] == m["precision"]


def test_no_context_given_leaves_only_the_overall_metrics():
    c = ClaimChecks(("r0",), ("g0", "g1"), [1], [1, 0])
    assert c.n_chunks is None
    m = item_metrics(c)
    assert m["precision"] == 1.0 and m["recall"] == 0.5 and m["f1"] == pytest.approx(2 / 3)
    assert all(m[name] is None for name in (*ragcheck.RETRIEVER, *ragcheck.GENERATOR))


def test_both_claim_lists_empty():
    m = item_metrics(ClaimChecks((), (), np.zeros(0), np.zeros(0), np.zeros((0, 3)), np.zeros((0, 3))))
    assert m["context_precision"] == 0.0
    assert all(value is None for name, value in m.items() if name != "context_precision")


def test_threshold_and_probabilities():
    probs = ClaimChecks(("r",), ("g",), [0.8], [0.5], [[0.6]], [[0.5]])
    assert item_metrics(probs, threshold=0.5)["precision"] == 1.0
    assert item_metrics(probs, threshold=0.81)["precision"] == 0.0
    assert item_metrics(probs, threshold=0.5)["recall"] == 1.0  # entailed when p >= threshold
    soft = item_metrics(probs, threshold=None)  # "and" is a product, "not" is 1 - p, "any" the maximum
    assert soft["precision"] == pytest.approx(0.8) and soft["faithfulness"] == pytest.approx(0.6)
    assert soft["hallucination"] == pytest.approx(0.4 * 0.2) and soft["self_knowledge"] == pytest.approx(0.4 * 0.8)
    assert soft["noise_sensitivity_relevant"] == pytest.approx(0.6 * 0.5 * 0.2)
    assert soft["noise_sensitivity_irrelevant"] == pytest.approx(0.6 * 0.5 * (1 - 0.3) * 0.2)
    assert soft["context_utilization"] == pytest.approx(0.5 * 0.5 / 0.5)
    assert item_metrics(HAND, threshold=None) == pytest.approx(item_metrics(HAND))  # the same on 0/1 matrices


def test_malformed_matrices_are_refused():
    with pytest.raises(ValueError, match="response_in_gold: expected values in \\[0, 1\\] of shape \\(2,\\)"):
        ClaimChecks(("a", "b"), (), [1], np.zeros(0))
    with pytest.raises(ValueError, match="gold_in_chunks: expected .* shape \\(1, 2\\)"):
        ClaimChecks(("a",), ("g",), [1], [1], [[1, 0]], [[1]])
    with pytest.raises(ValueError, match="both chunk matrices"):
        ClaimChecks(("a",), ("g",), [1], [1], [[1]], None)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        ClaimChecks(("a",), (), [2], np.zeros(0))


def test_aggregate_averages_where_defined_and_counts():
    rows = [item_metrics(HAND), item_metrics(_no_response_claims())]
    means, defined = ragcheck.aggregate(rows)
    assert means["precision"] == pytest.approx(2 / 5) and defined["precision"] == 1
    assert means["recall"] == pytest.approx((3 / 4 + 0) / 2) and defined["recall"] == 2
    assert ragcheck.aggregate([])[0]["f1"] is None


def test_ragchecker_example_outputs_recomputed_from_their_matrices(data_root):
    path = datasets.ensure_fetched("ragchecker", root=data_root) / ragcheck.RAGCHECKER_EXAMPLE_OUTPUTS
    rows = ragcheck.read_ragchecker_outputs(path)
    assert len(rows) == 2
    ours = []
    for item, checks, theirs in rows:
        assert item.chunks is not None and checks.n_chunks == len(item.chunks)
        mine = item_metrics(checks)
        assert mine == pytest.approx({k: theirs[k] for k in ragcheck.METRICS}), item.id
        ours.append(mine)
    published = json.loads(path.read_text())["metrics"]  # RAGChecker's aggregate, x100, one decimal
    means, _ = ragcheck.aggregate(ours)
    for group in published.values():
        for name, value in group.items():
            assert round(100 * means[ragcheck.RAGCHECKER_NAMES.get(name, name)], 1) == value, name


# ---- reader


def test_reader_takes_ragcheckers_files_and_jsonl(data_root, tmp_path):
    items = ragcheck.read_items("ragchecker-examples", root=data_root)
    assert [i.id for i in items] == ["0", "1"] and len(items[0].chunks) == 4 and items[0].query.startswith("What")
    assert read_rag_items(data_root / ragcheck.RAGCHECKER_EXAMPLE_OUTPUTS) == items  # output fields are ignored
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "query": "q", "gt_answer": "g", "response": "", "retrieved_context": ["c1", {"text": "c2"}]},
        {"query": "q", "gt_answer": "g", "response": "r", "retrieved_context": []},
        {"query": "q", "gt_answer": "g", "response": "r", "meta": {"system": "bm25"}},
    ]))
    a, b, c = read_rag_items(path)
    assert (a.id, a.response, a.chunks) == ("a", "", ("c1", "c2"))
    assert (b.id, b.chunks) == ("2", ())  # no id: the position; [] retrieved nothing
    assert c.chunks is None and c.meta == {"system": "bm25"}  # no retrieved_context: none given


def test_reader_reports_every_problem_with_its_place(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([
        json.dumps({"id": "a", "query": "q", "gt_answer": "", "response": "r"}),
        json.dumps({"id": "b", "query": "q", "gt_answer": "g", "answer": "r"}),
        "not json",
        json.dumps({"id": "c", "query": "q", "gt_answer": "g", "response": "r", "retrieved_context": [""]}),
        json.dumps({"id": "d", "query": "q", "gt_answer": "g", "response": "r"}),
        json.dumps({"id": "d", "query": "q", "gt_answer": "g", "response": "r"}),
    ]))
    with pytest.raises(DataValidationError) as err:
        read_rag_items(path)
    problems = err.value.problems
    assert f"{path}:1: gt_answer: expected non-empty text, found ''" in problems
    assert any(p.startswith(f"{path}:2: answer: expected a known field") for p in problems)
    assert any(p.startswith(f"{path}:2: response: expected text") for p in problems)
    assert any(p.startswith(f"{path}:3: row: expected a JSON object") for p in problems)
    assert any(p.startswith(f"{path}:4: retrieved_context[0]: expected non-empty text") for p in problems)
    assert any(p.startswith(f"{path}:6: query_id: expected a unique id, found 'd' already used at {path}:5")
               for p in problems)
    assert len(problems) == 6
    broken = tmp_path / "bad.json"
    broken.write_text(json.dumps({"results": [{"query_id": "1", "query": "q", "gt_answer": "g"}]}))
    with pytest.raises(DataValidationError, match=r"bad.json: results\[0\]: response: expected text"):
        read_rag_items(broken)
    with pytest.raises(DataValidationError, match="expected a .json or .jsonl file"):
        read_rag_items(tmp_path / "items.csv")


# ---- the pipeline


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    judge_lm = load_lm("local:smollm2", cache=ResponseCache(tmp_path_factory.mktemp("ragcheck-cache")))
    yield judge_lm
    judge_lm.close()


TINY = [
    RagItem("paris", "Where is the Eiffel Tower?", "The Eiffel Tower is in Paris.",
            "The Eiffel Tower stands in Paris, France.",
            ("The Eiffel Tower is a tower in Paris.", "Berlin is the capital of Germany.")),
    RagItem("empty", "Where is the Eiffel Tower?", "The Eiffel Tower is in Paris.", "", ()),
]


@pytest.mark.model
@pytest.mark.slow
def test_pipeline_on_the_embedded_model(lm):
    checker = ragcheck.default_checker(lm, max_claims=2)
    lm.transcript = []
    results = ragcheck.check_claims(TINY, checker)
    sent, lm.transcript = lm.transcript, None
    paris, empty = results
    assert paris.error is None and empty.error is None
    c = paris.checks
    assert 1 <= len(c.response_claims) <= 2 and 1 <= len(c.gold_claims) <= 2
    assert c.response_in_chunks.shape == (len(c.response_claims), 2) and c.gold_in_chunks.shape == (len(c.gold_claims), 2)
    # the claims are the fact-check judge's extraction, and every entry its p("1") for that text and claim
    demo = [ragcheck.CLAIM_DEMO]
    assert list(c.response_claims) == checker.extract_facts(TINY[0].response, question=TINY[0].query, demos=demo)[0]
    assert list(c.gold_claims) == checker.extract_facts(TINY[0].gold_answer, question=TINY[0].query, demos=demo)[0]
    assert c.response_in_gold[0] == pytest.approx(checker.check_fact(TINY[0].gold_answer,
                                                                     c.response_claims[0]).distribution["1"])
    assert c.gold_in_chunks[-1, 1] == pytest.approx(checker.check_fact(TINY[0].chunks[1],
                                                                       c.gold_claims[-1]).distribution["1"])
    assert c.response_in_chunks.min() >= 0 and c.response_in_chunks.max() <= 1
    # the empty response has no claims, and no extraction was asked for it: two texts, two extractions
    assert empty.checks.response_claims == () and empty.checks.gold_claims == c.gold_claims
    assert sum(e["op"] == "generate" for e in sent) == 2
    # every check was asked once (the two items share their gold claims' checks), grouped by reference text
    prompts = [e["messages"][-1]["content"] for e in sent if e["op"] == "labels"]
    assert len(prompts) == len(set(prompts))
    texts = [p.split("[[ ## fact ## ]]")[0] for p in prompts]
    runs = [t for i, t in enumerate(texts) if i == 0 or t != texts[i - 1]]
    assert len(runs) == len(set(runs)) == 4  # the gold answer, the response, two chunks
    out = ragcheck.report(results)
    assert out["failed"] == 0 and out["items"][1]["metrics"]["precision"] is None
    assert out["defined"]["precision"] == 1 and out["defined"]["recall"] == 2
    # a second run is answered from the cache
    before = lm.engine.calls, lm.label_calls
    again = ragcheck.check_claims(TINY, checker)
    assert (lm.engine.calls, lm.label_calls) == before
    assert np.array_equal(again[0].checks.gold_in_chunks, c.gold_in_chunks)


def test_failures_are_kept_per_item_with_their_reason():
    def text(messages):  # the claim list: unreadable for one response
        source = messages[-1]["content"]
        return "no list here" if "BROKEN" in source else json.dumps([source.split("Text: ")[-1][:40]])

    def answer(messages, labels, prefix):  # no probability on the labels for one claim
        return {} if "UNCHECKABLE" in messages[-1]["content"] else {"1": 0.7, "0": 0.3}

    checker = FactCheckJudge(ScriptedLM(answer, text), instruction="entailment", max_facts=2)
    items = [RagItem("ok", "q", "Gold.", "Fine answer.", ("chunk",)),
             RagItem("broken", "q", "Gold.", "BROKEN answer."),
             RagItem("unchecked", "q", "Gold.", "UNCHECKABLE answer.")]
    ok, broken, unchecked = ragcheck.check_claims(items, checker)
    assert ok.error is None and ok.checks.response_in_chunks.tolist() == [[pytest.approx(0.7)]]
    assert broken.checks is None and broken.error.startswith("response claims: unreadable claim list: no JSON array")
    assert unchecked.checks is None and "checking claim 'UNCHECKABLE answer.'" in unchecked.error
    out = ragcheck.report([ok, broken, unchecked])
    assert out["failed"] == 2 and out["defined"]["precision"] == 1
    assert [i["parsed"] for i in out["items"]] == [True, False, False]


@pytest.mark.model
@pytest.mark.slow
def test_cli_ragcheck(tmp_path, lm, monkeypatch, capsys):
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(lm.cache.directory))
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(json.dumps({"query_id": i.id, "query": i.query, "gt_answer": i.gold_answer,
                                          "response": i.response, "retrieved_context": list(i.chunks)}) for i in TINY))
    assert cli.main(["ragcheck", "--data", str(path), "--lm", "local:smollm2", "--max-claims", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["aggregate"]) == set(ragcheck.METRICS) and [i["id"] for i in out["items"]] == ["paris", "empty"]
    assert out["threshold"] == 0.5 and out["items"][0]["entailment"]["response_in_chunks"]
    assert cli.main(["ragcheck", "--data", str(path), "--lm", "local:smollm2", "--max-claims", "2"]) == 0
    text = capsys.readouterr().out
    assert "paris: " in text and "context_precision" in text
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"query": "q", "response": "r"}) + "\n")
    assert cli.main(["ragcheck", "--data", str(bad), "--lm", "local:smollm2"]) == 2
    assert f"{bad}:1: gt_answer: expected non-empty text" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # refused by the parser, before any LM is loaded
        cli.main(["ragcheck", "--data", str(path), "--lm", "local:smollm2", "--max-claims", "40"])
    assert "argument --max-claims: expected a whole number from 2 to 12, got 40" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["ragcheck", "--data", str(path), "--threshold", "1.5"])


def test_catalog_examples_are_fetched_for_the_cli_name(tmp_path, mirror, monkeypatch, offline_catalog):
    """``ragchecker-examples`` names RAGChecker's example inputs: missing without a mirror (a named error,
    nothing half-written), copied byte for byte and checksummed from one, then read as its two items."""
    monkeypatch.delenv("JUDGETUNE_DATA_MIRROR", raising=False)
    root = tmp_path / "data"
    with pytest.raises(DataNotFoundError, match="ragchecker: .* missing"):
        ragcheck.read_items("ragchecker-examples", root=root)
    assert not (root / ragcheck.RAGCHECKER_EXAMPLES).exists()
    items = ragcheck.read_items("ragchecker-examples", root=root, mirror=mirror)
    copied = root / ragcheck.RAGCHECKER_EXAMPLES
    assert copied.read_bytes() == (mirror / ragcheck.RAGCHECKER_EXAMPLES).read_bytes()
    assert [i.id for i in items] == ["0", "1"] and items == read_rag_items(copied)
    assert all(i.query and i.gold_answer and i.response and i.chunks for i in items)
