"""What NRP ranks: queries, human-judged documents, generated answers, expert orderings.

Two readers fill a :class:`Collection`: ``read_folder`` for the plain JSONL layout users write, and
``read_clef_ehealth`` for the NRP paper's CLEF eHealth 2021 files in the catalog.

The JSONL layout, one folder::

    queries.jsonl     {"query_id": "1", "text": "..."}
    documents.jsonl   {"query_id": "1", "doc_id": "d7", "text": "...", "judgments": {"relevance": 2, ...}}
    answers.jsonl     {"query_id": "1", "system": "llm-a", "prompt": "p1", "text": "...", "answer_id": "..."?}
    expert.jsonl      {"query_id": "1", "ranking": ["answer or doc id, best first", ...]}      (optional)
    sizes.json        {"llm-a": 7.0, ...}  parameters in billions, for the size plot        (optional)
"""

from __future__ import annotations

import csv
import json
import logging
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from judgetune import datasets
from judgetune.datasets import (
    clef_judgments,
    clef_top1_rows,
    expected,
    generated_answer_llm,
    jsonl_rows,
    problems_from,
    read_clef_topics,
    read_json,
)
from judgetune.errors import DataValidationError, JudgetuneError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Document:
    query_id: str
    doc_id: str
    text: str
    judgments: dict[str, float]  # quality dimension -> human grade; a dimension the assessor could not judge is absent


@dataclass(frozen=True)
class Answer:
    query_id: str
    answer_id: str
    system: str
    prompt: str
    text: str


@dataclass
class Collection:
    queries: dict[str, str]
    documents: list[Document]
    answers: list[Answer]
    expert: dict[str, list[str]] = field(default_factory=dict)  # query id -> item ids, best first
    sizes: dict[str, float] = field(default_factory=dict)  # system -> parameters in billions
    scores: dict[str, dict[tuple[str, str], float]] = field(default_factory=dict)  # shipped rankers' scores

    @property
    def dimensions(self) -> list[str]:
        return sorted({d for doc in self.documents for d in doc.judgments})

    def documents_by_query(self) -> dict[str, list[Document]]:
        grouped: dict[str, list[Document]] = defaultdict(list)
        for doc in self.documents:
            grouped[doc.query_id].append(doc)
        return dict(grouped)

    def item_texts(self) -> dict[tuple[str, str], str]:
        """(query id, item id) -> text, for documents and answers alike."""
        texts = {(d.query_id, d.doc_id): d.text for d in self.documents}
        texts.update({(a.query_id, a.answer_id): a.text for a in self.answers})
        return texts

    def subset(self, *, query_ids: set[str] | None = None, samples: int | None = None) -> Collection:
        """The same collection cut to ``query_ids`` and to the first ``samples`` answers of every
        system x prompt x query."""
        keep = set(self.queries) if query_ids is None else set(query_ids) & set(self.queries)
        seen: Counter[tuple[str, str, str]] = Counter()
        answers = []
        for a in self.answers:
            seen[(a.system, a.prompt, a.query_id)] += 1
            if a.query_id in keep and (samples is None or seen[(a.system, a.prompt, a.query_id)] <= samples):
                answers.append(a)
        kept = {(a.query_id, a.answer_id) for a in answers} | {(d.query_id, d.doc_id) for d in self.documents}
        return Collection({q: t for q, t in self.queries.items() if q in keep},
                          [d for d in self.documents if d.query_id in keep], answers,
                          {q: r for q, r in self.expert.items() if q in keep and all((q, i) in kept for i in r)},
                          dict(self.sizes), dict(self.scores))

    def check(self, where: str) -> None:
        """Every answer and expert ordering belongs to a query that has judged documents; ids are unique."""
        problems = []
        with_documents = {d.query_id for d in self.documents}
        for qid in sorted({a.query_id for a in self.answers} - with_documents):
            problems.append(f"{where}: query {qid}: answers but no judged documents to rank them among")
        for qid in sorted(set(self.queries) - with_documents - {a.query_id for a in self.answers}):
            problems.append(f"{where}: query {qid}: no documents and no answers")
        for qid in sorted(({d.query_id for d in self.documents} | {a.query_id for a in self.answers}) - set(self.queries)):
            problems.append(f"{where}: query {qid}: documents or answers, but no query text")
        ids = Counter([(d.query_id, d.doc_id) for d in self.documents] + [(a.query_id, a.answer_id) for a in self.answers])
        problems += [f"{where}: query {q}: id {i!r} used {n} times" for (q, i), n in ids.items() if n > 1]
        texts = self.item_texts()
        for qid, ranking in self.expert.items():
            missing = [i for i in ranking if (qid, i) not in texts]
            if missing:
                problems.append(f"{where}: expert ordering of query {qid}: unknown item(s) {missing}")
        if problems:
            raise DataValidationError(problems)


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():  # a blank text would be ranked by nothing
        raise expected("a non-blank string")
    return value


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise expected("a non-blank string")
    return value


