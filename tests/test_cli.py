"""The data commands of the CLI."""

from __future__ import annotations

import json

from judgetune import cli


def test_data_list(capsys):
    assert cli.main(["data", "list", "--json"]) == 0
    names = [s["name"] for s in json.loads(capsys.readouterr().out)["sources"]]
    assert "linkage-antique" in names and "nrp-clef-ehealth" in names


def test_data_show(data_root, monkeypatch, capsys):
    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(data_root))
    assert cli.main(["data", "show", "linkage-webglm", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["histogram"] == {"1": 94, "2": 105, "3": 101} and info["scale"]["low"] == 1
    assert cli.main(["data", "show", "sts2012-msrpar"]) == 0
    out = capsys.readouterr().out
    assert "splits {'train': 750, 'test': 750}" in out and "license:" in out


def test_data_fetch_from_mirror_and_errors(tmp_path, mirror, monkeypatch, capsys):
    monkeypatch.delenv("JUDGETUNE_DATA_MIRROR", raising=False)
    assert cli.main(["data", "fetch", "llmbar-natural", "--mirror", str(mirror), "--dir", str(tmp_path)]) == 0
    assert "llmbar-natural: 1 file(s)" in capsys.readouterr().out
    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(tmp_path / "empty"))
    assert cli.main(["data", "show", "stsb"]) == 2
    assert "judgetune: error: stsb: 5 file(s) missing" in capsys.readouterr().err
    assert cli.main(["data", "fetch", "stsb", "--mirror", str(tmp_path / "nowhere")]) == 2
    assert "not in mirror" in capsys.readouterr().err


def test_import_writes_no_environment_and_the_entry_points_keep_litellm_offline(tmp_path):
    """Importing judgetune changes no environment variable; the CLI sets litellm's offline switch before
    any work (a user's own setting wins)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    # scikit-learn sets two KMP_ variables at its import: imported first, so only judgetune's writes are seen
    imported = ("import os, sklearn; before = dict(os.environ); import judgetune, judgetune.cli, judgetune.tuning, "
                "judgetune.scoring, judgetune.lm; print(dict(os.environ) == before)")
    out = subprocess.run([sys.executable, "-c", imported], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
    entry = ("import os, sys; from judgetune import cli; cli.main(['data', 'list']); "
             "print(os.environ['LITELLM_LOCAL_MODEL_COST_MAP'], file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", entry], env=env, capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "True"
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "False"
    out = subprocess.run([sys.executable, "-c", entry], env=env, capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "False"
