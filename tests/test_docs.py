"""The documented commands run, and the documented outputs keep the format the code prints.

Every ```bash, ```python and ```text block of README.md and docs/*.md carries a marker on the line before its
fence (the blocks, the workspace and the matching live in ``judgetune.testing.docs``):

- ``<!-- docs-test: run -->``: a test runs the block in one shared folder, the workspace (the catalog's data and
  the small files ``build_workspace`` writes: mine.csv, new.csv, ratings.csv, ...), in page order (README.md, then
  docs/ by name). A shell block runs each of its commands (a line, or lines joined by ``\\``; a command shown twice
  runs once); a Python block runs whole, in one Python process per page that keeps the names of the page's
  earlier blocks, as a notebook keeps its cells';
- ``<!-- docs-test: slow -->``: the same, in the slow tier (a minute or more, or an LM);
- ``<!-- docs-test: recorded REASON -->``: too slow for the tests (an LM on hundreds of items, the grading model).
  ``python benchmarks/doc_outputs.py`` runs it in a workspace built the same way, after the runnable blocks above
  it on its page, and commits what it printed to ``benchmarks/results/doc-outputs/NAME.txt`` with the command
  and commit that made it. NAME is the page's file name and the anchor of the block's section
  (``README-quickstart-1-the-demo``; ``-2`` for a second recorded block of a section), so edits above the block
  leave it. A test fails while a recorded block has no recording of the commands it shows now, naming the
  command that records it (``python benchmarks/doc_outputs.py --block NAME``), and when a recording has no block;
- ``<!-- docs-test: output -->`` (a text block): lines of what the nearest shell or Python block above it on its
  page printed (stdout and stderr), that block being run, slow or recorded: checked against the test's run of it,
  or against its recording. Each line must match a printed line, in order, by format: numbers stand for any
  number, spaces for any spaces, ``...`` for anything; a line of ``...`` skips lines; a progress line
  (``: done in N s``) may be absent;
- ``<!-- docs-test: skip REASON -->``: never run, for the reason given (an install, a server, the reader's files,
  names a fragment leaves to the reader). A skipped text block is text no documented command prints (an error a
  server prints): a text block after a skipped shell or Python block of its section is refused, since it would
  be a typed output; mark that block ``recorded`` and the text ``output`` instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from judgetune.testing.docs import (
    RECORDINGS,
    Block,
    PythonSession,
    build_workspace,
    commands,
    mismatch,
    pages,
    read_blocks,
    read_recording,
    recorded_names,
    run_command,
    shape,
    source,
)

ROOT = Path(__file__).resolve().parents[1]
ALL = [block for page in pages(ROOT) for block in read_blocks(page, ROOT)]
RECORDED = recorded_names(ALL)
MARKED = ("bash", "python", "text")  # the languages whose blocks must carry a marker


def _source(block: Block) -> Block | None:
    return source(block, ALL)


RUNNABLE = [b for b in ALL if b.mark in ("run", "slow")
            or (b.mark == "output" and _source(b) is not None and _source(b).mark in ("run", "slow"))]


def _record(name: str) -> str:
    return f"python benchmarks/doc_outputs.py --block {name}"


def test_every_code_and_output_block_is_marked() -> None:
    unmarked = [b.name for b in ALL if b.lang in MARKED and b.mark is None]
    assert unmarked == [], "mark each block: <!-- docs-test: run|slow|recorded|output|skip REASON --> on the line before"
    assert all(b.reason for b in ALL if b.mark in ("skip", "recorded")), "a skipped or recorded block says why"
    assert all(b.lang in ("bash", "python") for b in ALL if b.mark in ("run", "slow", "recorded"))
    for block in (b for b in ALL if b.mark == "output"):
        shown = _source(block)
        assert shown is not None and shown.mark in ("run", "slow", "recorded"), \
            f"{block.name}: an output block follows the run, slow or recorded block whose output it shows"
    for block in (b for b in ALL if b.lang == "text" and b.mark == "skip"):
        shown = _source(block)
        assert shown is None or shown.mark != "skip" or shown.section != block.section, \
            f"{block.name} reads as the output of {shown.name}, a skipped block: mark {shown.name} " \
            "`recorded`, this block `output`, and record it"


def test_format_matching_reads_numbers_and_cuts() -> None:
    printed = "judge  n  mae\nembedding  60  0.611 [0.49,0.74]  0.650\nx: done in 3 s\nrandom  60  -0.1"
    assert mismatch("judge n mae\nembedding 80 0.7 [0.5,0.9] ...\n...\nrandom 9 0.4", printed) is None
    assert mismatch("y: done in 40 s\nrandom 1 2", printed) is None
    assert mismatch("constant 60 0.7", printed) == "constant 60 0.7"
    assert mismatch("random 1\njudge n mae", printed) == "random 1"
    assert shape("scale 0.6-5, +0.294 [-1.5, 2]") == "scale 0-0, 0 [0, 0]"


def test_a_recorded_block_keeps_its_name_when_the_page_above_it_changes(tmp_path: Path) -> None:
    section = "## Run it: `the demo`\n\n<!-- docs-test: recorded minutes -->\n```bash\njudgetune demo\n```\n"
    page = tmp_path / "README.md"
    page.write_text(f"# Title\n\n{section}<!-- docs-test: recorded minutes -->\n```python\nx = 1\n```\n")
    before = recorded_names(read_blocks(page, tmp_path))
    page.write_text(f"# Title\n\nNew words.\n\n```text\nx\n```\n\n{section}"
                    "<!-- docs-test: recorded minutes -->\n```python\nx = 1\n```\n")
    after = recorded_names(read_blocks(page, tmp_path))
    assert list(before) == list(after) == ["README-run-it-the-demo", "README-run-it-the-demo-2"]
    assert [b.line for b in before.values()] != [b.line for b in after.values()]
    assert commands(after["README-run-it-the-demo-2"]) == ["x = 1"]


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_block_has_a_recording_its_outputs_match(name: str) -> None:
    """A recorded block has a recording of the commands it shows; the output blocks after it match it."""
    block = RECORDED[name]
    path = ROOT / RECORDINGS / f"{name}.txt"
    assert path.is_file(), f"{block.name} is marked recorded and has no recording {path.relative_to(ROOT)}: " \
                           f"record it with `{_record(name)}`"
    recording = read_recording(path)
    assert recording.commands == commands(block), \
        f"{path.relative_to(ROOT)} records other commands than {block.name} shows: re-record with `{_record(name)}`"
    for output in (b for b in ALL if b.mark == "output" and _source(b) == block):
        line = mismatch(output.text, recording.output)
        assert line is None, f"{output.name}: no line of the recorded output of {block.name} has the format of\n" \
                             f"  {line}\n{path.relative_to(ROOT)} holds:\n{recording.output}"


def test_every_recording_has_its_block() -> None:
    stale = [p.name for p in sorted((ROOT / RECORDINGS).glob("*.txt")) if p.stem not in RECORDED]
    assert stale == [], f"recordings of no recorded block (a section renamed, a block unmarked): remove {stale}"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, mirror: Path):
    """The workspace the documented blocks run in, with a record of what each block printed and a Python
    process per page."""
    state = {"space": build_workspace(tmp_path_factory.mktemp("docs"), mirror), "printed": {}, "commands": {},
             "sessions": {}}
    yield state
    for session in state["sessions"].values():
        session.close()


def _param(block: Block):
    slow = block.mark == "slow" or (block.mark == "output" and _source(block).mark == "slow")
    return pytest.param(block, id=block.name, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("block", [_param(b) for b in RUNNABLE])
def test_documented_block(block: Block, workspace: dict) -> None:
    """A block's commands exit 0 (each run once per workspace) and a Python block raises nothing; an output
    block matches what they print."""
    printed, space = workspace["printed"], workspace["space"]
    if block.mark == "output":
        shown = _source(block)
        assert shown.name in printed, f"{shown.name} did not run (it failed, or its tier was left out)"
        line = mismatch(block.text, printed[shown.name])
        assert line is None, f"{block.name}: no printed line has the format of\n  {line}\n" \
                             f"{shown.name} printed:\n{printed[shown.name]}"
        return
    if block.lang == "python":
        sessions = workspace["sessions"]
        if block.page not in sessions:
            sessions[block.page] = PythonSession(space)
        error, printed[block.name] = sessions[block.page].run(block.text)
        assert error is None, f"{block.name} raised:\n{error}\nit printed:\n{printed[block.name]}"
        return
    seen, outputs = workspace["commands"], []
    for command in commands(block):
        if command not in seen:
            seen[command] = run_command(command, space)
        code, output = seen[command]
        assert code == 0, f"{block.name}: `{command}` exited {code}:\n{output}"
        outputs.append(output)
    printed[block.name] = "".join(outputs)


def test_an_unclosed_fence_is_named_by_its_page_and_line(tmp_path):
    (tmp_path / "page.md").write_text("Text.\n\n```bash\necho never closed\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"page\.md:3: a fenced block is opened here and never closed"):
        read_blocks(tmp_path / "page.md", tmp_path)


def test_the_replay_tables_in_the_tuning_page_are_the_result_files() -> None:
    """Each table under ``<!-- replay-table: FILE ... -->`` in docs/tuning.md is what ``benchmarks/replay.py --docs``
    renders from the committed result files."""
    import sys

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        import replay
    finally:
        sys.path.remove(str(root / "benchmarks"))
    page = (root / "docs" / "tuning.md").read_text(encoding="utf-8")
    assert replay.MARKER.search(page)
    assert replay.render_page(page, root / "benchmarks" / "results") == page


def test_the_gates_constants_read_the_same_everywhere() -> None:
    """Every "R x F folds", "R x F folds from N tested", "one per N confirming", "judged in N blocks" and "one-sided
    P% upper bound" in the docs and in the commands' help is the code's own constant (the nested gate's cuts and
    folds, the rescored trials' rate, the futility looks and their bound)."""
    import re

    from judgetune.cli._reference import reference
    from judgetune.stats import FOLDS, REPEATS, WIDE_FOLD_UNITS, WIDE_FOLDS
    from judgetune.tuning import RESCORE_ITEMS
    from judgetune.tuning._racing import FUTILITY, LOOKS

    root = Path(__file__).resolve().parents[1]
    texts = {p.name: p.read_text(encoding="utf-8") for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))]}
    texts["--help"] = reference()
    expected = {r"\b(\d+)\s+x\s+(\d+)\s+folds(?!\s+from)": (REPEATS, FOLDS),
                r"\b(\d+)\s+x\s+(\d+)\s+folds\s+from\s+(\d+)\s+tested": (REPEATS, WIDE_FOLDS, WIDE_FOLD_UNITS),
                r"one\s+per\s+(\d+)\s+confirming": (RESCORE_ITEMS,),
                r"judged\s+in\s+(\d+)\s+blocks": (LOOKS,),
                r"one-sided\s+(\d+)%\s+upper\s+bound": (round(100 * (1 - FUTILITY)),)}
    for pattern, values in expected.items():
        said = {(name, tuple(int(v) for v in m.groups())) for name, text in texts.items()
                for m in re.finditer(pattern, text)}
        assert said, pattern
        assert {found for _, found in said} == {values}, (pattern, sorted(said))
