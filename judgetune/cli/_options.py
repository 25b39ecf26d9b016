"""Shared pieces of the command line: the parser's choices, argument types, and readers of option values."""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from pathlib import Path

from judgetune import datasets
from judgetune._files import (
    FileKindError,
    FileTooLargeError,
    read_bounded,
)
from judgetune.errors import JudgetuneError, NothingJudgedError, shown

EXIT_USER_ERROR = 2  # bad input or options: nothing was run
EXIT_NOTHING_JUDGED = 3  # the command ran, but not one item could be judged
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT)
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


# The parser's choices, written out so that building it imports no judge (dspy, scipy, scikit-learn): a refused file
# or `--help` answers in well under a second. tests/test_cli_imports.py checks them against the registries. Every
# kind but the panel, which `tune --panel` makes from the candidates of another kind (a judge.json may hold one).
JUDGE_KINDS = ("factcheck", "rubric", "correctness", "pairwise", "linkage", "likelihood", "embedding", "rouge1",
               "rouge2", "rougeL", "bleu", "bm25", "overlap", "length", "refsim", "hybrid", "checklist")
PROTOCOLS = ("group", "linkage")
SAMPLERS = ("tpe", "nsga2", "random")
GATES = ("on", "nested")  # the old rule (RunSpec(gate="off")) is a benchmark baseline, not a user's choice
GATE_ITEMS_CAP = 2000  # --gate-items left out: every labeled non-test row up to this many (tuning.GATE_ITEMS_CAP)
RESCORE, RESCORE_ITEMS = 4, 60  # --rescore left out: one challenger per 60 confirming rows, at least 4 (tuning's)
REPEATS, FOLDS = 10, 5  # the nested gate's cuts and folds, for the help (stats.REPEATS, stats.FOLDS)
WIDE_FOLDS, WIDE_FOLD_UNITS = 10, 400  # ... its folds from this many tested rows on (stats.WIDE_FOLDS, ...)
PICK_RULES = ("spearman", "mae")
TABLES = ("nrp-paper", "ragchecker")
PROBES = ("position", "verbosity", "distraction", "stability", "self_consistency", "rewrite")


