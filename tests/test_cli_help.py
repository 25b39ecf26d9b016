"""The command line explains itself: every option has a help line with its default, options are grouped, and
docs/cli.md is what the parser generates."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from judgetune.cli import build_parser, main
from judgetune.cli._options import _shown_default
from judgetune.cli._reference import reference

ROOT = Path(__file__).resolve().parents[1]


def _options(parser: argparse.ArgumentParser, name: str = "judgetune"):
    """``(command, action)`` for every option and argument of every command, but -h."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _options(sub, f"{name} {sub_name}")
        elif not isinstance(action, argparse._HelpAction):
            yield name, action


def _label(command: str, action: argparse.Action) -> str:
    return f"{command} {action.option_strings[0] if action.option_strings else action.dest}"


def test_every_option_has_a_help_line() -> None:
    options = list(_options(build_parser()))
    assert len(options) > 150
    assert [_label(c, a) for c, a in options if not (a.help or "").strip()] == []


def test_every_option_says_its_default() -> None:
    """An option that takes a value and may be left out says what it is then: in its help, or appended from the
    parser's default. Flags are off unless given; required options say so."""
    silent = [_label(c, a) for c, a in _options(build_parser())
              if a.option_strings and a.nargs != 0 and not a.required
              and "default" not in (a.help or "") and _shown_default(a) is None]
    assert silent == []


def test_help_prints_groups_and_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for title in ("data:", "model:", "search:", "gate:", "output:"):
        assert f"\n{title}\n" in out
    assert "(default 12)" in out and "(default tpe)" in out and "(required)" in out
    assert "--trials N" in out[out.index("\nsearch:\n"):out.index("\ngate:\n")]


def test_large_commands_group_every_option() -> None:
    """A command of more than eight options lists none of them in argparse's catch-all group."""
    parser = build_parser()
    commands = {c for c, _ in _options(parser)}
    for command in commands:
        sub = parser
        for word in command.split()[1:]:
            sub = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
        loose = [a for a in sub._optionals._group_actions if not isinstance(a, argparse._HelpAction)]
        if len(sub._actions) > 9:
            assert loose == [], command


def test_docs_cli_md_is_generated_from_the_parser() -> None:
    written = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert written == reference(), "docs/cli.md is stale: python -m judgetune.cli._reference docs/cli.md"


def test_reference_lists_every_option() -> None:
    text = reference()
    for command, action in _options(build_parser()):
        assert f"## {command}\n" in text
        for flag in action.option_strings:
            assert f"`{flag}" in text or f", {flag}" in text, (command, flag)
