"""Converters from each catalog source's raw files to Examples. One function per file format."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from judgetune.datasets._schema import Example, Reference

Converter = Callable[[Path], list[Example]]

csv.field_size_limit(2**31 - 1)  # some generated answers and documents exceed csv's 128 kB default


def _load_json(path: Path):
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)


def linkage_graded(relpath: str, prefix: str) -> Converter:
    """LINKAGE ANTIQUE / TREC-DL-NF: question -> graded passages. One Example per passage."""

    def convert(root: Path) -> list[Example]:
        examples = []
        for qi, (question, passages) in enumerate(_load_json(root / relpath).items()):
            group = f"{prefix}-q{qi:03d}"
            for pi, item in enumerate(passages):
                doc_id = item.get("doc_id", item.get("docid"))
                examples.append(Example(id=f"{group}/{pi}", question=question, answer=item["passage"],
                                        label=float(item["label"]), group=group, meta={"doc_id": doc_id}))
        return examples

    return convert


def linkage_webglm(root: Path) -> list[Example]:
    """LINKAGE WebGLM: 3 graded candidates per question, reference answers ground0 (worst) .. groundN (best)."""
    examples = []
    for qi, (question, item) in enumerate(_load_json(root / "linkage/WEBGLM_50.json").items()):
        grounds = sorted((k for k in item if k.startswith("ground")), key=lambda k: int(k[len("ground"):]))
        # groundN is the best written reference; its grade is its index, so best first is reversed order
        references = tuple(Reference(item[k].strip(), float(i)) for i, k in reversed(list(enumerate(grounds))))
        group = f"webglm-q{qi:03d}"
        for candidate in item["doc_list"]:
            examples.append(Example(id=f"{group}/{candidate['model']}", question=question,
                                    answer=candidate["answer"].strip(), references=references,
                                    label=float(candidate["label"]), group=group,
                                    meta={"model": candidate["model"]}))
    return examples


def sts_msrpar(root: Path) -> list[Example]:
    """STS 2012 MSRpar: `score<TAB>s1<TAB>s2`, official train and test files."""
    examples = []
    for split in ("train", "test"):
        path = root / f"sts/sts2012_msrpar/MSRpar.{split}.tsv"
        with path.open(encoding="utf-8") as handle:
            for line, row in enumerate(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
                score, s1, s2 = row
                examples.append(Example(id=f"msrpar-{split}-{line:04d}", answer=s2, references=(Reference(s1),),
                                        label=float(score), meta={"split": split}))
    return examples


def sts_benchmark(root: Path) -> list[Example]:
    """STS-B: genre, source file, year, id, score, s1, s2 (some rows add trailing source columns)."""
    examples = []
    for split in ("train", "dev", "test"):
        path = root / f"sts/stsbenchmark/sts-{split}.csv"
        with path.open(encoding="utf-8") as handle:
            for line, row in enumerate(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
                genre, source, year, _, score, s1, s2 = row[:7]
                examples.append(Example(id=f"stsb-{split}-{line:04d}", answer=s2, references=(Reference(s1),),
                                        label=float(score),
                                        meta={"split": split, "genre": genre, "source": source, "year": year}))
    return examples


def ragchecker_pairs(root: Path) -> list[Example]:
    """RAGChecker human pairs: 280 instances, each labeled by two annotators on consecutive rows.

    ``preference`` is the overall label (-2..+2, positive: model2's response better); the
    correctness and completeness labels sit in ``meta``.
    """
    examples = []
    rows = _load_json(root / "ragchecker/human_labeled_data.json")
    seen: dict[int, int] = {}
    for row in rows:
        instance = row["instance_id"]
        seen[instance] = annotator = seen.get(instance, 0) + 1
        examples.append(Example(
            id=f"ragchecker-{instance:03d}-a{annotator}", question=row["query"],
            answer=row["model1"]["response"], answer_b=row["model2"]["response"],
            references=(Reference(row["gt_answer"]),), preference=float(row["overall_label"]),
            group=f"{row['dataset']}:{row['query_id']}",
            meta={"instance_id": instance, "annotator": annotator, "dataset": row["dataset"],
                  "model_a": row["model1"]["model_name"], "model_b": row["model2"]["model_name"],
                  "correctness": row["correctness_label"], "completeness": row["completeness_label"],
                  "overall": row["overall_label"]}))
    return examples


def summac_subset(subset: str) -> Converter:
    """SummaC validation subset: a summary sentence (claim) checked against its source document."""

    def convert(root: Path) -> list[Example]:
        examples = []
        for key, item in _load_json(root / f"summac_subsets/{subset}.json").items():
            if item["label"] not in ("0", "1", 0, 1):
                raise ValueError(f"summac_subsets/{subset}.json: {key}: label: expected 0 or 1, found {item['label']!r}")
            document_hash = hashlib.sha1(item["document"].encode("utf-8")).hexdigest()[:12]
            examples.append(Example(id=key, answer=item["claim"], context=(item["document"],),
                                    label=float(item["label"]), group=f"doc-{document_hash}",
                                    meta={"origin": item.get("origin"), "source_id": item.get("id")}))
        return examples

    return convert


def llmbar(subset: str) -> Converter:
    """LLMBar (JUDGE-BENCH export): instruction, output_a, output_b, the human majority choice.

    ``preference`` is -1 when output_a (``answer``) is better and +1 when output_b is.
    """

    def convert(root: Path) -> list[Example]:
        examples = []
        for item in _load_json(root / f"llmbar/llmbar_{subset}.json")["instances"]:
            choice = item["annotations"]["quality_single_turn"]["majority_human"]
            if choice not in ("model_a", "model_b"):
                raise ValueError(f"llmbar_{subset}.json: {item['id']}: expected model_a or model_b, found {choice!r}")
            instance = item["instance"]
            examples.append(Example(id=item["id"], question=instance["input"], answer=instance["output_a"],
                                    answer_b=instance["output_b"], preference=-1.0 if choice == "model_a" else 1.0,
                                    meta={"subset": item["id"].rsplit("_", 1)[0]}))
        return examples

    return convert


def nrp_clef_ehealth(root: Path) -> list[Example]:
    """NRP (CLEF eHealth 2021): per topic, the top generated answer of 8 LLMs and 5 judged documents.

    Documents carry their relevance (0-2) as ``label`` and readability / credibility in ``meta``;
    generated answers are unlabeled. ``meta['monot5_score']`` is the paper's monoT5 score.
    """
    base = root / "nrp_webis"
    judgments = clef_judgments(base)
    topics = read_clef_topics(base / "topics/topics.txt")
    examples = []
    for qid, row in clef_top1_rows(base):
        judged = judgments.get((qid, row["docno"]))
        meta = {"docno": row["docno"], "monot5_score": float(row["score"]),
                "kind": "document" if judged else "generated"}
        if judged:
            meta.update(credibility=judged[1], readability=judged[2])
        else:
            meta["llm"] = generated_answer_llm(row["docno"])
        examples.append(Example(id=f"nrp-{qid}/{row['docno']}", question=topics[qid], answer=row["text"],
                                label=None if judged is None else float(judged[0]), group=qid, meta=meta))
    return examples


def clef_judgments(base: Path) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(topic id, docno) -> (relevance, credibility, readability) from the CLEF eHealth 2021 assessments;
    credibility 3 means the assessor could not judge it."""
    judgments = {}
    with (base / "assessments/qrels_cred_read.txt").open(encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            qid, docno, rel, cred, read = line.split()
            judgments[(qid, docno)] = (int(rel), int(cred), int(read))
    return judgments


def clef_top1_rows(base: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """(topic id, row) of the NRP paper's top-1 files, topics in numeric order: judged documents and
    each LLM's top answer, with ``docno``, ``text`` and the monoT5 ``score``."""
    for path in sorted(base.glob("top_1_answers_with_original_ranking/qid_*.csv"), key=lambda p: int(p.stem[4:])):
        with path.open(encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                yield path.stem[4:], row


def generated_answer_llm(docno: str) -> str:
    """The LLM of a generated answer id such as ``meta-llama_Llama-2-7b-chat-hf_1_multimedqa_7``."""
    match = re.fullmatch(r"(.+?)_\d+(?:_[a-z]+_\d+)?", docno)
    if match is None:
        raise ValueError(f"not a generated answer id: {docno!r}")
    return match.group(1)


def read_clef_topics(path: Path) -> dict[str, str]:
    """Topic id -> query text from the CLEF eHealth ``topics.txt`` XML."""
    text = path.read_text(encoding="utf-8")
    return {m.group(1): m.group(2).strip() for m in
            re.finditer(r"<id>\s*(\d+)\s*</id>\s*<query>(.*?)</query>", text, flags=re.S)}