class _OnFirstUse:
    """A package imported when one of its names is first used (the heavy ones: judges, evaluation, tuning)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


evaluation = _OnFirstUse("judgetune.evaluation")
judges = _OnFirstUse("judgetune.judges")
reproduce = _OnFirstUse("judgetune.reproduce")
tuning = _OnFirstUse("judgetune.tuning")


def _number(cast: type, what: str, ok) -> callable:
    """An argparse type: ``cast(text)`` when ``ok`` holds for it, else a one-line error saying ``what`` was expected."""
    def parse(text: str):
        try:
            if not text.isascii():  # int("٣") is 3: numbers are written in ASCII digits only
                raise ValueError(text)
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value

    return parse


_count = _number(int, "a whole number >= 1", lambda v: v >= 1)  # a count of items, trials, resamples...
_count_from_zero = _number(int, "a whole number >= 0", lambda v: v >= 0)
_seed = _number(int, "a whole number from 0 to 4294967295", lambda v: 0 <= v < 2**32)  # what NumPy's RandomState takes
_seconds = _number(float, "seconds > 0", lambda v: 0 < v < float("inf"))
_positive = _number(float, "a number > 0", lambda v: 0 < v < float("inf"))
_price = _number(float, "a price >= 0", lambda v: 0 <= v < float("inf"))


def _scale(text: str) -> datasets.Scale:
    try:
        return datasets.parse_scale(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _run_name(text: str) -> str:
    """A run name is a plain folder name under --runs-dir: no path separators, no '..', not absolute."""
    if not _RUN_NAME.fullmatch(text) or ".." in text:
        raise argparse.ArgumentTypeError(f"expected a plain name (letters, digits, '.', '_', '-'; no path, no '..'), "
                                         f"got {text!r}")
    return text


def _field(text: str) -> tuple[str, str]:
    """``FIELD=COLUMN``: an Example field read from a column of the data file."""
    target, sep, column = text.partition("=")
    if not sep or not target.strip() or not column.strip():
        raise argparse.ArgumentTypeError(f"expected FIELD=COLUMN (e.g. answer=summary), got {text!r}")
    if target.strip() not in datasets.MAPPABLE:
        raise argparse.ArgumentTypeError(f"expected FIELD=COLUMN with FIELD among {', '.join(datasets.MAPPABLE)}, "
                                         f"got {target.strip()!r}")
    return target.strip(), column.strip()


def _labels(text: str) -> list[str]:
    """``A,B,C``: columns holding one human score each."""
    names = [n.strip() for n in text.split(",")]
    if len(names) < 2 or not all(names) or len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"expected two or more distinct column names separated by commas, got {text!r}")
    bad = [n for n in names if not _RUN_NAME.fullmatch(n) or ".." in n]  # each names a run folder, RUN-NAME
    if bad:
        raise argparse.ArgumentTypeError(f"expected column names usable in a run folder name (letters, digits, '.', "
                                         f"'_', '-'; no '..'), got {', '.join(map(repr, bad))}")
    return names


def _mapping(args: argparse.Namespace, label: str | None = None, *, stored: dict | None = None) -> dict:
    """The ``fields`` and ``label`` keywords of the readers, from --field and --label (or ``label``).

    ``stored`` is the mapping a judge was tuned with (``fields``, ``label``); each --field and
    --label given replaces its part of it."""
    fields: dict[str, str] = {}
    for target, column in getattr(args, "field", None) or []:
        if target in fields and fields[target] != column:
            raise JudgetuneError(f"--field {target}=...: given twice ({shown(fields[target])} and {shown(column)}); "
                                 "map a field once")
        fields[target] = column
    label = label or getattr(args, "label", None)
    if stored:
        score_given = label is not None or {"label", "preference"} & set(fields)
        kept = {t: c for t, c in stored.get("fields", {}).items() if not (score_given and t in ("label", "preference"))}
        fields = {**kept, **fields}
        if not score_given and not {"label", "preference"} & set(fields):
            label = stored.get("label")
    try:
        datasets.FieldMap(fields, label)
    except ValueError as err:
        raise JudgetuneError(str(err)) from None
    return {"fields": fields, "label": label}


def _load_data(args: argparse.Namespace) -> tuple[list, tuple[float, float]]:
    """The data and its human scale; an inferred scale is said on stderr (state it with --scale)."""
    examples, label_range = datasets.load_data(args.data, mirror=args.mirror, scale=getattr(args, "scale", None),
                                               **_mapping(args))
    if args.data not in datasets.CATALOG and getattr(args, "scale", None) is None:
        print(f"human scale {label_range[0]:g}-{label_range[1]:g}, inferred from the labels of {shown(args.data)} "
              "(state it with --scale LOW-HIGH)", file=sys.stderr)
    return examples, label_range


def _families(text: str) -> list[str]:
    """``--also hybrid,embedding``: judge families, each one of JUDGE_KINDS; ``none``: no other family."""
    if text.strip() == "none":
        return []
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in JUDGE_KINDS]
    if not kinds or unknown:
        raise argparse.ArgumentTypeError(f"expected 'none' or judge families separated by commas, each one of "
                                         f"{', '.join(JUDGE_KINDS)}; got {text!r}")
    return kinds


def _param(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, datasets.strict_loads(value)
    except json.JSONDecodeError:  # not JSON: the text itself
        return key, value
    except datasets.JSONShapeError as err:  # a repeated key, too deep
        raise argparse.ArgumentTypeError(f"{key}: {err}") from None


def _some_judged(failures: list[str], total: int, *, what: str) -> None:
    """Raise NothingJudgedError (exit 3) when every one of ``total`` items failed, with the first reason."""
    if total and len(failures) >= total:
        reason = failures[0] if failures else "no reason given"
        raise NothingJudgedError(f"all {total} {what} failed; the first because: {reason}")


def _read_instructions(path: Path | None) -> list[str]:
    """The user's instruction variants: a JSON list of strings, or plain text with one variant per
    paragraph (blank-line separated)."""
    if path is None:
        return []
    text = _read_text(path, "--instructions")
    if text.lstrip().startswith("["):
        value, problem = datasets.parse_json(text, where=shown(path), what="a JSON list of strings", field="file")
        if problem:
            raise JudgetuneError(problem)
        variants = value
        if not isinstance(variants, list) or not all(isinstance(v, str) and v.strip() for v in variants):
            raise JudgetuneError(f"{shown(path)}: expected a JSON list of non-empty strings")
        return [v.strip() for v in variants]
    variants = [block.strip() for block in text.split("\n\n") if block.strip()]
    if not variants:
        raise JudgetuneError(f"{shown(path)}: no instruction found (one per paragraph, or a JSON list)")
    return variants


def _read_text(path: Path, option: str) -> str:
    """A small text file an option names, with the option and file in any error."""
    try:  # a regular file, read with a bound (never by its reported size: /dev/zero reports 0)
        return read_bounded(path, datasets.MAX_FILE_BYTES, "file").decode("utf-8-sig")
    except FileTooLargeError:
        raise JudgetuneError(f"{option} {shown(path)}: expected a text file of at most {datasets.MAX_FILE_BYTES:,} "
                             "bytes") from None
    except FileKindError as err:
        raise JudgetuneError(f"{option} {err}") from None
    except FileNotFoundError:
        raise JudgetuneError(f"{option} {shown(path)}: no such file") from None
    except IsADirectoryError:
        raise JudgetuneError(f"{option} {shown(path)}: expected a file, found a folder") from None
    except UnicodeDecodeError as err:
        raise JudgetuneError(f"{option} {shown(path)}: expected UTF-8 text, found undecodable bytes "
                             f"({err.reason})") from None


def _names_file(text: str) -> bool:
    """Whether ``text`` is the path of something other than a folder (a text longer than a file name is text)."""
    try:
        return "\n" not in text and Path(text).exists() and not Path(text).is_dir()
    except (OSError, ValueError):  # a name too long, a NUL character
        return False


def _text_or_file(text: str | None) -> str | None:
    """``text`` itself, or the contents of the file it names."""
    if text is None or not _names_file(text):
        return text
    content = _read_text(Path(text), "--criterion").strip()
    if not content:
        raise JudgetuneError(f"{shown(text)}: the criterion file is empty")
    return content


def _protocol_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--protocol", choices=PROTOCOLS,
                        help="score items together by question (default: none, every item alone, from the judge and the "
                             "item): group (a judge may compare an item with its question's other answers, never "
                             "their labels) or linkage (per question, references drawn by grade from its labeled "
                             "answers and removed from the candidates); both need a group on every item")
    parser.add_argument("--per-grade", type=_count, default=1, metavar="N",
                        help="references per grade for --protocol linkage (1 or 2 in the paper)")


def _protocol_field(args: argparse.Namespace) -> dict:
    """The tuner's protocol settings (none when --protocol is not given)."""
    if not getattr(args, "protocol", None):
        return {}
    return {"protocol": args.protocol, "per_grade": args.per_grade}


