"""The catalog: named sources of human-labeled data, where to get them, and how to read them."""

from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from judgetune.datasets import _sources as src
from judgetune.datasets._fetch import (
    FetchError,
    FetchRefusedError,
    fetch_files,
    manifest_entries,
    missing_files,
    verify_files,
)
from judgetune.datasets._schema import Example, Scale, format_number
from judgetune.errors import DataNotFoundError, JudgetuneError

log = logging.getLogger(__name__)

LINKAGE_REPO = "https://github.com/babyyang525/LINKAGE-Listwise-NFQA-Evaluation"
LINKAGE_CITE = ("Yang et al. 2024. LINKAGE: Listwise Ranking among Varied-Quality References for "
                "Non-Factoid QA Evaluation via LLMs. Findings of EMNLP 2024.")
NRP_REPO = "https://github.com/webis-de/arxiv24-ranking-generated-answers"
SUMMAC_CITE = ("Laban et al. 2022. SummaC: Re-Visiting NLI-based Models for Inconsistency Detection in "
               "Summarization. TACL 10.")
LLMBAR_CITE = ("Zeng et al. 2024. Evaluating Large Language Models at Evaluating Instruction Following. "
               "ICLR 2024; via Bavaresco et al. 2024, LLMs instead of Human Judges? (JUDGE-BENCH).")
NO_LICENSE = "no LICENSE file in the source repository: for evaluation and research use; check with the authors"


@dataclass(frozen=True)
class Source:
    """One catalog entry. ``files`` are path prefixes into the data folder (and the mirror)."""

    name: str
    title: str
    files: tuple[str, ...]
    scale: Scale
    task: str
    location: str
    license: str
    citation: str
    convert: src.Converter
    target: str = "label"  # which Example field holds the human judgment: label or preference


CATALOG: dict[str, Source] = {s.name: s for s in [
    Source("linkage-antique", "LINKAGE ANTIQUE: 500 non-factoid questions, graded answers",
           ("linkage/ANTIQUE.json",), Scale(1, 4, (1, 2, 3, 4), "ANTIQUE grade 1-4 (official scale)"),
           "listwise", LINKAGE_REPO, NO_LICENSE + "; ANTIQUE data-usage agreement (CIIR) applies",
           LINKAGE_CITE + " Hashemi et al. 2020, ANTIQUE, ECIR.", src.linkage_graded("linkage/ANTIQUE.json", "antique")),
    Source("linkage-trec-dl-nf", "LINKAGE TREC-DL-NF: 55 non-factoid TREC DL 2019/20 queries, graded passages",
           ("linkage/TREC-DL-NF.json",), Scale(0, 3, (0, 1, 2, 3), "TREC DL relevance 0-3"),
           "listwise", LINKAGE_REPO, NO_LICENSE + "; TREC DL / MS MARCO terms apply",
           LINKAGE_CITE + " Craswell et al. 2020/2021, TREC Deep Learning track overviews.",
           src.linkage_graded("linkage/TREC-DL-NF.json", "trecdl")),
    Source("linkage-webglm", "LINKAGE WebGLM: 100 questions, 3 graded LLM answers, 4-5 reference answers",
           ("linkage/WEBGLM_50.json",), Scale(1, 3, (1, 2, 3), "candidate grade 1-3 (3 best)"),
           "listwise", LINKAGE_REPO, NO_LICENSE, LINKAGE_CITE + " Liu et al. 2023, WebGLM, KDD.", src.linkage_webglm),
    Source("sts2012-msrpar", "STS 2012 MSRpar: 750 + 750 sentence pairs (official train / test)",
           ("sts/sts2012_msrpar/",), Scale(0, 5, None, "semantic similarity 0-5"), "similarity",
           "https://github.com/brmson/dataset-sts (data/sts/semeval-sts/2012)",
           "scores CC-BY 4.0 (dataset-sts); MSRpar text under Microsoft Research license terms (see 00-readme)",
           "Agirre et al. 2012. SemEval-2012 Task 6: A Pilot on Semantic Textual Similarity. *SEM.", src.sts_msrpar),
    Source("stsb", "STS Benchmark: 5,749 / 1,500 / 1,379 sentence pairs (train / dev / test)",
           ("sts/stsbenchmark/",), Scale(0, 5, None, "semantic similarity 0-5"), "similarity",
           "https://github.com/zhangzhenhu/Semantic-Texual-Similarity-Toolkits (data/stsbenchmark)",
           "scores CC-BY-SA 4.0; per-source text licenses in LICENSE.txt",
           "Cer et al. 2017. SemEval-2017 Task 1: Semantic Textual Similarity. SemEval.", src.sts_benchmark),
    Source("ragchecker", "RAGChecker human pairs: 280 response pairs x 2 annotators",
           ("ragchecker/",), Scale(-2, 2, (-2, -1, 0, 1, 2), "preference -2..+2, positive: answer_b better"),
           "pairwise", "https://github.com/amazon-science/RAGChecker (data/meta_evaluation)", "Apache-2.0",
           "Ru et al. 2024. RAGChecker: A Fine-grained Framework for Diagnosing Retrieval-Augmented "
           "Generation. NeurIPS 2024 Datasets and Benchmarks.", src.ragchecker_pairs, "preference"),
    *[Source(f"summac-{name}", f"SummaC validation subset {name}: {n} claims vs documents",
             (f"summac_subsets/{name}.json", "summac_subsets/LICENSE_summac"),
             Scale(0, 1, (0, 1), "consistent 1, inconsistent 0"), "factcheck",
             "https://github.com/tingofurro/summac (data/)", "summac code Apache-2.0; underlying datasets own licenses",
             SUMMAC_CITE, src.summac_subset(name))
      for name, n in (("summeval", 100), ("factcc", 311), ("polytope", 634), ("xsumfaith", 485))],
    *[Source(f"llmbar-{name}", f"LLMBar {name}: {n} instruction-following pairs with a human choice",
             (f"llmbar/llmbar_{name}.json",), Scale(-1, 1, (-1, 1), "-1: answer (output_a) better, +1: answer_b"),
             "pairwise", "https://github.com/dmg-illc/JUDGE-BENCH (data/llmbar)", "MIT (LLMBar)", LLMBAR_CITE,
             src.llmbar(name), "preference")
      for name, n in (("natural", 100), ("adversarial", 319))],
    Source("nrp-clef-ehealth", "NRP on CLEF eHealth 2021: generated answers ranked among judged web documents",
           ("nrp_webis/",), Scale(0, 2, (0, 1, 2), "document relevance 0-2"), "nrp", NRP_REPO,
           NO_LICENSE + "; CLEF eHealth CHS-2021 assessments",
           "Bondarenko and Viehweger 2024. LLM Robustness Against Misinformation in Biomedical Question "
           "Answering / Ranking Generated Answers (arXiv 2024, Webis); CLEF eHealth 2021 CHS task.",
           src.nrp_clef_ehealth),
]}


