"""The README's guide: ten tasks, every link lands on a heading, and the ten read in under 8,000 words."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_words", ROOT / "benchmarks" / "docs_words.py")
docs_words = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("docs_words", docs_words)  # its dataclass reads its module
_spec.loader.exec_module(docs_words)


def test_anchors_and_spans_follow_githubs_rules() -> None:
    assert docs_words.slug("What a run prints: the gain line, `metrics.gain`") == \
        "what-a-run-prints-the-gain-line-metricsgain"
    assert docs_words.slug("A frozen judge in MLflow, inspect_ai and DSPy") == "a-frozen-judge-in-mlflow-inspect_ai-and-dspy"
    lines = ["# Title", "opening", "```bash", "# a comment, not a heading", "```", "## One", "one",
             "### Sub", "sub", "## One", "again"]
    marks = docs_words.headings(lines)
    assert [(h.level, h.anchor) for h in marks] == [(1, "title"), (2, "one"), (3, "sub"), (2, "one-1")]
    assert docs_words.count_words("<!-- docs-test: run -->\nsee [the page](docs/x.md#y) | --- |") == 3


def test_the_guide_sends_each_of_ten_tasks_to_existing_sections_in_under_8000_words() -> None:
    tasks = docs_words.guide(ROOT / "README.md")
    assert len(tasks) == 10 and all(links for _, links in tasks)
    measured = [docs_words.measure(links, ROOT / "README.md") for _, links in tasks]  # an unknown anchor exits
    assert all(m["words"] > 0 for m in measured)
    assert sum(m["words"] for m in measured) < 8000