def _tuned_mapping(config, path: Path) -> dict:
    """The field mapping a judge was tuned with (``data.fields`` and ``data.label`` of its judge.json)."""
    fields, label = config.data.get("fields", {}), config.data.get("label")
    if not isinstance(fields, dict) or not all(isinstance(c, str) for c in fields.values()) or not (
            label is None or isinstance(label, str)):
        raise JudgetuneError(f"{shown(path)}: data.fields/data.label: expected {{FIELD: COLUMN}} and a column name, "
                             f"found {fields!r} and {label!r}")
    try:
        datasets.FieldMap(fields, label)
    except ValueError as err:
        raise JudgetuneError(f"{shown(path)}: data: {err}") from None
    return {"fields": fields, "label": label}


def _shown_default(action: argparse.Action) -> str | None:
    """The default an option's help line appends, or None when its help says it already (or there is none to say)."""
    if action.required or action.nargs == 0 or action.default in (None, argparse.SUPPRESS):
        return None
    if "default" in (action.help or ""):
        return None
    value = action.default
    return str(value if not isinstance(value, float) or not value.is_integer() else int(value))


class _HelpFormatter(argparse.HelpFormatter):
    """``--help`` lines that end with the option's default, unless the line names it already."""

    def _get_help_string(self, action: argparse.Action) -> str:
        default = _shown_default(action)
        help_text = action.help or ""
        if action.required and action.option_strings:
            help_text += " (required)"
        return help_text if default is None else f"{help_text} (default {default.replace('%', '%%')})"