def data_dir() -> Path:
    """Where fetched data lives: ``$JUDGETUNE_DATA_DIR`` or ``./datasets``."""
    return Path(os.environ.get("JUDGETUNE_DATA_DIR", "datasets"))


def get_source(name: str) -> Source:
    try:
        return CATALOG[name]
    except KeyError:
        raise JudgetuneError(f"unknown data source {name!r}; known: {', '.join(CATALOG)}") from None


def _mirror(mirror: str | Path | None) -> Path | None:
    """The mirror folder given (or ``$JUDGETUNE_DATA_MIRROR``), None for none; a path that is no folder is refused."""
    given = mirror or os.environ.get("JUDGETUNE_DATA_MIRROR") or None
    if given is None:
        return None
    path = Path(given)
    if not path.is_dir():
        named = "--mirror" if mirror else "$JUDGETUNE_DATA_MIRROR"
        raise DataNotFoundError(f"{named} {path}: expected a folder holding copies of the catalog's files, found "
                                f"{'a file' if path.exists() else 'nothing'} there")
    return path


def fetch(name: str, *, root: str | Path | None = None, mirror: str | Path | None = None) -> list[Path]:
    """Put a source's files under ``root``: copied from ``mirror`` (or ``$JUDGETUNE_DATA_MIRROR``)
    when one is set, else downloaded from their canonical location; every file is checksummed."""
    folder = Path(root) if root else data_dir()
    if folder.exists() and not folder.is_dir():
        raise DataNotFoundError(f"{folder}: expected a folder to put the data in, found a file")
    return fetch_files(manifest_entries(get_source(name).files), folder, _mirror(mirror))


def ensure_fetched(name: str, *, root: str | Path | None = None, mirror: str | Path | None = None) -> Path:
    """The data folder holding a source's files, fetching the missing ones: copied from a mirror when one
    is configured, else downloaded from their recorded URLs (a line per file; each checked by SHA-256).
    Files already there are checked against the manifest too (once per process while they are unchanged).

    Raises:
        DataNotFoundError: files are missing, no mirror is configured and the download failed (no network).
        DataChecksumError: a file there is not the catalogued one (truncated or edited).
        FetchRefusedError: a download that must not be made (a metadata address or proxy, a redirect).
    """
    root = Path(root) if root else data_dir()
    entries = manifest_entries(get_source(name).files)
    missing = missing_files(entries, root)
    if missing and _mirror(mirror) is not None:
        log.info("fetching %s from mirror %s", name, _mirror(mirror))
        fetch(name, root=root, mirror=mirror)
    elif missing:
        _download_missing(name, root, len(missing))
    verify_files(entries, root, name)
    return root


