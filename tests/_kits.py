"""Small data kits several test files share: rows whose labels a word-overlap judge can learn, rows whose
labels follow answer length, a JSONL writer and a frozen length judge."""

from __future__ import annotations

import json
import random
from pathlib import Path

from judgetune.config import JudgeConfig

NOISE = ["zebra", "piano", "galaxy", "copper", "violin", "marble"]
WORDS = ("the quick brown fox jumps over a lazy dog while seven happy cats sleep under warm red blankets near "
         "old trees").split()


def overlap_rows(n: int = 60, seed: int = 0) -> list[dict]:
    """Answers that keep fewer of their reference's words as the label falls (5: all ten, 0: none)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        reference = rng.sample(WORDS, 10)
        drop = i % 6
        answer = list(reference)
        for j in rng.sample(range(10), min(10, 2 * drop)):
            answer[j] = rng.choice(NOISE)
        out.append({"id": f"r{i}", "answer": " ".join(answer), "reference": " ".join(reference), "label": 5 - drop})
    return out


def length_rows(n: int = 24) -> list[dict]:
    """Grouped rows whose label follows the answer's length (1-5)."""
    return [{"id": str(i), "question": f"question {i}", "answer": "word " * (1 + i % 5) + f"x{i}",
             "reference": "word word word word word", "label": 1 + i % 5, "group": f"g{i // 2}"} for i in range(n)]


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def length_config(path: Path, **fields) -> Path:
    """A frozen length judge (no LM, no calibrator) saved at ``path``."""
    return JudgeConfig(judge="length", params={}, lm=None, instruction=None, demos=[], calibrator=None,
                       label_range=[1.0, 5.0], **fields).save(path)
