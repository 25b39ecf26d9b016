"""The gate as ``tune`` runs it (``judgetune.tuning._selection.choose``), on planted score matrices: candidates are
the strongest trials on the search items, as ``candidate_trials`` takes them, and the panel's members are those
candidates. Shuffled labels (no candidate better) must ship at most about 5% of the time for every rule a user can
choose; a truly better candidate must ship; and every non-test row of a file reaches the gate."""

from __future__ import annotations

import csv

import numpy as np
import optuna
import pytest

from judgetune.stats import figures
from judgetune.tuning import RunSpec
from judgetune.tuning._selection import Candidate, SelectionItems, candidate_trials, choose, with_rescore
from judgetune.tuning._space import PANEL
from judgetune.tuning._splits import prepare_splits

N_SEARCH, N_CONFIRMING = 40, 60


def _linear_fit(raw, gold, **_):
    """A stand-in for ``cross_fitted`` (a least-squares line): the nested gate under the Spearman rule reads raw
    scores only, so the calibrator's form cannot change what ships; it keeps 120 draws fast."""
    slope, intercept = np.polyfit(raw, gold, 1)
    return slope * np.asarray(raw) + intercept, "linear", None


def _null_draw(rng: np.random.Generator, spec: RunSpec) -> bool:
    """One run on shuffled labels: 12 trials of pure noise, the 4 best on the search items become candidates beside
    the default (so they are inflated there), then ``choose`` decides. True when anything but the default ships."""
    n = N_SEARCH + N_CONFIRMING
    gold = rng.integers(0, 6, n).astype(float)
    trials = rng.normal(size=(12, n))
    on_search = figures(trials[:, :N_SEARCH], gold[:N_SEARCH])
    top = np.argsort(-on_search)[:4]
    default = rng.normal(size=n)
    raws = [default, *trials[top]]
    candidates = [Candidate(None, {"c": -1}), *(Candidate(int(j), {"c": int(j)}, (1.0, float(on_search[j])))
                                                 for j in top)]
    items = SelectionItems(gold, None, N_SEARCH, (0.0, 5.0))
    chosen, _ = choose(spec, candidates, raws, items)
    return chosen != 0


@pytest.mark.parametrize("panel", [True, False])
def test_shuffled_labels_ship_at_most_about_five_percent_with_members_chosen_on_the_search_items(panel, monkeypatch):
    monkeypatch.setattr("judgetune.tuning._figures.cross_fitted", _linear_fit)
    spec = RunSpec(name="null", judge="embedding", data="x.csv", panel=panel)
    rng = np.random.default_rng(7)
    draws = 120
    ships = sum(_null_draw(rng, spec) for _ in range(draws))
    # a valid 5% test ships in 6 of 120 draws on average; testing on the search items too shipped about 13%
    # (16 of 120); 12 is above the 95th percentile of Binomial(120, 0.05)
    assert ships <= 12, f"{ships} of {draws} null draws shipped"


def test_a_truly_better_candidate_ships_and_the_panel_is_made_of_candidates_not_rejected():
    rng = np.random.default_rng(3)
    n = N_SEARCH + N_CONFIRMING
    gold = rng.normal(size=n)
    raws = [0.3 * gold + rng.normal(size=n), 2.0 * gold + rng.normal(size=n), rng.normal(size=n)]
    candidates = [Candidate(None, {"c": 0}), Candidate(1, {"c": 1}, (0.5, 0.8)), Candidate(2, {"c": 2}, (0.9, 0.0))]
    items = SelectionItems(gold, None, N_SEARCH, (-4.0, 4.0))
    spec = RunSpec(name="planted", judge="embedding", data="x.csv", panel=True)
    chosen, record = choose(spec, candidates, raws, items, reject=lambda row: "no" if row["params"] == {"c": 2} else None)
    assert record["rows"][2]["rejected"] == "no"
    panel_rows = [r for r in record["rows"] if r.get("panel")]
    assert panel_rows and {"c": 2} not in panel_rows[0]["params"][PANEL]["members"]
    assert chosen in (1, len(record["rows"]) - 1) and record["gate_result"]["passed"]
    assert record["confirming_items"] == N_CONFIRMING


def _numbered_rows(path, n: int):
    """A CSV of ``n`` rows (id, answer, reference, label 0-5): the splits are what is tested, not the texts."""
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["id", "answer", "reference", "label"])
        for i in range(n):
            out.writerow([f"r{i}", f"answer {i}", f"reference {i}", i % 6])
    return path