class _Parser(argparse.ArgumentParser):
    """Option errors as one line (``judgetune tune: error: argument --run: ...``), exit 2; help lines with defaults."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {shown(message)} (see {self.prog} -h)\n")


def _groups(parser: argparse.ArgumentParser, *titles: str) -> list[argparse._ArgumentGroup]:
    """Argument groups of a command, one per title, listed in ``--help`` in this order."""
    return [parser.add_argument_group(title) for title in titles]


def _column_options(parser: argparse.ArgumentParser) -> None:
    """--field and --label: the data file's own column names."""
    parser.add_argument("--field", type=_field, action="append", metavar="FIELD=COLUMN",
                        help="read an Example field from a column of your own, e.g. answer=summary (repeatable; "
                             "default: the columns named as the fields)")
    parser.add_argument("--label", metavar="COLUMN", help="the column holding the human score (default label)")


def _timeout_option(parser: argparse.ArgumentParser, *, no_cache: bool = False) -> None:
    """``--timeout`` (per attempt of a server call) and, for commands that may recompute answers, ``--no-cache``."""
    parser.add_argument("--timeout", type=_seconds, default=60.0, metavar="SECONDS",
                        help="seconds per attempt of a server call (default 60)")
    if no_cache:
        parser.add_argument("--no-cache", action="store_true", help="compute every LM answer afresh")


DEFAULT_RATE_LIMIT_WAIT = 600.0  # seconds, as load_lm's
DEFAULT_CONCURRENCY = 8  # server calls at a time, as load_lm's


def _rate_limit_option(parser: argparse.ArgumentParser) -> None:
    """``--rate-limit-wait``: how long an item may wait out a served model's rate limit."""
    parser.add_argument("--rate-limit-wait", type=_seconds, default=DEFAULT_RATE_LIMIT_WAIT, metavar="SECONDS",
                        help="seconds an item may wait out a server's rate limit (429/503, Retry-After honoured) "
                             "before it fails (default 600)")


def _pace_options(parser: argparse.ArgumentParser) -> None:
    """``--concurrency`` and ``--rps``: how hard a served model is pressed."""
    parser.add_argument("--concurrency", type=_count, default=DEFAULT_CONCURRENCY, metavar="N",
                        help=f"server calls at a time (default {DEFAULT_CONCURRENCY})")
    parser.add_argument("--rps", type=_positive, metavar="N",
                        help="at most this many server requests per second (default: no bound)")


def _endpoint_option(parser: argparse.ArgumentParser) -> None:
    """``--api-base`` for a command that loads judge.json: the server to use instead of the config's (and
    the one the key may go to: a judge.json's own endpoint gets the key only when trusted)."""
    parser.add_argument("--api-base", metavar="URL", help="the OpenAI-compatible server to use instead of the "
                        "judge.json's (default: the judge.json's; it gets $OPENAI_API_KEY; the judge.json's own "
                        "endpoint gets it only when listed in $JUDGETUNE_TRUSTED_ENDPOINTS)")


def _audit_bounds(texts: list[str] | None) -> dict[str, float]:
    from judgetune.audit import parse_bounds

    return parse_bounds(texts or [])


def _cost_free(row: dict) -> dict:
    """A metrics row with its failure rate, and zero cost where it records none (the trivial baselines)."""
    failures = row.get("parse_failures") or 0
    items = row.get("items") or row.get("n") or 0
    return {"parse_failure_rate": failures / items if items else 0, "tokens_per_item": 0, "seconds_per_item": 0, **row}