def _download_missing(name: str, root: Path, missing: int) -> None:
    source = get_source(name)
    log.warning("%s: %d file(s) missing under %s; downloading them from their recorded URLs (license: %s)",
                name, missing, root, source.license)
    try:
        fetch(name, root=root)
    except FetchRefusedError:
        raise
    except FetchError as err:
        raise DataNotFoundError(f"{name}: {missing} file(s) missing under {root} and the download failed "
                                f"({err.cause}); connect to the network and re-run (or `judgetune data fetch "
                                f"{name}`), or point JUDGETUNE_DATA_MIRROR at a copy (or --mirror DIR, for a "
                                "command that takes it)") from None


def load(name: str, *, root: str | Path | None = None, mirror: str | Path | None = None) -> list[Example]:
    """The Examples of a catalog source (see ``ensure_fetched`` for where the files come from)."""
    return get_source(name).convert(ensure_fetched(name, root=root, mirror=mirror))


def summary(name: str, examples: list[Example]) -> dict:
    """Counts, label histogram and provenance of a source, as `judgetune data show` prints them."""
    source = get_source(name)
    values = [getattr(e, source.target) for e in examples]
    labeled = [v for v in values if v is not None]
    groups = {e.group for e in examples if e.group is not None}
    splits = Counter(e.meta["split"] for e in examples if "split" in e.meta)
    if source.scale.values is not None:
        histogram = {format_number(k): v for k, v in sorted(Counter(labeled).items())}
    else:  # continuous scale: one bin per integer step, the top bin closed
        edges = list(range(int(source.scale.low), int(source.scale.high) + 1))
        histogram = {f"{a}-{b}": sum(a <= x < b or (b == edges[-1] and x == b) for x in labeled)
                     for a, b in zip(edges, edges[1:])}
    return {"name": name, "title": source.title, "task": source.task, "examples": len(examples),
            "labeled": len(labeled), "groups": len(groups), "splits": dict(splits), "label_field": source.target,
            "scale": source.scale.to_dict(), "histogram": histogram, "location": source.location,
            "license": source.license, "citation": source.citation}


def load_data(name_or_file: str | Path, *, mirror: str | Path | None = None, scale: Scale | None = None,
              fields: dict[str, str] | None = None, label: str | None = None) -> tuple[list[Example], tuple[float, float]]:
    """Examples from a catalog source or a JSONL/CSV/TSV file, and the human scale they are on: the
    source's scale, the ``scale`` the user states (every label must lie on it), or the labels' range
    (see :func:`read_labeled`; an isolated outlier is refused with its line). ``fields`` and
    ``label`` map a file's own column names (see :func:`read_examples`)."""
    from judgetune.datasets._readers import read_labeled

    name = str(name_or_file)
    if name in CATALOG and (fields or label):
        raise JudgetuneError(f"--field/--label: {name} is a catalog source, read with its own fields; "
                             "map the columns of a file instead")
    if name in CATALOG:
        known = CATALOG[name].scale
        if scale is not None and (scale.low, scale.high) != (known.low, known.high):
            raise JudgetuneError(f"--scale {scale.low:g}-{scale.high:g}: {name} is on {known.low:g}-{known.high:g} "
                                 "(the catalog states it); leave --scale out")
        return load(name, mirror=mirror), (float(known.low), float(known.high))
    if not Path(name).exists() and not Path(name).is_symlink():  # a symlink loop is said to be one by the reader
        raise DataNotFoundError(f"{name!r} is neither a catalog source ({', '.join(CATALOG)}) nor an existing file")
    return read_labeled(name, scale=scale, fields=fields, label=label)


def data_fingerprint(name_or_file: str | Path) -> dict[str, str]:
    """SHA-256 per file the data came from (the manifest's checksums for a catalog source)."""
    name = str(name_or_file)
    if name in CATALOG:
        return {e.path: e.sha256 for e in manifest_entries(CATALOG[name].files)}
    from judgetune._files import sha256_of

    if not Path(name).is_file():
        raise DataNotFoundError(f"{name!r} is neither a catalog source ({', '.join(CATALOG)}) nor an existing file")
    return {name: sha256_of(Path(name))}