def _identifier(value: Any) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else _name(value)


def _judgments(value: Any) -> dict[str, float]:
    if not isinstance(value, dict) or not value or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
            for v in value.values()):
        raise expected("an object of quality dimension -> grade >= 0")
    return {str(k): float(v) for k, v in value.items()}


def _ranking(value: Any) -> list[str]:
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(i, str) for i in value) \
            or len(set(value)) != len(value):
        raise expected("a list of 2 or more distinct item ids, best first")
    return value


_Text = Annotated[str, BeforeValidator(_text)]
_Name = Annotated[str, BeforeValidator(_name)]
_Id = Annotated[str, BeforeValidator(_identifier)]
_REQUIRED = Field(default=None, validate_default=True)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QueryRecord(_Record):
    """A line of queries.jsonl."""

    query_id: _Id = _REQUIRED
    text: _Name = _REQUIRED


class DocumentRecord(_Record):
    """A line of documents.jsonl: a document with its human grades per quality dimension."""

    query_id: _Id = _REQUIRED
    doc_id: _Id = _REQUIRED
    text: _Text = _REQUIRED
    judgments: Annotated[dict[str, float], BeforeValidator(_judgments)] = _REQUIRED


class AnswerRecord(_Record):
    """A line of answers.jsonl: one generated answer (``answer_id`` numbered per system, query and prompt if absent)."""

    query_id: _Id = _REQUIRED
    system: _Name = _REQUIRED
    prompt: _Name = _REQUIRED
    text: _Text = _REQUIRED
    answer_id: _Id = None


class ExpertRecord(_Record):
    """A line of expert.jsonl: an expert's ordering of a query's items, best first."""

    query_id: _Id = _REQUIRED
    ranking: Annotated[list[str], BeforeValidator(_ranking)] = _REQUIRED


def _score(value: Any) -> float:
    try:  # a CSV cell is text
        number = float(value) if not isinstance(value, bool) and (not isinstance(value, str) or "_" not in value) \
            else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise expected("a finite number")
    return number


class ScoreRecord(_Record):
    """A precomputed ranker score of one document or answer."""

    query_id: _Id = _REQUIRED
    id: _Id = _REQUIRED
    score: Annotated[float, BeforeValidator(_score)] = _REQUIRED


def _validated(path: Path, rows: Iterable[tuple[int, Any]], model: type[_Record], problems: list[str]):
    """(line, record) for the valid ``rows`` (line, row); every problem of the others is added to ``problems``."""
    fields = ", ".join(model.model_fields)
    for line, row in rows:
        try:
            yield line, model.model_validate(row)
        except ValidationError as err:
            problems.extend(problems_from(err, f"{path}:{line}", unknown=f"unknown field (expected only {fields})"))


def _records(path: Path, model: type[_Record], problems: list[str]):
    """(line, record) for the valid records of a JSONL file; every problem of the others is added to ``problems``."""
    return _validated(path, jsonl_rows(path, problems), model, problems)


def _unique(path: Path, records: Iterable[tuple[int, Any]], key: Callable[[Any], Any], field: str, what: str,
            problems: list[str]):
    """(line, record) for the records whose ``key`` comes first; a repeat is a problem naming both lines."""
    first: dict[Any, int] = {}
    for line, record in records:
        k = key(record)
        if k in first:
            shown_key = f"{k[1]!r} of query {k[0]}" if isinstance(k, tuple) else repr(k)
            problems.append(f"{path}:{line}: {field}: expected {what}, found {shown_key} again (first on line "
                            f"{first[k]})")
            continue
        first[k] = line
        yield line, record


