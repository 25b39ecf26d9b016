"""The command line stays light until a command needs a judge: `--help` and a refused input (a device, a FIFO) import
no dspy, scipy.stats, scikit-learn, torch or Optuna, so they answer in well under a second on any machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from judgetune import audit, cli, judges, reproduce, stats, tuning

HEAVY = ("dspy", "scipy.stats", "sklearn", "torch", "optuna", "judgetune.judges", "judgetune.evaluation")


def _heavy_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_parsers_written_out_choices_are_the_registries():
    assert set(cli.JUDGE_KINDS) == set(judges.KINDS) - {"panel"}  # made by tune --panel, never chosen
    assert cli.PROTOCOLS == tuple(judges.PROTOCOLS)
    assert (cli.SAMPLERS, cli.PICK_RULES) == (tuning.SAMPLERS, tuning.PICK_RULES)
    assert cli.GATES == tuple(g for g in tuning.GATES if g != "off")  # the old rule stays a benchmark baseline
    assert cli.GATE_ITEMS_CAP == tuning.GATE_ITEMS_CAP
    assert (cli.RESCORE, cli.RESCORE_ITEMS) == (tuning.RESCORE, tuning.RESCORE_ITEMS)
    assert (cli.REPEATS, cli.FOLDS) == (stats.REPEATS, stats.FOLDS)
    assert (cli.WIDE_FOLDS, cli.WIDE_FOLD_UNITS) == (stats.WIDE_FOLDS, stats.WIDE_FOLD_UNITS)
    assert set(cli.TABLES) == set(reproduce.TABLES)
    assert set(cli.PROBES) == set(audit.PROBES)


def test_importing_the_cli_and_building_its_parser_imports_no_judge():
    assert _heavy_after("import judgetune.cli as c; c.build_parser()") == []


@pytest.mark.parametrize("args", [
    ["score", "--config", "{special}", "--data", "{ok}", "--out", "{out}"],
    ["score", "--config", "{ok}", "--data", "{special}", "--out", "{out}"],
    ["tune", "--judge", "rubric", "--data", "{ok}", "--instructions", "{special}"],
    ["evaluate", "--judge", "rubric", "--data", "{special}"],
])
def test_a_fifo_as_an_input_is_refused_before_any_heavy_import(tmp_path, args):
    special, ok = tmp_path / "pipe.json", tmp_path / "ok.jsonl"
    os.mkfifo(special)
    ok.write_text('{"id": "a", "answer": "x", "reference": "y", "label": 1}\n')
    argv = [a.format(special=special, ok=ok, out=tmp_path / "o.jsonl") for a in args]
    code = (f"import judgetune.cli as c, sys\nimport contextlib, io\nerr = io.StringIO()\n"
            f"with contextlib.redirect_stderr(err): rc = c.main({argv!r})\n"
            f"assert rc == 2 and 'FIFO' in err.getvalue(), (rc, err.getvalue())")
    assert _heavy_after(code) == []
