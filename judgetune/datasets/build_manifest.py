"""Rebuild manifest.json from a copy of the catalog data and its PROVENANCE.tsv (maintainers only).

    python -m judgetune.datasets.build_manifest ../shared/data
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from judgetune._files import sha256_of

# Files whose name in the mirror differs from their path under the provenance row's folder.
RENAMED = {
    "ragchecker/examples_checking_inputs.json": "examples/checking_inputs.json",
    "ragchecker/examples_checking_outputs.json": "examples/checking_outputs.json",
    "ragchecker/meta_evaluation_README.md": "data/meta_evaluation/README.md",
    "ragchecker/human_labeled_data.json": "data/meta_evaluation/human_labeled_data.json",
    "ragchecker/baseline_ragchecker.json": "data/meta_evaluation/baseline_ragchecker.json",
    "ragchecker/LICENSE": "LICENSE",
    "summac_subsets/LICENSE_summac": "LICENSE",
    "antique_qrels/LICENSE_capreolus": "LICENSE",
    "nrp_webis/monot5_rankings/ndcg_by_ranker.csv": "indexing/results/ndcg.csv",
    "nrp_webis/monot5_rankings/monoT5_scores.csv": "indexing/results/monoT5_scores.csv",
    "llmbar/llmbar_adversarial.json": "data/llmbar/data-adversarial.json",
    "llmbar/llmbar_natural.json": "data/llmbar/data-natural.json",
}


def repo_path(rel: str, row: dict[str, str]) -> str | None:
    """The file's path inside its source repository, or None where it cannot be derived."""
    if rel in RENAMED:
        return RENAMED[rel]
    prefix, inner = row["path"], row["path_in_repo"]
    tail = rel[len(prefix):]
    if prefix == "nrp_webis/generated_answers_multimedqa/":
        return f"generate_llm_answers/answers/{Path(tail).stem}/multimedqa.csv"
    if prefix == "nrp_webis/monot5_rankings/":
        return f"indexing/results/monoT5/{tail}"
    if prefix == "summac_subsets/":
        return f"data/{tail}"
    if prefix == "trec_dl_qrels/":
        # the pinned commit keeps qrels.* under qrels/ and topics.* under topics/
        return f"{'qrels' if tail.startswith('qrels.') else 'topics'}/{tail}"
    if not prefix.endswith("/"):
        return inner
    return inner + tail if inner.endswith("/") else None


def build(data: Path) -> dict:
    with (data / "PROVENANCE.tsv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    files = []
    for path in sorted(p for p in data.rglob("*") if p.is_file()):
        rel = path.relative_to(data).as_posix()
        row = next((r for r in rows if rel == r["path"] or (r["path"].endswith("/") and rel.startswith(r["path"]))),
                   None)
        if row is None:
            continue  # README / PROVENANCE of the mirror itself
        inner = repo_path(rel, row)
        repo = row["repo"].split()[0]  # "owner/name (note)" -> owner/name
        url = None if inner is None else f"https://raw.githubusercontent.com/{repo}/{row['commit']}/{inner}"
        files.append({"path": rel, "sha256": sha256_of(path), "size": path.stat().st_size, "url": url})
    return {"schema_version": 1, "files": files}


if __name__ == "__main__":
    target = Path(__file__).with_name("manifest.json")
    target.write_text(json.dumps(build(Path(sys.argv[1])), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {target}")
