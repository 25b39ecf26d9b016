"""The ``judgetune`` command: a thin layer over the public API, one small function per command.

Importing it is light (no judge, dspy, scipy or scikit-learn): those load when a command needs them, so ``--help`` and a
refused input answer at once.
"""

from judgetune.cli._main import main
from judgetune.cli._options import (
    EXIT_INTERRUPTED,
    EXIT_NOTHING_JUDGED,
    EXIT_USER_ERROR,
    FOLDS,
    GATE_ITEMS_CAP,
    GATES,
    JUDGE_KINDS,
    PICK_RULES,
    PROBES,
    PROTOCOLS,
    REPEATS,
    RESCORE,
    RESCORE_ITEMS,
    SAMPLERS,
    TABLES,
    WIDE_FOLD_UNITS,
    WIDE_FOLDS,
)
from judgetune.cli._parser import build_parser

__all__ = ["EXIT_INTERRUPTED", "EXIT_NOTHING_JUDGED", "EXIT_USER_ERROR", "FOLDS", "GATE_ITEMS_CAP", "GATES",
           "JUDGE_KINDS", "PICK_RULES", "PROBES", "PROTOCOLS", "REPEATS", "RESCORE", "RESCORE_ITEMS", "SAMPLERS", "TABLES",
           "WIDE_FOLDS", "WIDE_FOLD_UNITS", "build_parser", "main"]
