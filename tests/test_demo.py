"""The demo's mechanics on cheap families (the real demo's figures and time are in benchmarks/RESULTS.md):
every family is tuned on the same split, the choice is made on dev alone, the held-out table carries
the trivial baselines, and the chosen judge loads and scores through the public API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import judgetune
from judgetune import _demo


@pytest.fixture()
def small_demo(monkeypatch, tmp_path, data_root):
    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(data_root))
    monkeypatch.setattr(_demo, "SIZES", {"search_items": 12, "chunk": 12, "dev_items": 24, "test_items": 40,
                                           "gate_items": 36})
    families = (_demo.Family("embedding", "embedding", 1, {}, False),
                _demo.Family("rougeL", "rougeL", 1, {}, False))
    return _demo.run_demo(name="d", runs_dir=tmp_path, families=families), tmp_path


def test_the_demo_chooses_on_dev_and_reports_every_family_beside_the_baselines(small_demo):
    summary, runs = small_demo
    dev = {name: row["spearman"] for name, row in summary["dev"].items()}
    assert summary["chosen"] == max(dev, key=dev.get)  # the choice is made on dev figures only
    names = [r["name"] for r in summary["rows"]]
    assert names[0] == summary["chosen"] and {"embedding", "rougeL", "constant", "random"} <= set(names)
    test_items = {r["n"] for r in summary["rows"] if r["name"] not in ("constant", "random")}
    assert test_items == {40}  # every family scored on the same held-out items
    random = next(r for r in summary["rows"] if r["name"] == "random")
    assert random["spearman_ci"][0] < 0 < random["spearman_ci"][1]  # the spread of chance, over seeds
    judged = [r for r in summary["rows"] if r["name"] in ("embedding", "rougeL")]
    assert all(r["seconds_per_item"] > 0 for r in judged)  # cost is measured, not left at zero
    assert json.loads((runs / "d" / "demo.json").read_text())["chosen"] == summary["chosen"]
    low, high = summary["python"]["label_range"]
    assert low <= summary["python"]["score"] <= high  # the frozen judge, loaded and used from Python
    assert set(summary["gain"]) == {"embedding", "rougeL"} and summary["seconds"] > 0  # each family vs its default
    for gain in summary["gain"].values():  # shipped minus default on the same test items, with a paired interval
        mae = gain["mae"]
        assert isinstance(gain["default_shipped"], bool) and mae["low"] <= mae["value"] <= mae["high"]
    assert set(summary["versus"]) == {"embedding", "rougeL"} - {summary["chosen"]}
    for diff in summary["versus"].values():  # the chosen judge against each other family on the same items
        assert diff["n"] == 40
        assert diff["spearman_ci"][0] <= diff["spearman"] <= diff["spearman_ci"][1]


def test_the_chosen_judge_loads_and_scores_from_python(small_demo):
    _, runs = small_demo
    judge = judgetune.load(runs / "d" / "judge.json")
    low, high = judge.label_range
    close = judge.score(answer="The cat sat on the mat.", reference="A cat was sitting on the mat.")
    far = judge.score(answer="Stock prices fell sharply today.", reference="A cat was sitting on the mat.")
    assert low <= far < close <= high


def test_the_demo_finds_the_data_beside_the_checkout():
    """A fresh checkout with ``../shared/data`` beside it and no network: the demo reads the catalog there."""
    from judgetune.cli._tuning import sibling_mirror

    checkout = Path(__file__).resolve().parents[1]
    assert sibling_mirror() == checkout.parent / "shared" / "data"
