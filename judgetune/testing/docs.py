"""The documentation's code blocks as data, the folder they run in, and their recorded outputs.

``tests/test_docs.py`` (the markers and what each promises are in its docstring) and
``benchmarks/doc_outputs.py`` (which records the output of blocks too slow for the tests) share this module:
reading a page's fenced blocks and their ``<!-- docs-test: ... -->`` markers, matching a documented output
with a printed one by format, building the workspace, running a shell command or a Python block in it, and
reading and writing a recording.
"""

from __future__ import annotations

import csv
import json
import os
import re
import select
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Block", "PythonSession", "Recording", "Workspace", "build_workspace", "commands", "mismatch",
           "pages", "read_blocks", "read_recording", "recorded_names", "run_command", "shape", "source",
           "write_recording"]

MARKER = re.compile(r"<!-- docs-test: (run|slow|output|skip|recorded)\b ?(.*?) ?-->")
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?|(?<=[\w.])\d+(?:\.\d+)?")
PROGRESS = re.compile(r": (done in \d+ s|still running, \d+ s)$")
HEADING = re.compile(r"(#{1,6}) (.*)")
CODE = ("bash", "python")  # the languages whose blocks run
RECORDINGS = Path("benchmarks") / "results" / "doc-outputs"  # beside the pages, from the repository's root
SEPARATOR = "\n--- output ---\n"


@dataclass(frozen=True)
class Block:
    """A fenced block of a page: where it is (its line; the anchor of its ``##`` or deeper section, or ""), its
    language, its marker (or None) and the marker's reason, and its lines."""

    page: str
    line: int
    section: str
    lang: str
    mark: str | None
    reason: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def pages(root: Path) -> list[Path]:
    """The documentation: README.md, then docs/*.md by name."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def anchor(title: str) -> str:
    """GitHub's anchor of a heading: ``Quickstart 1: the demo`` -> ``quickstart-1-the-demo``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def read_blocks(path: Path, root: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, each with the marker on the line before its fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, section, i = [], "", 0
    while i < len(lines):
        heading = HEADING.match(lines[i])
        if heading:
            section = anchor(heading.group(2)) if len(heading.group(1)) > 1 else ""
        if not lines[i].startswith("```"):
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{path}:{i + 1}: a fenced block is opened here and never closed")
        marker = MARKER.fullmatch(lines[i - 1].strip()) if i else None
        blocks.append(Block(str(path.relative_to(root)), i + 1, section, lines[i][3:].strip(),
                            marker and marker.group(1), (marker and marker.group(2)) or "",
                            "\n".join(lines[i + 1:end])))
        i = end + 1
    return blocks


def commands(block: Block) -> list[str]:
    """What a block runs: a Python block's code whole; a shell block's commands, ``\\``-continued lines joined,
    comment lines and blank lines left out."""
    if block.lang == "python":
        return [block.text]
    joined = re.sub(r"\\\n\s*", " ", block.text)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def source(block: Block, blocks: list[Block]) -> Block | None:
    """The block an output block shows the output of: the nearest shell or Python block above it on its page."""
    above = [b for b in blocks if b.page == block.page and b.line < block.line and b.lang in CODE]
    return above[-1] if above else None


def recorded_names(blocks: list[Block]) -> dict[str, Block]:
    """Each ``recorded`` block under its name: the page's file name, then the anchor of its ``##`` (or deeper)
    section if it has one, then ``-2``, ``-3`` for a second and third recorded block of a section
    (``README-quickstart-1-the-demo``, ``rag``). Edits above a block do not change its name."""
    names: dict[str, Block] = {}
    for block in blocks:
        if block.mark != "recorded":
            continue
        base = "-".join(part for part in (Path(block.page).stem, block.section) if part)
        name, n = base, 1
        while name in names:
            n += 1
            name = f"{base}-{n}"
        names[name] = block
    return names


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


@dataclass(frozen=True)
class Workspace:
    """The folder the documented commands run in and the environment they run with."""

    folder: Path
    env: dict[str, str]


