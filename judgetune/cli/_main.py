"""The entry point: parse, refuse special inputs, run the command, map errors to exit codes."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
import traceback
from pathlib import Path

from judgetune._files import open_regular
from judgetune._offline import keep_litellm_offline
from judgetune.cli._options import EXIT_INTERRUPTED, EXIT_NOTHING_JUDGED, EXIT_USER_ERROR
from judgetune.cli._parser import build_parser
from judgetune.errors import JudgetuneError, NothingJudgedError, printable, redact, shown


def main(argv: list[str] | None = None) -> int:
    """Run one command. Exit codes: 0 success; 2 a user error (bad input or options, nothing run);
    3 the command ran but not one item could be judged; 130 interrupted (Ctrl-C)."""
    args = build_parser().parse_args(argv)  # a bad option: one line and SystemExit(2)
    keep_litellm_offline()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_Redact())
    try:
        _refuse_special_inputs(args)
        if not args.verbose:  # Optuna logs every failed trial with its traceback; our own error line says it once
            import optuna

            optuna.logging.set_verbosity(optuna.logging.ERROR)
        args.handler(args)
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        sys.stdout = None
        return 0
    except KeyboardInterrupt:
        print("judgetune: interrupted (a running trial is marked failed; re-run the command to resume)",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except NothingJudgedError as err:
        _error(err, args)
        return EXIT_NOTHING_JUDGED
    except (JudgetuneError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError,
            argparse.ArgumentTypeError) as err:  # the last: a derived name checked after parsing
        _error(err, args)
        return EXIT_USER_ERROR
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = f"{shown(err.filename)}: " if err.filename else ""
        _error(JudgetuneError(f"{where}no space left on the device ({err.strerror}); what was written before is kept "
                              "(a score run's rows in OUT.part): free some space and run the same command again to "
                              "resume"), args)
        return EXIT_USER_ERROR
    return 0


_INPUTS = {"config": "JSON file", "configs": "JSON file", "data": "data file", "labeled": "data file",
           "instructions": "file", "criterion": "file"}


def _refuse_special_inputs(args: argparse.Namespace) -> None:
    """Refuse a device, FIFO or socket given as an input before any heavy import or work (each reader checks again)."""
    for name, what in _INPUTS.items():
        values = getattr(args, name, None)
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, (str, Path)) and os.path.exists(value) and not os.path.isdir(value):
                open_regular(value, what).close()  # a device, FIFO or socket: FileKindError naming what it is


def _error(err: BaseException, args: argparse.Namespace) -> None:
    if args.verbose:
        print(redact("".join(traceback.format_exception(err))), file=sys.stderr, end="")
    print(f"judgetune: error: {printable(redact(str(err)))}", file=sys.stderr)


class _Redact(logging.Filter):
    """No log line shows an API key (a server may echo it in an error body)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = printable(redact(record.getMessage())), ()
        return True