def read_folder(folder: str | Path) -> Collection:
    """A Collection from the JSONL layout in the module docstring; every problem is reported at once."""
    folder = Path(folder)
    for name in ("queries.jsonl", "documents.jsonl", "answers.jsonl"):
        if not (folder / name).exists():
            raise JudgetuneError(f"{folder}: missing {name} (expected queries.jsonl, documents.jsonl, answers.jsonl "
                                 "and optionally expert.jsonl and sizes.json)")
    problems: list[str] = []
    path = folder / "queries.jsonl"
    rows = _unique(path, _records(path, QueryRecord, problems), lambda r: r.query_id, "query_id", "each query once",
                   problems)
    queries = {r.query_id: r.text for _, r in rows}
    path = folder / "documents.jsonl"
    rows = _unique(path, _records(path, DocumentRecord, problems), lambda r: (r.query_id, r.doc_id), "doc_id",
                   "each document of a query once", problems)
    documents = [Document(r.query_id, r.doc_id, r.text, r.judgments) for _, r in rows]
    answers, counters = [], Counter()
    for _, r in _records(folder / "answers.jsonl", AnswerRecord, problems):
        counters[(r.system, r.query_id, r.prompt)] += 1
        answer_id = r.answer_id or f"{r.system}_{r.query_id}_{r.prompt}_{counters[(r.system, r.query_id, r.prompt)]}"
        answers.append(Answer(r.query_id, answer_id, r.system, r.prompt, r.text))
    for found, name, fields in ((queries, "queries", "query_id, text"),
                                (documents, "documents", "query_id, doc_id, text, judgments"),
                                (answers, "answers", "query_id, system, prompt, text")):
        path = folder / f"{name}.jsonl"
        if not found and not any(p.startswith(f"{path}:") for p in problems):  # empty; a file of bad rows says why
            problems.append(f"{path}: no {name} (expected one JSON object a line with {fields})")
    expert = {}
    if (folder / "expert.jsonl").exists():
        path = folder / "expert.jsonl"
        rows = _unique(path, _records(path, ExpertRecord, problems), lambda r: r.query_id, "query_id",
                       "one ordering per query", problems)
        expert = {r.query_id: r.ranking for _, r in rows}
    sizes = {}
    if (folder / "sizes.json").exists():
        try:  # the strict reader: repeated keys, deep nesting, bad bytes refused with the line
            sizes = read_json(folder / "sizes.json")
        except DataValidationError as err:
            problems.extend(err.problems)
            sizes = {}
        if not isinstance(sizes, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                  and 0 < v < math.inf for v in sizes.values()):
            problems.append(f"{folder / 'sizes.json'}: expected an object of system -> parameters in billions (> 0)")
    if problems:
        raise DataValidationError(problems)
    collection = Collection(queries, documents, answers, expert, {k: float(v) for k, v in sizes.items()})
    collection.check(str(folder))
    return collection


def read_scores(path: str | Path, query_ids: Iterable[str] | None = None) -> dict[tuple[str, str], float]:
    """Precomputed ranker scores: a .jsonl (.ndjson) or .csv file of rows with ``query_id``, ``id`` (a doc or answer
    id) and ``score``. A repeated (query_id, id) is refused; rows of a query not in ``query_ids`` (when given: a file
    made for a larger collection) are left out, with a warning naming how many."""
    path = Path(path)
    if path.suffix.lower() not in (".jsonl", ".ndjson", ".csv"):
        raise DataValidationError([f"{path}: expected a .jsonl or .csv file of query_id, id, score, found suffix "
                                   f"{path.suffix!r}"])
    problems: list[str] = []
    rows = enumerate(_read_csv(path), 2) if path.suffix.lower() == ".csv" else jsonl_rows(path, problems)
    known = None if query_ids is None else set(query_ids)
    scores, unknown = {}, defaultdict(list)
    for line, r in _unique(path, _validated(path, rows, ScoreRecord, problems), lambda r: (r.query_id, r.id), "id",
                           "one score per query and id", problems):
        if known is not None and r.query_id not in known:
            unknown[r.query_id].append(line)
            continue
        scores[(r.query_id, r.id)] = r.score
    if problems:
        raise DataValidationError(problems)
    if unknown:
        first = min(unknown.items(), key=lambda item: item[1][0])
        log.warning("%s: %d row(s) of %d query id(s) not in the data are left out (the first, %r, on line %d)", path,
                    sum(map(len, unknown.values())), len(unknown), first[0], first[1][0])
    return scores


