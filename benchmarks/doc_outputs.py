"""Record what the documentation's ``recorded`` blocks print, for tests/test_docs.py to check the pages against.

    python benchmarks/doc_outputs.py --list                  # each recorded block: recorded, missing or stale
    python benchmarks/doc_outputs.py                         # record every block not recorded for its commands
    python benchmarks/doc_outputs.py --block NAME [NAME ...] # these blocks only (names as --list prints them)
    python benchmarks/doc_outputs.py --block NAME --force    # record again, though up to date

A block marked ``<!-- docs-test: recorded REASON -->`` is too slow for the tests (the demo, an LM on hundreds of
items, the grading model). This script builds a workspace as the tests build theirs
(``judgetune.testing.docs.build_workspace``: the catalog's data from ``$JUDGETUNE_DATA_MIRROR`` or ../shared/data,
mine.csv, ...), runs the blocks asked for there, each after the run, slow and recorded blocks above it on its page
(a command once per workspace, a page's Python blocks in one process), and writes what each asked-for block printed
to ``benchmarks/results/doc-outputs/NAME.txt``: a JSON header (the block, its commands, the steps run for it, the
seconds it took, the date, commit, machine and command of the recording), a line ``--- output ---``, and the output.
A block already recorded for the commands it shows now is left alone (the script resumes where it stopped) unless
``--force``. A failing block is reported and left unrecorded; the script then exits 1.

Steps a page gives in its prose or in a comment of the block run as the commands of ``BEFORE`` (before the block)
and ``STEPS`` (where the comment stands); the header lists them.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import meta  # noqa: E402

from judgetune.lm import models_dir  # noqa: E402
from judgetune.testing.docs import (  # noqa: E402
    RECORDINGS,
    Block,
    PythonSession,
    Recording,
    Workspace,
    build_workspace,
    commands,
    pages,
    read_blocks,
    read_recording,
    recorded_names,
    run_command,
    write_recording,
)

ROOT = Path(__file__).resolve().parents[1]
ESTIMATE = "estimate-a-worked-example-six-sources-of-sentence-pairs"
# Commands the page's prose names before the block (the prose must name them, spaces aside).
BEFORE = {ESTIMATE: ["judgetune tune --judge hybrid --data stsb --trials 6 --fit-items 1500 --dev-items 600 "
                     "--test-items 600 --run hybrid-stsb"]}
# A comment line of a block that stands for a step, and the command that does it.
STEPS = {"# (labeled.jsonl: to-label.jsonl with each row's label from truth.jsonl)":
         "python -c \"import json; truth = {r['id']: r['label'] for r in map(json.loads, open('truth.jsonl'))}; "
         "rows = [json.loads(line) for line in open('to-label.jsonl')]; open('labeled.jsonl', 'w').writelines("
         "json.dumps({**r, 'label': truth[r['id']]}) + '\\n' for r in rows)\""}


class Failed(Exception):
    """A command or Python block of the workspace failed; the message holds what it printed."""


class Runner:
    """Runs blocks in one workspace: each shell command once, each page's Python blocks in one process."""

    def __init__(self, space: Workspace) -> None:
        self.space = space
        self.results: dict[str, tuple[int, str]] = {}
        self.sessions: dict[str, PythonSession] = {}

    def command(self, command: str) -> str:
        if command not in self.results:
            print(f"$ {command}", file=sys.stderr)
            self.results[command] = run_command(command, self.space, timeout=6 * 3600)
        code, output = self.results[command]
        if code != 0:
            raise Failed(f"`{command}` exited {code}:\n{output}")
        return output

    def block(self, block: Block, steps: list[str]) -> str:
        """Run a block (a Python block whole, a shell block line by line, a comment of ``STEPS`` as its command);
        what it printed. ``steps`` gets the commands run for the comments."""
        if block.lang == "python":
            if block.text in self.results:
                return self.results[block.text][1]
            print(f">>> {block.name}", file=sys.stderr)
            if block.page not in self.sessions:
                self.sessions[block.page] = PythonSession(self.space)
            error, output = self.sessions[block.page].run(block.text, timeout=6 * 3600)
            self.results[block.text] = (0 if error is None else 1, output)
            if error is not None:
                raise Failed(f"{block.name} raised:\n{error}\nit printed:\n{output}")
            return output
        printed = []
        for line in re.sub(r"\\\n\s*", " ", block.text).splitlines():
            line = line.strip()
            if line in STEPS:
                steps.append(STEPS[line])
                self.command(STEPS[line])
            elif line and not line.startswith("#"):
                printed.append(self.command(line))
        return "".join(printed)

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()


