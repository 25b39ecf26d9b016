"""The documented commands run, and the documented outputs keep the format the code prints.

Every ```bash and ```text block of README.md and docs/*.md carries a marker on the line before its fence:

- ``<!-- docs-test: run -->``: a test runs each command of the block (a line, or lines joined by ``\\``) in one
  shared folder, in page order (README.md, then docs/ by name), against the catalog's data and the small files
  ``workspace`` writes; a command shown twice runs once;
- ``<!-- docs-test: slow -->``: the same, in the slow tier (a command of a minute or more, or one that runs an LM);
- ``<!-- docs-test: output -->`` (a text block): lines of what the commands of the block above print (stdout and
  stderr). Each line must match an output line, in order, by format: numbers stand for any number, spaces for any
  spaces, ``...`` for anything; a line of ``...`` skips lines; a progress line (``: done in N s``) may be absent;
- ``<!-- docs-test: skip REASON -->``: never run, for the reason given (an install, a server, the reader's files).
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- docs-test: (run|slow|output|skip)\b ?(.*?) ?-->")
CHECKED = ("bash", "text")  # the languages whose blocks must carry a marker
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?|(?<=[\w.])\d+(?:\.\d+)?")
PROGRESS = re.compile(r": (done in \d+ s|still running, \d+ s)$")


@dataclass(frozen=True)
class Block:
    """A fenced block of a page: where it is, its language, its marker (or None) and its lines."""

    page: str
    line: int
    lang: str
    mark: str | None
    reason: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def read_blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, each with the marker on the line before its fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = MARKER.fullmatch(lines[i - 1].strip()) if i else None
        blocks.append(Block(str(path.relative_to(ROOT)), i + 1, lines[i][3:].strip(),
                            marker and marker.group(1), (marker and marker.group(2)) or "", "\n".join(lines[i + 1:end])))
        i = end + 1
    return blocks


def commands(block: Block) -> list[str]:
    """The block's commands: ``\\``-continued lines joined, comment lines and blank lines left out."""
    joined = re.sub(r"\\\n\s*", " ", block.text)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def shape(line: str) -> str:
    """A line's format: every number 0, runs of spaces one space."""
    return " ".join(NUMBER.sub("0", line).split())


def mismatch(documented: str, printed: str) -> str | None:
    """The first documented line no printed line matches (in order, by format), or None when all match."""
    lines = [shape(line) for line in printed.splitlines()]
    at = 0
    for doc in documented.splitlines():
        if doc.strip() == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part.strip()) for part in shape(doc).split("...")))
        found = next((k for k in range(at, len(lines)) if pattern.fullmatch(lines[k])), None)
        if found is None and PROGRESS.search(doc.strip()):
            continue
        if found is None:
            return doc
        at = found + 1
    return None


ALL = [block for page in PAGES for block in read_blocks(page)]
RUNNABLE = [b for b in ALL if b.mark in ("run", "slow", "output")]


def test_every_shell_and_output_block_is_marked() -> None:
    unmarked = [b.name for b in ALL if b.lang in CHECKED and b.mark is None]
    assert unmarked == [], "mark each block: <!-- docs-test: run|slow|output|skip REASON --> on the line before"
    assert all(b.reason for b in ALL if b.mark == "skip"), "a skipped block says why"
    outputs = [b for b in ALL if b.mark == "output"]
    for block in outputs:
        before = [b for b in RUNNABLE if b.page == block.page and b.line < block.line and b.mark != "output"]
        assert before, f"{block.name}: an output block follows the commands it shows"


def test_format_matching_reads_numbers_and_cuts() -> None:
    printed = "judge  n  mae\nembedding  60  0.611 [0.49,0.74]  0.650\nx: done in 3 s\nrandom  60  -0.1"
    assert mismatch("judge n mae\nembedding 80 0.7 [0.5,0.9] ...\n...\nrandom 9 0.4", printed) is None
    assert mismatch("y: done in 40 s\nrandom 1 2", printed) is None
    assert mismatch("constant 60 0.7", printed) == "constant 60 0.7"
    assert mismatch("random 1\njudge n mae", printed) == "random 1"
    assert shape("scale 0.6-5, +0.294 [-1.5, 2]") == "scale 0-0, 0 [0, 0]"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, mirror: Path) -> dict:
    """The folder the documented commands run in, with the files they name: mine.csv (300 labeled MSRpar rows),
    new.csv (20 unlabeled ones), summeval.csv (criteria columns), items.jsonl (RAGChecker's inputs) and
    ../shared/data (the mirror); and a record of each command's output."""
    from judgetune import datasets

    base = tmp_path_factory.mktemp("docs")
    folder = base / "work"
    folder.mkdir()
    (base / "shared").mkdir()
    (base / "shared" / "data").symlink_to(mirror, target_is_directory=True)
    env = {**os.environ, "JUDGETUNE_DATA_MIRROR": str(mirror), "JUDGETUNE_DATA_DIR": str(folder / "datasets"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONUNBUFFERED": "1"}
    examples = datasets.load("sts2012-msrpar", root=base / "datasets", mirror=mirror)
    _write_csv(folder / "mine.csv", ["id", "answer", "reference", "label"],
               [[e.id, e.answer, e.references[0].text, e.label] for e in examples[:300]])
    _write_csv(folder / "new.csv", ["id", "answer", "reference"],
               [[e.id, e.answer, e.references[0].text] for e in examples[300:320]])
    _write_csv(folder / "summeval.csv", ["id", "article", "summary", "coherence", "fluency", "relevance"],
               [[e.id, e.references[0].text, e.answer, round(e.label), min(5, round(e.label) + i % 2), e.label]
                for i, e in enumerate(examples[320:440])])
    inputs = json.loads((mirror / "ragchecker" / "examples_checking_inputs.json").read_text(encoding="utf-8"))
    (folder / "items.jsonl").write_text("".join(json.dumps(item) + "\n" for item in inputs["results"]),
                                        encoding="utf-8")
    return {"folder": folder, "env": env, "printed": {}}


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows(rows)


def _param(block: Block):
    slow = block.mark == "slow" or (block.mark == "output" and _source(block).mark == "slow")
    return pytest.param(block, id=block.name, marks=[pytest.mark.slow] if slow else [])


def _source(block: Block) -> Block:
    """The commands an output block shows: the nearest runnable block above it on its page."""
    return [b for b in RUNNABLE if b.page == block.page and b.line < block.line and b.mark != "output"][-1]


@pytest.mark.parametrize("block", [_param(b) for b in RUNNABLE])
def test_documented_block(block: Block, workspace: dict) -> None:
    """A block's commands exit 0 (each run once per workspace); an output block matches what they print."""
    printed = workspace["printed"]
    if block.mark == "output":
        source = _source(block)
        assert source.name in printed, f"{source.name} did not run (it failed, or its tier was left out)"
        line = mismatch(block.text, printed[source.name])
        assert line is None, f"{block.name}: no printed line has the format of\n  {line}\n" \
                             f"{source.name} printed:\n{printed[source.name]}"
        return
    seen = workspace.setdefault("commands", {})
    outputs = []
    for command in commands(block):
        if command not in seen:
            done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=workspace["folder"],
                                  env=workspace["env"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=3600)
            seen[command] = done.stdout  # stderr within it, in the order a terminal shows them
            assert done.returncode == 0, f"{block.name}: `{command}` exited {done.returncode}:\n{seen[command]}"
        outputs.append(seen[command])
    printed[block.name] = "".join(outputs)