def test_every_kept_non_test_row_of_a_300_row_file_reaches_the_gate(tmp_path):
    path = _numbered_rows(tmp_path / "rows.csv", 300)
    splits = prepare_splits(RunSpec(name="rows", judge="embedding", data=str(path)))
    non_test = len(splits.train) + len(splits.dev)
    assert len(splits.selection) == non_test == 240
    assert {e.id for e in splits.confirming_pool} == {e.id for e in splits.demo_pool}
    bounded = prepare_splits(RunSpec(name="rows", judge="embedding", data=str(path), gate_items=150))
    assert len(bounded.selection) == 150 and len(bounded.search) == 40 and len(bounded.dev) == 60


def _draw_300(rng: np.random.Generator, spec: RunSpec, lift: float, early_stop: bool) -> tuple[bool, dict]:
    """A 300-row file's selection (40 search, 200 confirming): 12 trials, the 4 best on the search items the
    candidates; with ``lift`` > 0 the first trial sees the labels that much more clearly than the default."""
    n = N_SEARCH + 200
    gold = rng.normal(size=n)
    default = 0.5 * gold + rng.normal(size=n)
    trials = 0.5 * gold + rng.normal(size=(12, n))
    trials[0] = (0.5 + lift) * gold + rng.normal(size=n)
    on_search = figures(trials[:, :N_SEARCH], gold[:N_SEARCH])
    top = np.argsort(-on_search)[:4]
    candidates = [Candidate(None, {"c": -1}), *(Candidate(int(j), {"c": int(j)}, (1.0, float(on_search[j])))
                                                 for j in top)]
    items = SelectionItems(gold, None, N_SEARCH, (-4.0, 4.0))
    chosen, record = choose(spec, candidates, [default, *trials[top]], items, early_stop=early_stop, calibrate=False)
    return chosen != 0, record


def test_stopping_losers_early_ships_no_more_on_the_null_and_counts_the_judgments_saved():
    """The same null draws (every trial as good as the default) with and without early stopping: stopping never
    ships, so it ships no more often, and the judgments it saved are counted in ``racing``."""
    spec = RunSpec(name="null", judge="embedding", data="x.csv")
    draws, ships, saved, every = 60, {True: 0, False: 0}, 0, 0
    for early in (True, False):
        rng = np.random.default_rng(11)
        for _ in range(draws):
            shipped, record = _draw_300(rng, spec, 0.0, early)
            ships[early] += shipped
            if early:
                saved += record["racing"]["saved"]
                every += record["racing"]["every_judgment"]
                assert record["racing"]["judgments"] + record["racing"]["saved"] == 5 * 240
    assert ships[True] <= max(ships[False], 6), ships  # 6: above the 95th percentile of Binomial(60, 0.05)
    assert saved / every > 0.4, f"saved {saved} of {every} judgments"


def test_a_truly_better_candidate_still_ships_when_losers_stop_early():
    spec = RunSpec(name="planted", judge="embedding", data="x.csv")
    rng = np.random.default_rng(5)
    outcomes = [_draw_300(rng, spec, 0.6, True) for _ in range(10)]
    assert sum(shipped for shipped, _ in outcomes) >= 7
    assert all(r["racing"]["confirming_judgments"] < 5 * 200 for _, r in outcomes)


def test_more_confirming_rows_buy_more_challengers_and_the_screen_lets_a_third_of_them_on():
    """``rescore`` left out: one challenger per 60 confirming rows (at least 4, at most every trial but one); the
    screen judges a quarter of the confirming rows and lets the best third of the challengers ahead go on."""
    spec = RunSpec(name="planted", judge="embedding", data="x.csv")
    assert [spec.rescore_for(n) for n in (200, 240, 600, 760, 2000)] == [4, 4, 10, 11, 11]
    assert RunSpec(name="planted", judge="embedding", data="x.csv", rescore=2).rescore_for(2000) == 2
    rng = np.random.default_rng(2)
    n = N_SEARCH + 800
    gold = rng.normal(size=n)
    raws = [0.2 * gold + rng.normal(size=n), *(gold + rng.normal(size=(11, n)))]  # every challenger far ahead
    candidates = [Candidate(None, {"c": -1}), *(Candidate(j, {"c": j}, (1.0, 0.5)) for j in range(11))]
    chosen, record = choose(spec, candidates, raws, SelectionItems(gold, None, N_SEARCH, (-4.0, 4.0)), calibrate=False)
    assert record["racing"]["screened_items"] >= 200 and len(record["racing"]["live"]) == 4
    assert chosen in record["racing"]["live"] and record["gate_result"]["passed"]