def status(name: str, block: Block) -> str:
    path = ROOT / RECORDINGS / f"{name}.txt"
    if not path.is_file():
        return "missing"
    recording = read_recording(path)
    if recording.commands != commands(block):
        return f"stale (recorded at {recording.header['meta']['commit']} for other commands)"
    return f"recorded at {recording.header['meta']['commit']} in {recording.header['seconds']:.0f} s"


def record(names: list[str], blocks: list[Block], runner: Runner, argv: list[str]) -> list[str]:
    """Record the named blocks, each after the runnable blocks above it on its page; the names left unrecorded."""
    name_of = {block: name for name, block in recorded_names(blocks).items()}
    left = list(names)
    for page in dict.fromkeys(b.page for b in blocks if name_of.get(b) in names):
        last = max(b.line for b in blocks if b.page == page and name_of.get(b) in names)
        for block in (b for b in blocks if b.page == page and b.line <= last):
            if block.mark not in ("run", "slow", "recorded"):
                continue
            name = name_of.get(block)
            try:
                steps = list(BEFORE.get(name, []))
                _check_prose(block, steps)
                for command in steps:
                    runner.command(command)
                start = time.monotonic()
                output = runner.block(block, steps)
            except Failed as error:
                print(f"{block.name} failed: {error}", file=sys.stderr)
                break  # the blocks below it on the page may need what it did
            if name in left:
                header = {"block": name, "page": block.page, "line": block.line, "commands": commands(block),
                          "steps": steps, "seconds": round(time.monotonic() - start, 1), "meta": meta(argv)}
                write_recording(ROOT / RECORDINGS / f"{name}.txt", Recording(header, output))
                left.remove(name)
                print(f"recorded {name} ({header['seconds']:.0f} s)", file=sys.stderr)
    return left


def _check_prose(block: Block, steps: list[str]) -> None:
    """A command of ``BEFORE`` is one the block's page names: the recording runs what the page says."""
    text = " ".join((ROOT / block.page).read_text(encoding="utf-8").split())
    for command in steps:
        if command not in text:
            raise Failed(f"{block.page} no longer names `{command}`: change BEFORE in {Path(__file__).name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--block", nargs="+", metavar="NAME", help="record these blocks only")
    parser.add_argument("--force", action="store_true", help="record again blocks already recorded")
    parser.add_argument("--list", action="store_true", help="list the recorded blocks and their state")
    parser.add_argument("--keep", action="store_true", help="keep the workspace (its path is printed)")
    args = parser.parse_args(argv)
    blocks = [block for page in pages(ROOT) for block in read_blocks(page, ROOT)]
    recorded = recorded_names(blocks)
    if args.list:
        for name, block in recorded.items():
            print(f"{name:60} {block.name:24} {status(name, block)}")
        return 0
    unknown = sorted(set(args.block or []) - set(recorded))
    if unknown:
        parser.error(f"no recorded block named {', '.join(unknown)}; --list names them")
    names = [n for n in recorded if n in (args.block or recorded)
             and (args.force or not status(n, recorded[n]).startswith("recorded"))]
    if not names:
        print("every block asked for is recorded for the commands it shows (--force records again)")
        return 0
    mirror = Path(os.environ.get("JUDGETUNE_DATA_MIRROR", ROOT.parent / "shared" / "data"))
    base = Path(tempfile.mkdtemp(prefix="doc-outputs-"))
    space = build_workspace(base, mirror)
    # a cold answer cache, as the tests have: every judgment of a recording is made by its run
    space.env.update({"JUDGETUNE_MODEL_DIR": str(models_dir()), "JUDGETUNE_CACHE_DIR": str(base / "cache"),
                      "DSPY_CACHEDIR": str(base / "dspy-cache")})
    runner = Runner(space)
    try:
        failed = record(names, blocks, runner, ["benchmarks/doc_outputs.py", *(argv or sys.argv[1:])])
    finally:
        runner.close()
        if args.keep:
            print(f"workspace kept: {base / 'work'}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    if failed:
        print(f"not recorded: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
