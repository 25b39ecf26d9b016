"""docs/cli.md, generated from the parser: every command's options by group, each help line with its default.

``python -m judgetune.cli._reference docs/cli.md`` writes it; without an argument it prints it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from judgetune.cli._options import _HelpFormatter
from judgetune.cli._parser import build_parser

__all__ = ["reference"]

_HEAD = """# Command-line reference

Every command's options, by group, each with its default; `judgetune COMMAND -h` prints the same lines. This page is
generated from the parser (`python -m judgetune.cli._reference docs/cli.md`) and a test checks that it still is.
"""


def reference(parser: argparse.ArgumentParser | None = None) -> str:
    """The Markdown reference of ``parser`` (default: judgetune's), one section per command."""
    parser = parser or build_parser()
    sections = [_HEAD]
    for name, help_text, command in _commands(parser, parser.prog, None):
        sections.append(_section(name, help_text, command))
    return "\n".join(sections)


def _commands(parser: argparse.ArgumentParser, name: str, help_text: str | None):
    """``(full name, one-line help, parser)`` of ``parser`` and of every command under it, depth first."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if _options(parser) or not subparsers:
        yield name, help_text or parser.description or "", parser
    for action in subparsers:
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for sub_name, sub in action.choices.items():
            yield from _commands(sub, f"{name} {sub_name}", helps.get(sub_name))


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def _section(name: str, help_text: str, parser: argparse.ArgumentParser) -> str:
    lines = [f"## {name}", "", help_text, ""]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a in _options(parser)]
        if not actions:
            continue
        title = {id(parser._positionals): "arguments", id(parser._optionals): "options"}.get(id(group), group.title)
        lines += [f"**{title}**", "", "| option | what it does |", "|---|---|"]
        lines += [f"| `{_cell(_invocation(a))}` | {_cell(_help_line(a, parser.prog))} |" for a in actions]
        lines.append("")
    return "\n".join(lines)


def _invocation(action: argparse.Action) -> str:
    """How the option is written: ``--data NAME|FILE``, ``--split {train,dev,test}``, ``--json``, ``NAME``."""
    if action.metavar is not None:
        value = action.metavar
    elif action.choices is not None:
        value = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        value = action.dest.upper()
    if action.nargs == "+":
        value = f"{value} [{value} ...]"
    if not action.option_strings:
        return value
    flags = ", ".join(action.option_strings)
    return flags if action.nargs == 0 else f"{flags} {value}"


def _help_line(action: argparse.Action, prog: str) -> str:
    """The option's help as ``--help`` prints it (its default appended), on one line."""
    text = _HelpFormatter(prog)._get_help_string(action)
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    if action.choices is not None:
        params["choices"] = ", ".join(map(str, action.choices))
    return " ".join((text % dict(params, prog=prog)).split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        Path(argv[0]).write_text(reference(), encoding="utf-8")
    else:
        sys.stdout.write(reference())


if __name__ == "__main__":
    main()
