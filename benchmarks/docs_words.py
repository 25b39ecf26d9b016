"""Count the words a reader must read for each task of the README's guide.

    python benchmarks/docs_words.py [--json] [--out benchmarks/results/docs_words.json]
    python benchmarks/docs_words.py --count README.md docs/tuning.md#calibration-and-the-label-range

The guide is the table under the README's ``## Guide`` heading: one row per task, its links the pages and
sections the task sends the reader to. A task's words are the words of those spans, each counted once per task:

- ``page.md`` is the whole page;
- ``page.md#anchor`` is that heading's section, from the heading to the next heading of the same or a higher
  level (its subsections included); an anchor of the page's title (its ``#`` heading) is the page's opening,
  from the top to its first ``##`` heading.

Anchors are GitHub's (lower case, punctuation dropped, spaces as hyphens, ``-1`` on a repeat). A word is a run
of characters between spaces holding a letter or a digit, in prose, tables and code blocks alike; the targets of
links and the ``<!-- docs-test -->`` markers are not read, so they are not counted. Minutes are at 200 words a
minute. ``--count`` counts the spans given instead of the guide's (the same rules), to measure other paths.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GUIDE = "Guide"  # the README heading whose table is the guide
WORDS_PER_MINUTE = 200
LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]*)\)")
COMMENT = re.compile(r"<!--.*?-->", re.S)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Heading:
    line: int  # 0-based index of the heading's line
    level: int
    anchor: str


def slug(title: str) -> str:
    """GitHub's anchor of a heading: ``What a run prints: `metrics.gain` `` -> ``what-a-run-prints-metricsgain``."""
    text = LINK.sub(r"\1", title).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(lines: list[str]) -> list[Heading]:
    """The page's headings outside code blocks, each with its anchor (repeats numbered as GitHub numbers them)."""
    found, seen, fence = [], {}, None
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            mark = stripped[:3]
            fence = None if fence == mark else (fence or mark)
            continue
        match = HEADING.match(line) if fence is None else None
        if match:
            base = slug(match.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.append(Heading(i, len(match.group(1)), base if n == 0 else f"{base}-{n}"))
    return found


def span(path: Path, anchor: str | None) -> str:
    """The text a link sends the reader to: the whole page, a heading's section, or the page's opening."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if not anchor:
        return "\n".join(lines)
    marks = headings(lines)
    at = next((h for h in marks if h.anchor == anchor), None)
    if at is None:
        raise SystemExit(f"{path.relative_to(ROOT)}#{anchor}: no heading has that anchor")
    if at.level == 1:  # the title: the opening, up to the first section
        end = next((h.line for h in marks if h.line > at.line and h.level >= 2), len(lines))
    else:
        end = next((h.line for h in marks if h.line > at.line and h.level <= at.level), len(lines))
    return "\n".join(lines[at.line:end])


def count_words(text: str) -> int:
    """Words of Markdown as a reader reads it: link targets and HTML comments left out."""
    text = LINK.sub(r"\1", COMMENT.sub(" ", text))
    return sum(1 for token in text.split() if re.search(r"[^\W_]", token))


def resolve(target: str, base: Path) -> tuple[Path, str | None]:
    """A link's page (relative to the page that holds the link) and anchor."""
    page, _, anchor = target.partition("#")
    path = (base.parent / page).resolve() if page else base
    return path, anchor or None


def guide(readme: Path) -> list[tuple[str, list[str]]]:
    """The guide's rows: each task's name (its first cell, links as text) and the links of its row."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    marks = headings(lines)
    at = next((h for h in marks if h.level == 2 and h.anchor == slug(GUIDE)), None)
    if at is None:
        raise SystemExit(f"{readme.name}: no '## {GUIDE}' heading")
    end = next((h.line for h in marks if h.line > at.line and h.level <= 2), len(lines))
    rows = [line for line in lines[at.line + 1:end] if line.startswith("|")][2:]  # header and rule left out
    tasks = []
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        name = LINK.sub(r"\1", cells[0]).replace("*", "").strip()
        tasks.append((name, [target for _, target in LINK.findall(row) if target.endswith(".md")
                             or ".md#" in target or target.startswith("#")]))
    return tasks


def measure(targets: list[str], base: Path) -> dict:
    """Words of each distinct span the targets name, and their total."""
    spans, seen = [], set()
    for target in targets:
        path, anchor = resolve(target, base)
        key = (path, anchor)
        if key in seen:
            continue
        seen.add(key)
        name = str(path.relative_to(ROOT)) + (f"#{anchor}" if anchor else "")
        spans.append({"span": name, "words": count_words(span(path, anchor))})
    words = sum(s["words"] for s in spans)
    return {"words": words, "minutes": round(words / WORDS_PER_MINUTE, 1), "spans": spans}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="the page holding the guide")
    parser.add_argument("--count", nargs="+", metavar="PAGE[#ANCHOR]",
                        help="count these spans (relative to the repository) instead of the guide's tasks")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--out", type=Path, help="write the figures as a result file (benchmarks/results/...)")
    args = parser.parse_args(argv)

    if args.count:
        result = measure(args.count, ROOT / "README.md")
        payload = {"spans": result["spans"], "words": result["words"], "minutes": result["minutes"]}
    else:
        tasks = [{"task": name, **measure(targets, args.readme.resolve())} for name, targets in guide(args.readme)]
        total = sum(t["words"] for t in tasks)
        distinct = {s["span"]: s["words"] for t in tasks for s in t["spans"]}
        payload = {"tasks": tasks, "words": total, "minutes": round(total / WORDS_PER_MINUTE, 1),
                   "distinct_words": sum(distinct.values()), "words_per_minute": WORDS_PER_MINUTE}
    if args.out:
        write_result(args.out, payload, [Path(sys.argv[0]).as_posix(), *(argv or sys.argv[1:])])
    if args.json:
        print(json.dumps(payload, indent=2))
    elif args.count:
        for s in payload["spans"]:
            print(f"{s['words']:>6}  {s['span']}")
        print(f"{payload['words']:>6}  words, about {payload['minutes']} minutes")
    else:
        for t in payload["tasks"]:
            print(f"{t['words']:>6}  {t['minutes']:>4} min  {t['task']}")
            for s in t["spans"]:
                print(f"{'':>20}{s['words']:>6}  {s['span']}")
        print(f"{payload['words']:>6}  words for the {len(payload['tasks'])} tasks, about {payload['minutes']} "
              f"minutes ({payload['distinct_words']} words of distinct spans)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