def build_workspace(base: Path, mirror: Path) -> Workspace:
    """Make ``base/work`` with the files the documented commands name: mine.csv (300 labeled MSRpar rows),
    new.csv, unlabeled.csv and big.parquet (20 unlabeled ones), ratings.csv (100 labeled ones under the column
    names summary, gold, rating), summeval.csv (criteria columns), items.jsonl (RAGChecker's inputs), and
    ``base/shared/data``, a link to the catalog's data (``mirror``)."""
    from judgetune import datasets

    folder = base / "work"
    folder.mkdir(parents=True)
    (base / "shared").mkdir()
    (base / "shared" / "data").symlink_to(mirror, target_is_directory=True)
    env = {**os.environ, "JUDGETUNE_DATA_MIRROR": str(mirror), "JUDGETUNE_DATA_DIR": str(folder / "datasets"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONUNBUFFERED": "1"}
    examples = datasets.load("sts2012-msrpar", root=base / "datasets", mirror=mirror)
    _write_csv(folder / "mine.csv", ["id", "answer", "reference", "label"],
               [[e.id, e.answer, e.references[0].text, e.label] for e in examples[:300]])
    unlabeled = [[e.id, e.answer, e.references[0].text] for e in examples[300:320]]
    _write_csv(folder / "new.csv", ["id", "answer", "reference"], unlabeled)
    _write_csv(folder / "unlabeled.csv", ["id", "answer", "reference"], unlabeled)
    _write_csv(folder / "ratings.csv", ["id", "summary", "gold", "rating"],
               [[e.id, e.answer, e.references[0].text, e.label] for e in examples[440:540]])
    _write_csv(folder / "summeval.csv", ["id", "article", "summary", "coherence", "fluency", "relevance"],
               [[e.id, e.references[0].text, e.answer, round(e.label), min(5, round(e.label) + i % 2), e.label]
                for i, e in enumerate(examples[320:440])])
    _write_parquet(folder / "big.parquet", {"id": [row[0] for row in unlabeled],
                                            "answer": [row[1] for row in unlabeled],
                                            "reference": [row[2] for row in unlabeled]})
    inputs = json.loads((mirror / "ragchecker" / "examples_checking_inputs.json").read_text(encoding="utf-8"))
    (folder / "items.jsonl").write_text("".join(json.dumps(item) + "\n" for item in inputs["results"]),
                                        encoding="utf-8")
    return Workspace(folder, env)


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows(rows)


def _write_parquet(path: Path, columns: dict[str, list]) -> None:
    """Write a Parquet file when pyarrow is installed (the ``parquet`` extra); the blocks that read one need it."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return
    pq.write_table(pa.table(columns), path)


def run_command(command: str, workspace: Workspace, *, timeout: float = 3600) -> tuple[int, str]:
    """Run one shell command in the workspace: its exit code and what it printed (stderr within stdout, in the
    order a terminal shows them)."""
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=workspace.folder, env=workspace.env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return done.returncode, done.stdout


class PythonSession:
    """One Python process that runs the Python blocks of a page in one namespace, in order, as a notebook runs
    its cells, with the workspace as its working folder. Close it when done."""

    def __init__(self, workspace: Workspace) -> None:
        self.log = workspace.folder.parent / f"python-{id(self)}.log"
        self._log = self.log.open("w", encoding="utf-8")
        self.process = subprocess.Popen([sys.executable, "-c", "from judgetune.testing.docs import serve; serve()"],
                                        cwd=workspace.folder, env=workspace.env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self._log, text=True)
        self._read = 0

    def run(self, code: str, *, timeout: float = 3600) -> tuple[str | None, str]:
        """Run one block: None or the traceback of its error, and what it printed (stdout and stderr)."""
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps(code) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        answer = self.process.stdout.readline() if ready else ""
        error = json.loads(answer) if answer else f"no answer in {timeout:.0f} s (exit code {self.process.poll()})"
        with self.log.open(encoding="utf-8") as log:
            log.seek(self._read)
            printed = log.read()
            self._read = log.tell()
        return error, printed

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


def serve() -> None:
    """A :class:`PythonSession`'s process: run each block it is sent (a JSON string a line on stdin) in one
    namespace and answer on the original stdout (a JSON line: null, or the traceback of the block's error).
    What a block prints goes to stderr, which the session writes to its log."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    namespace: dict = {"__name__": "__main__"}
    for line in sys.stdin:
        try:
            exec(compile(json.loads(line), "<block>", "exec"), namespace)
            error = None
        except BaseException:  # noqa: BLE001 - a block's SystemExit is its error too
            error = traceback.format_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        answers.write(json.dumps(error) + "\n")
        answers.flush()


@dataclass(frozen=True)
class Recording:
    """A recorded block's output: a header (the block, its commands, the commit and command that recorded it)
    and what its commands printed."""

    header: dict
    output: str

    @property
    def commands(self) -> list[str]:
        return self.header["commands"]


def read_recording(path: Path) -> Recording:
    """Read a recording: a JSON header, a line ``--- output ---``, then the output as printed."""
    head, output = path.read_text(encoding="utf-8").split(SEPARATOR, 1)
    return Recording(json.loads(head), output)


def write_recording(path: Path, recording: Recording) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(recording.header, indent=1) + SEPARATOR + recording.output, encoding="utf-8")