def test_no_screen_judges_every_challenger_on_every_confirming_row():
    """``tune --no-screen`` (``RunSpec.screen``): the nested gate screens no row and no challenger stops at a
    screen; the same draw under the default rule screens a quarter of the rows and lets four of eleven on."""
    from judgetune.cli import build_parser
    from judgetune.cli._tuning import _run_spec

    args = build_parser().parse_args(["tune", "--judge", "embedding", "--data", "x.csv", "--no-screen"])
    spec = _run_spec(args)
    assert spec.screen is False and _run_spec(build_parser().parse_args(["tune", "--judge", "embedding", "--data",
                                                                         "x.csv"])).screen is True
    rng = np.random.default_rng(2)
    n = N_SEARCH + 800
    gold = rng.normal(size=n)
    raws = [gold + rng.normal(size=n), *(gold + rng.normal(size=(11, n)))]  # as good as the default: none stops
    candidates = [Candidate(None, {"c": -1}), *(Candidate(j, {"c": j}, (1.0, 0.5)) for j in range(11))]
    items = SelectionItems(gold, None, N_SEARCH, (-4.0, 4.0))
    _, screened = choose(RunSpec(name="p", judge="embedding", data="x.csv"), candidates, raws, items, calibrate=False)
    _, every = choose(spec, candidates, raws, items, calibrate=False)
    assert screened["racing"]["screened_items"] >= 200 and len(screened["racing"]["live"]) <= 4
    assert every["racing"]["screened_items"] == 0 and every["racing"]["judgments"] > screened["racing"]["judgments"]
    assert every["racing"]["confirming_by_candidate"] == [800] * 12 and every["racing"]["live"] == list(range(1, 12))


def test_the_rescore_is_resolved_for_the_rows_that_confirm_and_an_unresolved_one_is_refused(tmp_path):
    """``with_rescore``: the gate's confirming rows (pool and dev) decide the challengers, dev alone with
    ``--gate off``; ``candidate_trials`` refuses a spec whose rescore was never resolved."""
    path = _numbered_rows(tmp_path / "rows.csv", 1000)
    spec = RunSpec(name="rows", judge="embedding", data=str(path))
    splits = prepare_splits(spec)
    confirming = len(splits.confirming_pool) + len(splits.dev)
    assert with_rescore(spec, splits).rescore == spec.rescore_for(confirming) == 11
    assert with_rescore(spec, splits, dev_only=True).rescore == spec.rescore_for(len(splits.dev)) == 4
    with pytest.raises(ValueError, match="rescore resolved"):
        candidate_trials(optuna.create_study(directions=["minimize", "maximize"]), spec)


def test_a_challenger_without_an_lm_that_leads_the_screen_stops_the_lm_challengers_behind_it():
    """Four LM trials a little ahead of the default and another family's default (no LM) far ahead: after the screen
    only the free one goes on, so the LM candidates cost the default's rows and the screen's, and it ships; with the
    family left out, one trial goes on as before."""
    from judgetune.tuning._space import FAMILY

    rng = np.random.default_rng(5)
    n = N_SEARCH + 200
    gold = rng.normal(size=n)
    default = 0.3 * gold + rng.normal(size=n)
    trials = [0.4 * gold + rng.normal(size=n) for _ in range(4)]
    family = 2.0 * gold + rng.normal(size=n)
    candidates = [Candidate(None, {"c": -1}), *(Candidate(j, {"c": j}, (1.0, 0.5)) for j in range(4)),
                  Candidate(None, {FAMILY: {"judge": "embedding", "params": {"model": "minilm"}}})]
    spec = RunSpec(name="free", judge="likelihood", data="x.csv")
    items = SelectionItems(gold, None, N_SEARCH, (-4.0, 4.0))
    chosen, record = choose(spec, candidates, [default, *trials, family], items, calibrate=False)
    racing = record["racing"]
    assert racing["live"] == [5] and chosen == 5 and record["gate_result"]["passed"]
    screened = racing["screened_items"]
    assert racing["confirming_by_candidate"][1:5] == [screened] * 4  # the LM trials: the screen's rows only
    assert racing["confirming_by_candidate"][0] == 200 == racing["confirming_by_candidate"][5]
    chosen, record = choose(spec, candidates[:5], [default, *trials], items, calibrate=False)
    assert len(record["racing"]["live"]) == 1 or record["racing"]["stopped"]