# Parameters in billions of the CLEF eHealth study's LLMs (from their model cards); ChatGPT's is not public.
CLEF_MODEL_SIZES = {
    "distilgpt2": 0.082, "gpt2": 0.124, "gpt2-medium": 0.355, "gpt2-large": 0.774, "gpt2-xl": 1.5,
    "google_flan-t5-small": 0.077, "google_flan-t5-base": 0.248, "google_flan-t5-large": 0.783,
    "google_flan-t5-xl": 2.85, "meta-llama_Llama-2-7b-chat-hf": 7.0, "meta-llama_Llama-2-13b-chat-hf": 13.0,
    "tiiuae_falcon-7b-instruct": 7.0,
}
ANSWER_SETS = ("top1", "multimedqa", "prompts")


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def read_clef_expert(path: Path) -> dict[str, list[str]]:
    """The medical expert's orderings (Label Studio export): query id -> item ids, best first."""
    orderings = {}
    for task in json.loads(path.read_text(encoding="utf-8")):
        ranking = list(task["annotations"][0]["result"][0]["value"]["ranker"]["rank"])
        qids = {m.group(1) for i in ranking if (m := re.fullmatch(r".+?_(\d+)_[a-z]+_\d+", i))}
        if len(qids) != 1:
            raise JudgetuneError(f"{path}: task {task.get('id')}: cannot tell the query from {ranking}")
        orderings[qids.pop()] = ranking
    return orderings


def read_clef_ehealth(*, answers: str = "top1", root: Path | None = None, mirror: str | Path | None = None) -> Collection:
    """The NRP paper's CLEF eHealth 2021 files (catalog source ``nrp-clef-ehealth``).

    Documents: the 5 judged documents per topic whose text ships (relevance, readability, credibility
    0-2; credibility 3, "unable to judge", is left out). Answers: ``top1`` is the top answer of each of
    8 LLMs per topic (MultiMedQA prompt); ``multimedqa`` all 10 answers of 13 LLMs per topic;
    ``prompts`` all 10 answers of the 8 ranked LLMs under each of the paper's 4 prompts. The monoT5
    scores shipped for the documents and answers come as the precomputed ranker ``monot5``.
    """
    if answers not in ANSWER_SETS:
        raise JudgetuneError(f"answers must be one of {ANSWER_SETS}, got {answers!r}")
    base = datasets.ensure_fetched("nrp-clef-ehealth", root=root, mirror=mirror) / "nrp_webis"
    judged = {}
    for key, (rel, cred, read) in clef_judgments(base).items():
        judged[key] = {"relevance": float(rel), "readability": float(read),
                       **({"credibility": float(cred)} if cred != 3 else {})}
    queries = read_clef_topics(base / "topics/topics.txt")
    documents, top_answers, monot5 = [], [], {}
    for qid, row in clef_top1_rows(base):
        monot5[(qid, row["docno"])] = float(row["score"])
        if (qid, row["docno"]) in judged:
            documents.append(Document(qid, row["docno"], row["text"], judged[(qid, row["docno"])]))
        else:
            top_answers.append(Answer(qid, row["docno"], generated_answer_llm(row["docno"]), "multimedqa", row["text"]))
    if answers == "top1":
        chosen = top_answers
    elif answers == "prompts":
        chosen = []
        for path in sorted(base.glob("monot5_rankings/*_rankings.csv")):
            system = path.name[:-len("_rankings.csv")]
            for row in _read_csv(path):
                answer_id = f"{system}_{row['qid']}_{row['prompt']}_{row['answer_number']}"
                chosen.append(Answer(row["qid"], answer_id, system, row["prompt"], row["text"]))
                monot5[(row["qid"], answer_id)] = float(row["score"])
    else:
        chosen = []
        for path in sorted(base.glob("generated_answers_multimedqa/*.csv")):
            for row in _read_csv(path):
                if row["qid"] not in queries:
                    continue
                chosen += [Answer(row["qid"], f"{path.stem}_{row['qid']}_multimedqa_{n}", path.stem, "multimedqa",
                                  row[f"answer{n}"]) for n in range(1, 11)]
    with_documents = {d.query_id for d in documents}
    collection = Collection({q: t for q, t in queries.items() if q in with_documents}, documents,
                            [a for a in chosen if a.query_id in with_documents],
                            read_clef_expert(base / "expert_rankings_labelstudio_project151.json"),
                            dict(CLEF_MODEL_SIZES), {"monot5": monot5})
    collection.check(str(base))
    return collection
