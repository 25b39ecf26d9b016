"""NRP: the formula, the tie rule, one call per answer giving the naive path's ranks, RBO / Kendall on
hand-made rankings, the readers, the paper's picture from the shipped monoT5 scores, and a frozen
judge on the embedded model as a ranker."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import rbo as rbo_package

from judgetune.cli import main
from judgetune.config import JudgeConfig
from judgetune.datasets import Example
from judgetune.errors import DataValidationError, JudgetuneError
from judgetune.judges import make_judge
from judgetune.nrp import (
    Answer,
    BM25Ranker,
    Collection,
    Document,
    JudgeRanker,
    PrecomputedRanker,
    answer_nrp,
    expert_agreement,
    make_ranker,
    normalized_rank_position,
    place_answers,
    rank_among,
    rank_by_sorting,
    ranks_in_sorted,
    read_clef_ehealth,
    read_folder,
    read_scores,
    run_nrp,
    score_documents,
    summarize,
)


def test_nrp_is_one_minus_rank_over_the_number_of_documents():
    assert normalized_rank_position(0, 250) == 1.0
    assert normalized_rank_position(25, 250) == 0.9
    assert normalized_rank_position(250, 250) == 0.0
    assert answer_nrp(0.5, [0.9, 0.6, 0.1, 0.7]) == 0.25  # three documents above: 1 - 3/4
    with pytest.raises(ValueError):
        normalized_rank_position(3, 2)
    with pytest.raises(ValueError):
        normalized_rank_position(0, 0)


def test_ties_with_documents_follow_the_stated_rule():
    documents = [0.9, 0.5, 0.5, 0.1]
    assert rank_among(0.5, documents) == 1  # answer-first: only 0.9 is above
    assert rank_among(0.5, documents, ties="document-first") == 3  # both tied documents go above too
    assert answer_nrp(0.5, documents) == 0.75 and answer_nrp(0.5, documents, ties="document-first") == 0.25
    assert rank_by_sorting(0.5, documents) == 1 and rank_by_sorting(0.5, documents, ties="document-first") == 3
    assert list(ranks_in_sorted([0.5, 0.95, 0.1, 0.0], np.sort(documents))) == [1, 0, 3, 4]
    assert list(ranks_in_sorted([0.5, 0.95, 0.1, 0.0], np.sort(documents), ties="document-first")) == [3, 0, 4, 4]
    with pytest.raises(ValueError, match="ties must be one of"):
        rank_among(0.5, documents, ties="random")


@pytest.mark.parametrize("ties", ["answer-first", "document-first"])
def test_binary_search_placement_equals_sorting_all_items(ties):
    rng = np.random.default_rng(7)
    for _ in range(300):
        documents = rng.integers(0, 6, rng.integers(1, 12)).astype(float)  # small integers: many ties
        answers = rng.integers(-1, 7, 5).astype(float)
        fast = ranks_in_sorted(answers, np.sort(documents), ties=ties)
        for answer, rank in zip(answers, fast):
            assert rank == rank_by_sorting(answer, documents, ties=ties) == rank_among(answer, documents, ties=ties)


def hand_made_folder(root: Path) -> Path:
    rows = {
        "queries.jsonl": [{"query_id": "q1", "text": "how to treat a sprained ankle"},
                          {"query_id": 2, "text": "symptoms of iron deficiency anemia"}],
        "documents.jsonl": [
            {"query_id": "q1", "doc_id": "a", "text": "Rest, ice, compression and elevation treat a sprained ankle.",
             "judgments": {"relevance": 2, "readability": 1}},
            {"query_id": "q1", "doc_id": "b", "text": "Ankle sprains heal in weeks with rest.",
             "judgments": {"relevance": 1, "readability": 2}},
            {"query_id": "q1", "doc_id": "c", "text": "Our shop sells running shoes.", "judgments": {"relevance": 0}},
            {"query_id": "2", "doc_id": "a", "text": "Iron deficiency anemia symptoms: fatigue, pale skin.",
             "judgments": {"relevance": 2}},
            {"query_id": "2", "doc_id": "b", "text": "Anemia is common.", "judgments": {"relevance": 1}},
        ],
        "answers.jsonl": [
            {"query_id": "q1", "system": "big", "prompt": "plain", "text": "Treat a sprained ankle: rest, ice, elevation."},
            {"query_id": "q1", "system": "small", "prompt": "plain", "text": "Shoes are nice."},
            {"query_id": "q1", "system": "small", "prompt": "plain", "text": "An ankle sprain needs rest."},
            {"query_id": "2", "system": "big", "prompt": "plain", "text": "Symptoms of iron deficiency anemia: fatigue."},
            {"query_id": "2", "system": "small", "prompt": "plain", "text": "I do not know."},
        ],
        "expert.jsonl": [{"query_id": "q1", "ranking": ["big_q1_plain_1", "a", "small_q1_plain_2", "small_q1_plain_1"]}],
    }
    for name, records in rows.items():
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (root / "sizes.json").write_text(json.dumps({"big": 7, "small": 0.1}), encoding="utf-8")
    return root


def test_the_folder_reader_numbers_answers_and_keeps_every_field(tmp_path):
    c = read_folder(hand_made_folder(tmp_path))
    assert c.queries == {"q1": "how to treat a sprained ankle", "2": "symptoms of iron deficiency anemia"}
    assert [a.answer_id for a in c.answers] == ["big_q1_plain_1", "small_q1_plain_1", "small_q1_plain_2",
                                                "big_2_plain_1", "small_2_plain_1"]
    assert c.dimensions == ["readability", "relevance"] and c.documents[2].judgments == {"relevance": 0.0}
    assert c.sizes == {"big": 7.0, "small": 0.1} and c.expert["q1"][0] == "big_q1_plain_1"


def test_the_folder_reader_reports_every_problem_with_file_line_and_field(tmp_path):
    folder = hand_made_folder(tmp_path)
    with (folder / "documents.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"query_id": "q1", "doc_id": "d", "text": "x", "judgments": {"relevance": "high"}}) + "\n")
        handle.write("{not json\n")
        handle.write(json.dumps({"query_id": "q1", "doc_id": "e", "txt": "typo", "judgments": {"relevance": 1}}) + "\n")
    with (folder / "answers.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"query_id": "q1", "prompt": "plain", "text": "no system"}) + "\n")
        handle.write(json.dumps({"query_id": "q1", "system": " ", "prompt": "plain", "text": "  "}) + "\n")
    (folder / "sizes.json").write_text('{"big": true, "small": 1e999}', encoding="utf-8")
    with pytest.raises(DataValidationError) as caught:
        read_folder(folder)
    problems = caught.value.problems
    assert f"{folder / 'documents.jsonl'}:6: judgments: expected an object of quality dimension -> grade >= 0" \
        in problems[0]
    assert any(p.startswith(f"{folder / 'documents.jsonl'}:7: row: expected a JSON object") for p in problems)
    assert any(p.startswith(f"{folder / 'documents.jsonl'}:8: txt: unknown field") for p in problems)
    assert any(p.startswith(f"{folder / 'documents.jsonl'}:8: text: expected a non-blank string, found nothing")
               for p in problems)
    assert any(p.startswith(f"{folder / 'answers.jsonl'}:6: system: expected a non-blank string") for p in problems)
    assert any(p.startswith(f"{folder / 'answers.jsonl'}:7: system: expected a non-blank string") for p in problems)
    assert any(p.startswith(f"{folder / 'answers.jsonl'}:7: text: expected a non-blank string") for p in problems)
    assert any(p.startswith(f"{folder / 'sizes.json'}: expected an object of system -> parameters") for p in problems)


def test_answers_of_a_query_without_documents_and_unknown_expert_items_are_refused(tmp_path):
    folder = hand_made_folder(tmp_path)
    with (folder / "answers.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"query_id": "q9", "system": "big", "prompt": "plain", "text": "orphan"}) + "\n")
    (folder / "expert.jsonl").write_text(json.dumps({"query_id": "q1", "ranking": ["a", "zz"]}) + "\n")
    with pytest.raises(DataValidationError) as caught:
        read_folder(folder)
    text = str(caught.value)
    assert "query q9: answers but no judged documents" in text and "unknown item(s) ['zz']" in text


def test_an_empty_answers_file_is_refused_up_front_and_nothing_is_written(tmp_path, run_cli):
    (tmp_path / "data").mkdir()
    folder = hand_made_folder(tmp_path / "data")
    (folder / "answers.jsonl").write_text("\n")
    code, _, err = run_cli(["nrp", "--data", str(folder), "--ranker", "bm25", "--out", str(tmp_path / "out")])
    assert code == 2 and err.strip().endswith(f"{folder / 'answers.jsonl'}: no answers (expected one JSON object a "
                                              "line with query_id, system, prompt, text)")
    assert not (tmp_path / "out").exists()
    c = read_folder(hand_made_folder(tmp_path / "data"))
    with pytest.raises(JudgetuneError, match="no answers to place"):
        run_nrp(Collection(c.queries, c.documents, []), [BM25Ranker().fit(c)])


def test_a_repeated_query_document_ordering_or_score_is_refused_with_both_lines(tmp_path, caplog):
    folder = hand_made_folder(tmp_path)
    for name, row in (("queries.jsonl", {"query_id": "q1", "text": "another question"}),
                      ("documents.jsonl", {"query_id": "2", "doc_id": "b", "text": "again", "judgments": {"relevance": 0}}),
                      ("expert.jsonl", {"query_id": "q1", "ranking": ["a", "b"]})):
        with (folder / name).open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
    with pytest.raises(DataValidationError) as caught:
        read_folder(folder)
    assert caught.value.problems == [
        f"{folder / 'queries.jsonl'}:3: query_id: expected each query once, found 'q1' again (first on line 1)",
        f"{folder / 'documents.jsonl'}:6: doc_id: expected each document of a query once, found 'b' of query 2 again "
        "(first on line 5)",
        f"{folder / 'expert.jsonl'}:2: query_id: expected one ordering per query, found 'q1' again (first on line 1)"]
    scores = tmp_path / "scores.jsonl"
    scores.write_text("".join(json.dumps(r) + "\n" for r in [
        {"query_id": "q1", "id": "a", "score": 1}, {"query_id": "q9", "id": "a", "score": 2},
        {"query_id": "q1", "id": "a", "score": 3}, {"query_id": "q9", "id": "b", "score": 2}]))
    with pytest.raises(DataValidationError) as caught:
        read_scores(scores, ["q1", "2"])
    assert caught.value.problems == [
        f"{scores}:3: id: expected one score per query and id, found 'a' of query q1 again (first on line 1)"]
    # a file made for a larger collection: its other queries' rows are left out, and said
    scores.write_text("".join(json.dumps(r) + "\n" for r in [
        {"query_id": "q1", "id": "a", "score": 1}, {"query_id": "q9", "id": "a", "score": 2},
        {"query_id": "q9", "id": "b", "score": 2}]))
    with caplog.at_level(logging.WARNING, logger="judgetune.nrp"):
        assert read_scores(scores, ["q1", "2"]) == {("q1", "a"): 1.0}
    assert "2 row(s) of 1 query id(s) not in the data are left out (the first, 'q9', on line 2)" in caplog.text


def test_nrp_out_is_never_an_input_and_replaced_only_with_force(tmp_path, run_cli):
    (tmp_path / "data").mkdir()
    folder = hand_made_folder(tmp_path / "data")
    kept = tmp_path / "kept"
    kept.mkdir()
    scores = kept / "answers.jsonl"  # a scores file named as an output would replace it
    scores.write_text(json.dumps({"query_id": "q1", "id": "a", "score": 1}) + "\n")
    for force in ([], ["--force"]):
        code, _, err = run_cli(["nrp", "--data", str(folder), "--ranker", f"scores:{scores}", "--out", str(kept), *force])
        assert code == 2 and f"--out {kept}: that is or holds {scores}, an input of this command" in err
    assert scores.read_text() == json.dumps({"query_id": "q1", "id": "a", "score": 1}) + "\n"
    out = tmp_path / "out"
    out.mkdir()
    (out / "nrp_vs_size.png").write_text("a previous run's")
    argv = ["nrp", "--data", str(folder), "--ranker", "bm25", "--out", str(out), "--json"]
    code, _, err = run_cli(argv)
    assert code == 2 and f"--out {out}: the folder exists and is not empty; pass --force" in err
    assert [p.name for p in out.iterdir()] == ["nrp_vs_size.png"]
    (folder / "sizes.json").unlink()
    assert run_cli([*argv, "--force"])[0] == 0
    assert sorted(p.name for p in out.iterdir()) == ["answers.jsonl", "nrp_by_system.png", "summary.json"]


def test_the_default_out_folder_of_nrps_own_results_is_replaced_by_a_rerun(tmp_path, run_cli, monkeypatch):
    """runs/nrp-DATA-RANKER holding only what nrp writes is replaced by the same command again (and a second ranker
    may be added); a file of the user's there is refused, as in any --out."""
    (tmp_path / "data").mkdir()
    folder = hand_made_folder(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    argv = ["nrp", "--data", str(folder), "--ranker", "bm25", "--json"]
    assert run_cli(argv)[0] == 0 and run_cli(argv)[0] == 0
    assert run_cli([*argv, "--ranker", "scores:" + str(tmp_path / "none.jsonl")])[0] == 2  # (a missing file)
    default = tmp_path / "runs" / f"nrp-{folder.name}-bm25"
    (default / "notes.txt").write_text("mine")
    code, _, err = run_cli(argv)
    assert code == 2 and "(the default --out): the folder exists and is not empty; pass --force" in err


def test_query_selections_that_keep_no_answer_are_refused(tmp_path, run_cli):
    folder = hand_made_folder(tmp_path)
    (folder / "expert.jsonl").unlink()
    code, _, err = run_cli(["nrp", "--data", str(folder), "--ranker", "bm25", "--expert-queries"])
    assert code == 2 and err.strip().endswith(f"--expert-queries: {folder} has no expert.jsonl, so no query has an "
                                              "expert ordering to keep")
    (folder / "expert.jsonl").write_text(json.dumps({"query_id": "2", "ranking": ["b", "a"]}) + "\n")
    with (folder / "answers.jsonl").open("w", encoding="utf-8") as handle:  # query 2's answers gone
        handle.write(json.dumps({"query_id": "q1", "system": "big", "prompt": "plain", "text": "Rest."}) + "\n")
    code, _, err = run_cli(["nrp", "--data", str(folder), "--ranker", "bm25", "--expert-queries"])
    assert code == 2 and "--expert-queries: the 1 query(ies) kept have no answers to place" in err


@pytest.mark.parametrize("ties", ["answer-first", "document-first"])
def test_one_call_per_answer_gives_the_naive_ranks_at_a_fraction_of_the_calls(tmp_path, ties):
    c = read_folder(hand_made_folder(tmp_path))
    ranker = BM25Ranker().fit(c)
    documents = score_documents(ranker, c)
    assert ranker.calls == len(c.documents)
    fast = place_answers(ranker, c, documents, ties=ties)
    assert ranker.calls == len(c.documents) + len(c.answers)
    before = ranker.calls
    naive = place_answers(ranker, c, documents, ties=ties, naive=True)
    assert ranker.calls - before == 3 * (3 + 1) + 2 * (2 + 1)  # every answer re-ranks |D_q| + 1 items
    assert [(p.answer_id, p.rank, p.nrp) for p in fast] == [(p.answer_id, p.rank, p.nrp) for p in naive]
    by_id = {p.answer_id: p for p in fast}
    assert by_id["big_q1_plain_1"].rank == 0
    # "Shoes are nice." and the shoe shop's page share no query term: both score 0, a tie with one document
    assert by_id["small_q1_plain_1"].score == 0.0 == documents["q1"]["c"]
    assert by_id["small_q1_plain_1"].rank == (2 if ties == "answer-first" else 3)


def test_summary_rows_average_answers_and_count_failures():
    scores = {("q", "d1"): 3.0, ("q", "d2"): 1.0, ("q", "s_1"): 2.0, ("q", "s_2"): 4.0, ("r", "d1"): 1.0,
              ("r", "s_1"): 0.0}
    documents = [Document("q", "d1", "", {"relevance": 1}), Document("q", "d2", "", {"relevance": 0}),
                 Document("r", "d1", "", {"relevance": 1})]
    c = Collection({"q": "q", "r": "r"}, documents,
                   [Answer("q", "s_1", "s", "p", ""), Answer("q", "s_2", "s", "p", ""), Answer("r", "s_1", "s", "p", ""),
                    Answer("q", "t_1", "t", "p", "")])
    scores[("q", "t_1")] = None

    class Lookup(PrecomputedRanker):
        def _score(self, query_id, query, items):
            return [self.scores[(query_id, i)] for i, _ in items]

    ranker = Lookup("lookup", scores)
    placements = place_answers(ranker, c, score_documents(ranker, c))
    assert [(p.answer_id, p.rank, p.nrp) for p in placements] == [("s_1", 1, 0.5), ("s_2", 0, 1.0), ("t_1", None, None),
                                                                  ("s_1", 1, 0.0)]
    rows = summarize(placements, n_resamples=200)
    s = next(r for r in rows if r["system"] == "s")
    assert (s["n"], s["failed"]) == (3, 0) and s["nrp_mean"] == pytest.approx(0.5)
    assert s["nrp_low"] <= s["nrp_mean"] <= s["nrp_high"]
    t = next(r for r in rows if r["system"] == "t")
    assert (t["n"], t["failed"], t["nrp_mean"]) == (0, 1, None)


def test_rbo_and_kendall_on_hand_made_rankings():
    expert = {"1": ["a", "b", "c", "d"], "2": ["a", "b", "c", "d"], "3": ["a", "b", "c", "d"]}
    same = {("1", i): s for i, s in zip("abcd", (4, 3, 2, 1))}
    reverse = {("2", i): s for i, s in zip("abcd", (1, 2, 3, 4))}
    swapped = {("3", i): s for i, s in zip("abcd", (3, 4, 2, 1))}  # the ranker puts b above a
    assert expert_agreement({"1": expert["1"]}, same) == {"rbo": 1.0, "kendall": 1.0, "topics": 1, "skipped": [], "p": 1.0}
    reversed_ = expert_agreement({"2": expert["2"]}, reverse)
    assert reversed_["kendall"] == pytest.approx(-1.0)
    assert reversed_["rbo"] == pytest.approx((0 + 0 + 2 / 3 + 1) / 4)  # overlaps at depths 1..4: 0, 0, 2, 4
    one_swap = expert_agreement({"3": expert["3"]}, swapped)
    assert one_swap["kendall"] == pytest.approx(4 / 6)  # 5 concordant pairs, 1 discordant: (5 - 1) / 6
    assert one_swap["rbo"] == pytest.approx((0 + 1 + 1 + 1) / 4)
    all_three = expert_agreement(expert, {**same, **reverse, **swapped})
    assert all_three["topics"] == 3 and all_three["kendall"] == pytest.approx((1 - 1 + 4 / 6) / 3)
    for scores, ranking in ((same, "abcd"), (reverse, "dcba"), (swapped, "bacd")):
        assert expert_agreement({k: v for k, v in expert.items() if (k, "a") in scores}, scores)["rbo"] == pytest.approx(
            rbo_package.RankingSimilarity(list("abcd"), list(ranking)).rbo(p=1))
    p9 = expert_agreement({"3": expert["3"]}, swapped, p=0.9)
    assert p9["rbo"] == pytest.approx(rbo_package.RankingSimilarity(list("abcd"), list("bacd")).rbo(p=0.9))
    skipped = expert_agreement({"9": ["a", "x"]}, {("9", "a"): 1.0})
    assert (skipped["rbo"], skipped["topics"], skipped["skipped"]) == (None, 0, ["9"])


def test_clef_reader_counts(data_root):
    top1 = read_clef_ehealth(root=data_root)
    assert (len(top1.queries), len(top1.documents), len(top1.answers), len(top1.expert)) == (50, 250, 400, 20)
    assert {a.system for a in top1.answers} >= {"chatgpt", "gpt2", "meta-llama_Llama-2-13b-chat-hf"}
    assert top1.dimensions == ["credibility", "readability", "relevance"]
    assert sum("credibility" not in d.judgments for d in top1.documents) > 0  # 3 = "unable to judge" is left out
    full = read_clef_ehealth(answers="multimedqa", root=data_root)
    assert len({a.system for a in full.answers}) == 13 and len(full.answers) == 13 * 50 * 10
    texts = full.item_texts()
    assert all((q, i) in texts for q, r in full.expert.items() for i in r)  # expert items are in the full set too
    prompts = read_clef_ehealth(answers="prompts", root=data_root)
    assert len(prompts.answers) == 8 * 4 * 50 * 10
    assert {a.prompt for a in prompts.answers} == {"multimedqa", "question", "q", "no_prompt"}
    assert all((a.query_id, a.answer_id) in prompts.scores["monot5"] for a in prompts.answers)
    top_answer = top1.answers[0]  # the top-1 file and the ranking file agree on its monoT5 score
    assert prompts.scores["monot5"][(top_answer.query_id, top_answer.answer_id)] == \
        top1.scores["monot5"][(top_answer.query_id, top_answer.answer_id)]


def test_nrp_with_the_shipped_monot5_scores_gives_the_papers_picture(data_root, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(data_root))
    out = tmp_path / "run"
    assert main(["nrp", "--data", "nrp-clef-ehealth", "--ranker", "monot5", "--ranker", "bm25", "--out", str(out),
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["chosen"] == "monot5" and [r["name"] for r in result["rankers"]] == ["monot5", "bm25"]
    order = [r["system"] for r in result["systems"]]
    assert set(order[:2]) == {"chatgpt", "meta-llama_Llama-2-13b-chat-hf"} and order[-1] == "gpt2"
    assert all(r["n"] == 50 and r["failed"] == 0 for r in result["systems"])
    assert round(result["agreement"]["rbo"], 2) == 0.84 and round(result["agreement"]["kendall"], 2) == 0.64
    assert result["agreement"]["topics"] == 20
    assert result["placement"] == {**result["placement"], "naive": False, "ranker_calls": 400}
    assert set(result["rankers"][0]["ndcg@10"]) == {"relevance", "readability", "credibility"}
    answers = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    assert len(answers) == 400 and all(a["nrp"] == 1 - a["rank"] / a["n_documents"] for a in answers)
    assert (out / "nrp_by_system.png").stat().st_size > 10_000 and (out / "nrp_vs_size.png").stat().st_size > 10_000


def test_nrp_command_errors_are_clean(tmp_path, capsys):
    assert main(["nrp", "--data", str(tmp_path), "--ranker", "bm25"]) == 2
    assert "missing queries.jsonl" in capsys.readouterr().err
    folder = hand_made_folder(tmp_path)
    assert main(["nrp", "--data", str(folder), "--ranker", "monot5"]) == 2
    assert "--ranker monot5: its scores ship only with --data nrp-clef-ehealth" in capsys.readouterr().err
    assert main(["nrp", "--data", str(folder), "--ranker", "bogus"]) == 2
    assert "unknown ranker 'bogus'" in capsys.readouterr().err
    assert main(["nrp", "--data", str(folder), "--ranker", "bm25", "--answers", "multimedqa"]) == 2
    assert "--answers multimedqa: only for --data nrp-clef-ehealth" in capsys.readouterr().err
    assert main(["nrp", "--data", str(folder), "--ranker", f"scores:{tmp_path / 'nope.jsonl'}"]) == 2
    assert f"--ranker scores:{tmp_path / 'nope.jsonl'}: no such file" in capsys.readouterr().err
    (tmp_path / "scores.tsv").write_text("query_id\tid\tscore\nq1\ta\t1\n")
    assert main(["nrp", "--data", str(folder), "--ranker", f"scores:{tmp_path / 'scores.tsv'}"]) == 2
    assert capsys.readouterr().err.strip().endswith(f"{tmp_path / 'scores.tsv'}: expected a .jsonl or .csv file of "
                                                    "query_id, id, score, found suffix '.tsv'")
    for p in ("0", "1.5", "nan"):
        with pytest.raises(SystemExit) as caught:
            main(["nrp", "--data", str(folder), "--ranker", "bm25", "--rbo-p", p])
        assert caught.value.code == 2 and "argument --rbo-p: expected a persistence in (0, 1]" in capsys.readouterr().err
    assert main(["nrp", "--data", str(folder), "--ranker", "bm25", "--select-by", "credibility"]) == 2
    assert "expected mean or one of readability, relevance" in capsys.readouterr().err
    (tmp_path / "scores.jsonl").write_text(json.dumps({"query_id": "q1", "id": "a", "score": 1}) + "\n")
    assert main(["nrp", "--data", str(folder), "--ranker", f"scores:{tmp_path / 'scores.jsonl'}"]) == 2
    assert "ranker scores:scores.jsonl: no score for query 2, item(s) ['a', 'b']" in capsys.readouterr().err


@pytest.mark.slow
def test_a_frozen_judge_on_the_embedded_model_ranks_with_its_calibrated_score(tmp_path, monkeypatch, uncached_lm):
    """The ranker loads the frozen judge.json and its own model; the expected scores are recomputed here
    from the label distributions of the unfrozen judge on a separate, uncached model: the rubric's
    expected 1-5 value mapped linearly onto the human 0-2 range."""
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    params = {"k": 0, "reasoning": False}
    judge = make_judge("rubric", uncached_lm, train=[], label_range=(0, 2), params=params)
    config = JudgeConfig.from_judge(judge, lm={"spec": "local:smollm2"}, calibrator=None, label_range=(0, 2))
    path = config.save(tmp_path / "judge.json")
    (tmp_path / "data").mkdir()
    c = read_folder(hand_made_folder(tmp_path / "data"))
    ranker = make_ranker(f"judge:{path}", c)
    assert isinstance(ranker, JudgeRanker) and ranker.name == f"judge:{tmp_path.name}"
    result = run_nrp(c, [ranker], n_resamples=100)
    expected = []
    for a in c.answers:
        verdict = judge(Example(id="x", question=c.queries[a.query_id], answer=a.text, group=a.query_id))
        mean = sum(float(label) * p for label, p in verdict.distribution.items())
        assert set(verdict.distribution) == {"1", "2", "3", "4", "5"} and verdict.score == pytest.approx(mean)
        expected.append((mean - 1) * 2 / 4)
    by_id = {a["answer_id"]: a["score"] for a in result["answers"]}
    assert [by_id[a.answer_id] for a in c.answers] == pytest.approx(expected, abs=1e-4)  # batched vs one at a time
    assert len({round(x, 4) for x in expected}) == len(expected)  # the answers' scores differ: order is tested
    documents = score_documents(ranker, c)
    for row in result["answers"]:  # rank: the query's documents scored above it (ties: the answer first)
        assert row["rank"] == sum(s > row["score"] for s in documents[row["query_id"]].values())
    naive = place_answers(ranker, c, documents, naive=True)
    assert [a["rank"] for a in result["answers"]] == [p.rank for p in naive]
    assert result["agreement"]["topics"] == 1


def test_unknown_precomputed_items_name_the_query_and_item():
    ranker = PrecomputedRanker("file", {("q", "a"): 1.0})
    with pytest.raises(JudgetuneError, match=r"ranker file: no score for query q, item\(s\) \['b'\]"):
        ranker.score("q", "text", [("a", ""), ("b", "")])


def test_the_bm25_ranker_and_the_bm25_judge_are_one_bm25():
    # the judge fitted on a collection's documents freezes the statistics the ranker fits on the same documents
    query = "how to treat a sprained ankle"
    docs = ["Rest, ice, compression and elevation treat a sprained ankle.", "Ankle sprains heal in weeks with rest.",
            "Our shop sells running shoes.", "Treating ankles: sprained ankles want ice and rest, and a doctor."]
    items = [Example(id=str(i), question=query, answer=d, group="q", label=0.0) for i, d in enumerate(docs)]
    judged = make_judge("bm25", train=items, label_range=(0.0, 1.0)).judge_all(items)
    ranked = BM25Ranker().fit(Collection({"q": query}, [Document("q", str(i), d, {}) for i, d in enumerate(docs)], []))
    scores = ranked.score("q", query, [(str(i), d) for i, d in enumerate(docs)])
    assert scores == pytest.approx([v.score for v in judged], rel=1e-5)
    assert scores[3] > scores[1] > 0 == scores[2]  # "Treating ankles" matches treat/sprain/ankle once stemmed
