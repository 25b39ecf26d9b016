"""judgetune estimate: the PPI++ estimators (agreement with ppi_py, coverage over many seeds, never wider than
the labels alone, the power of the labels-needed rule), the command on real judges and its refusals, and
`pick --for estimate`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from judgetune import stats

# A fixed array and ppi_py 0.2.3's figures for it (computed once with ppi_py in its own environment: ppi_py needs
# numba, statsmodels and gdown, which judgetune does not install):
#   ppi_mean_ci(Y, Yhat, Yu, alpha=0.05)            -> (2.688504960402252, 3.6578010169716872)
#   ppi_mean_ci(Y, Yhat, Yu, alpha=0.1)             -> (2.766423541918043, 3.5798824354558962)
#   ppi_mean_pointestimate(Y, Yhat, Yu)             -> 3.1731529886869696
#   ppi_mean_pval(Y, Yhat, Yu, null=3.5)            -> 0.18623434129189842
#   ppi_mean_ci(Y, Yhat, Yu, alpha=0.05, lam=1)     -> (2.6979857073608557, 3.682014292639144)
Y = [3.0, 4.0, 2.0, 5.0, 1.0, 3.0, 4.0, 2.0, 3.0, 5.0, 4.0, 1.0]
YHAT = [2.8, 3.5, 2.6, 4.1, 1.9, 3.3, 3.6, 2.2, 2.5, 4.6, 3.9, 1.4]
YU = [3.1, 2.2, 4.4, 3.8, 1.7, 2.9, 3.3, 4.8, 2.4, 3.0, 1.2, 3.6, 2.7, 4.0, 3.4, 2.1, 3.9, 2.6, 4.2, 3.5]


def test_ppi_mean_agrees_with_ppi_py_on_a_fixed_array():
    est = stats.ppi_mean(Y, YHAT, YU, finite=False)
    assert est.value == pytest.approx(3.1731529886869696, abs=1e-12)
    assert (est.low, est.high) == pytest.approx((2.688504960402252, 3.6578010169716872), abs=1e-12)
    ten = stats.ppi_mean(Y, YHAT, YU, finite=False, alpha=0.1)
    assert (ten.low, ten.high) == pytest.approx((2.766423541918043, 3.5798824354558962), abs=1e-12)
    assert est.p_value(3.5) == pytest.approx(0.18623434129189842, abs=1e-12)
    plain = stats.ppi_mean(Y, YHAT, YU, finite=False, lam=1)
    assert (plain.low, plain.high) == pytest.approx((2.6979857073608557, 3.682014292639144), abs=1e-12)


def test_the_weight_on_a_compressed_judge_is_clipped_to_one_as_ppi_py_clips_it():
    # the judge's scores squeezed toward 3 (3 + 0.3 (x - 3), to 2 decimals): the unclipped weight would exceed 1;
    # ppi_py 0.2.3: ppi_mean_ci(Y, Yhat, Yu, alpha=0.05) -> (2.5045375085096966, 3.7261291581569704), point
    # 3.1153333333333335
    squeeze = [round(3 + 0.3 * (x - 3), 2) for x in YHAT], [round(3 + 0.3 * (x - 3), 2) for x in YU]
    est = stats.ppi_mean(Y, *squeeze, finite=False)
    assert est.lam == 1.0
    assert est.value == pytest.approx(3.1153333333333335, abs=1e-12)
    assert (est.low, est.high) == pytest.approx((2.5045375085096966, 3.7261291581569704), abs=1e-12)


def test_ppi_mean_agrees_with_ppi_py_live_when_installed():
    ppi_py = pytest.importorskip("ppi_py")
    y, f, u = np.asarray(Y), np.asarray(YHAT), np.asarray(YU)
    low, high = ppi_py.ppi_mean_ci(y, f, u, alpha=0.05)
    est = stats.ppi_mean(y, f, u, finite=False)
    assert (est.low, est.high) == pytest.approx((float(np.squeeze(low)), float(np.squeeze(high))), abs=1e-10)


def test_labels_mean_is_the_textbook_interval_and_its_finite_correction():
    y = np.asarray(Y)
    est = stats.labels_mean(y)
    se = y.std(ddof=1) / np.sqrt(len(y))  # s / sqrt(n), the t interval of a mean: t(0.975, 11) = 2.200985160082949
    assert est.value == pytest.approx(y.mean())
    assert (est.low, est.high) == pytest.approx((y.mean() - 2.200985160082949 * se, y.mean() + 2.200985160082949 * se))
    finite = stats.labels_mean(y, rows=48)  # a quarter of the rows labeled: variance times 1 - n/N = 0.75
    assert finite.se == pytest.approx(se * np.sqrt(0.75))
    assert stats.labels_mean(y, rows=len(y)).se == 0  # every row labeled: the mean over the rows is known


def _population(rng: np.random.Generator, size: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """Labels on 1-5 and a judge that sees them through noise and a bias (its own scale: 0.6 x + 1)."""
    truth = rng.integers(1, 6, size).astype(float)
    judge = 0.6 * truth + 1 + rng.normal(0, noise, size)
    return truth, judge


@pytest.mark.parametrize("n", [20, 60])
def test_finite_intervals_cover_the_all_labels_mean_over_many_seeds(n):
    rng = np.random.default_rng(11)
    truth, judge = _population(rng, 400, noise=0.7)
    target = truth.mean()
    hits = {"ppi++": 0, "labels": 0}
    draws, ratios = 600, []
    for _ in range(draws):
        labeled = np.zeros(len(truth), dtype=bool)
        labeled[rng.choice(len(truth), n, replace=False)] = True
        ppi = stats.ppi_mean(truth[labeled], judge[labeled], judge[~labeled])
        alone = stats.labels_mean(truth[labeled], rows=len(truth))
        hits["ppi++"] += ppi.low <= target <= ppi.high
        hits["labels"] += alone.low <= target <= alone.high
        ratios.append(ppi.width / alone.width)
    for method, hit in hits.items():
        assert 0.92 <= hit / draws <= 0.98, (method, hit / draws)
    assert max(ratios) < 1 and np.mean(ratios) < 0.75  # a judge that sees the labels narrows every interval


@pytest.mark.parametrize("n", [20, 50])
def test_a_useless_judge_costs_no_width_beyond_noise(n):
    rng = np.random.default_rng(2)
    truth = rng.integers(1, 6, 400).astype(float)
    judge = rng.normal(size=400)  # unrelated to the labels
    ratios, hits = [], 0
    for _ in range(600):
        labeled = np.zeros(400, dtype=bool)
        labeled[rng.choice(400, n, replace=False)] = True
        ppi = stats.ppi_mean(truth[labeled], judge[labeled], judge[~labeled])
        ratios.append(ppi.width / stats.labels_mean(truth[labeled], rows=400).width)
        hits += ppi.low <= truth.mean() <= ppi.high
    assert np.mean(ratios) < 1.03 and np.quantile(ratios, 0.99) < 1.1, (np.mean(ratios), max(ratios))  # 1.013, 1.07 at 20
    assert 0.92 <= hits / 600 <= 0.98


def test_ppi_gains_what_the_judge_explains():
    rng = np.random.default_rng(5)
    truth = rng.integers(1, 6, 5000).astype(float)
    judge = truth + rng.normal(0, 0.8, len(truth))  # on the labels' scale, as a calibrated judge is
    worth = stats.labels_worth(truth, judge)
    r2 = np.corrcoef(truth, judge)[0, 1] ** 2
    assert worth["labels_worth"] == pytest.approx(1 / (1 - r2), rel=0.02)  # Var(Y) / Var(Y - lam f)
    assert worth["plain"] < worth["labels_worth"]  # the score's noise: lam = 1 is not the best
    assert worth["lambda"] == pytest.approx(np.cov(truth, judge)[0, 1] / judge.var(ddof=1))
    useless = stats.labels_worth(truth, rng.normal(size=len(truth)))
    assert useless["labels_worth"] == pytest.approx(1.0, abs=0.01)


def _two_systems(rng: np.random.Generator, inputs: int) -> tuple[np.ndarray, ...]:
    hardness = rng.normal(0, 1, inputs)  # shared by both systems' answers to an input: pairing pays
    a = np.clip(np.round(3 + hardness + rng.normal(0, 0.7, inputs)), 1, 5)
    b = np.clip(np.round(3.3 + hardness + rng.normal(0, 0.7, inputs)), 1, 5)
    return a, b, a + rng.normal(0, 0.6, inputs), b + rng.normal(0, 0.6, inputs)


def test_paired_difference_covers_and_beats_unpaired():
    rng = np.random.default_rng(3)
    a, b, fa, fb = _two_systems(rng, 300)
    target = b.mean() - a.mean()
    hits, draws, paired_se, unpaired_se = 0, 400, [], []
    for _ in range(draws):
        lab = np.zeros(len(a), dtype=bool)
        lab[rng.choice(len(a), 40, replace=False)] = True
        est = stats.difference_paired(a[lab], b[lab], fa[lab], fb[lab], fa[~lab], fb[~lab])
        hits += est.low <= target <= est.high
        paired_se.append(est.se)
        one, two = (stats.ppi_mean(y[lab], f[lab], f[~lab]) for y, f in ((a, fa), (b, fb)))
        unpaired_se.append(stats.difference_unpaired(one, two).se)
    assert 0.92 <= hits / draws <= 0.98
    assert np.mean(paired_se) < 0.95 * np.mean(unpaired_se)  # the shared hardness cancels in a difference


def test_overlap_difference_covers_win_rates_under_one_random_sample():
    rng = np.random.default_rng(8)
    rows, systems = 600, 4
    first = rng.integers(0, systems, rows)
    second = (first + rng.integers(1, systems, rows)) % systems
    strength = np.array([0.0, 0.3, 0.6, 0.2])
    pref = np.clip(np.round(strength[second] - strength[first] + rng.normal(0, 1.2, rows)), -2, 2)
    score = pref + rng.normal(0, 1.0, rows)
    wins = {s: (np.where(second == s, 1, np.where(first == s, -1, 0))) for s in range(systems)}
    truth = {s: stats.win_values(pref, wins[s])[wins[s] != 0].mean() for s in range(systems)}
    hits, draws = 0, 400
    for _ in range(draws):
        lab = np.zeros(rows, dtype=bool)
        lab[rng.choice(rows, 120, replace=False)] = True
        args = []
        for s in (0, 2):
            side = wins[s]
            args += [stats.win_values(pref, side), stats.judged_wins(score, side, -2, 2), side != 0]
        _, _, diff = stats.overlap_difference(*args, lab)
        hits += diff.low <= truth[2] - truth[0] <= diff.high
    assert 0.92 <= hits / draws <= 0.98


def test_labels_needed_gives_about_80_percent_power():
    rng = np.random.default_rng(21)
    inputs = 4000
    a, b, fa, fb = _two_systems(rng, inputs)
    d, fd = b - a, fb - fa
    pilot = np.zeros(inputs, dtype=bool)
    pilot[rng.choice(inputs, 400, replace=False)] = True
    est = stats.ppi_mean(d[pilot], fd[pilot], fd[~pilot])
    true_diff = d.mean()
    n = stats.labels_needed(true_diff, [(est.residual_var, inputs)])
    assert 10 <= n <= 1000
    rejected, draws = 0, 400
    for _ in range(draws):
        lab = np.zeros(inputs, dtype=bool)
        lab[rng.choice(inputs, n, replace=False)] = True
        rejected += stats.ppi_mean(d[lab], fd[lab], fd[~lab]).p_value() < 0.05
    assert 0.72 <= rejected / draws <= 0.88
    assert stats.labels_needed(0.0, [(1.0, 100)]) is None
    assert stats.labels_needed(0.5, [(1.0, 100)]) <= 100  # labeling every row always settles a finite mean


# --- the command, on a real signal judge (word overlap with the reference, calibrated on labels) -------------------

SYSTEMS = {"good": 0.5, "fair": 1.6, "poor": 2.8}  # the mean number of word pairs each system's answers drop


def _system_rows(inputs: int = 60, seed: int = 0) -> list[dict]:
    """Three systems answering the same inputs: each answer keeps fewer of its input's reference words as its label
    falls (5: all ten kept); a system's quality is how many it tends to drop."""
    import random

    from _kits import NOISE, WORDS

    rng = random.Random(seed)
    rows = []
    for i in range(inputs):
        reference = rng.sample(WORDS, 10)
        for name, mean in SYSTEMS.items():
            drop = min(5, max(0, round(rng.gauss(mean, 1.0))))
            answer = list(reference)
            for j in rng.sample(range(10), 2 * drop):
                answer[j] = rng.choice(NOISE)
            rows.append({"id": f"q{i}-{name}", "group": f"q{i}", "answer": " ".join(answer),
                         "reference": " ".join(reference), "system": name, "label": 5 - drop})
    return rows


def _labeled_on(rows: list[dict], inputs: set[str]) -> list[dict]:
    """The rows with their labels kept only on ``inputs``."""
    return [r if r["group"] in inputs else {k: v for k, v in r.items() if k != "label"} for r in rows]


@pytest.fixture(scope="module")
def overlap_judge(tmp_path_factory) -> Path:
    """A frozen overlap judge: word overlap with the reference, its calibrator fitted on labeled rows of other
    inputs (seed 99), saved as judge.json (no LM)."""
    from judgetune.calibration import fit_calibrator
    from judgetune.config import JudgeConfig
    from judgetune.datasets import example_from_record
    from judgetune.judges import build_judge

    judge = build_judge("overlap", None)
    train = [example_from_record({k: v for k, v in r.items() if k != "system"}, where="train", default_id=r["id"],
                                 problems=[]) for r in _system_rows(40, seed=99)]
    raw = [v.score for v in judge.judge_all(train)]
    calibrator, _ = fit_calibrator(raw, [e.label for e in train], label_range=(0.0, 5.0), kinds=("isotonic",))
    path = tmp_path_factory.mktemp("overlap-judge") / "judge.json"
    JudgeConfig.from_judge(judge, lm=None, calibrator=calibrator, label_range=(0.0, 5.0)).save(path)
    return path


@pytest.fixture
def outputs(tmp_path: Path) -> tuple[Path, list[dict]]:
    """The three systems' 180 outputs, labels on 20 of the 60 inputs (every system's answer to them)."""
    import random

    from _kits import jsonl

    rows = _system_rows()
    labeled = set(random.Random(1).sample(sorted({r["group"] for r in rows}), 20))
    return jsonl(tmp_path / "outputs.jsonl", _labeled_on(rows, labeled)), rows


def test_estimate_scores_and_reports_every_system_and_pair(run_cli, overlap_judge, outputs, tmp_path):
    data, rows = outputs
    out = tmp_path / "estimate.json"
    code, stdout, stderr = run_cli(["estimate", "--config", str(overlap_judge), "--data", str(data), "--by", "system",
                                    "--out", str(out)])
    assert code == 0, stderr
    result = json.loads(out.read_text())
    assert [s["system"] for s in result["systems"]] == list(SYSTEMS)
    truth = {name: np.mean([r["label"] for r in rows if r["system"] == name]) for name in SYSTEMS}
    for s in result["systems"]:
        assert (s["rows"], s["labeled"]) == (60, 20)
        assert s["ppi_high"] - s["ppi_low"] < s["labels_high"] - s["labels_low"]  # the judge narrows it
        assert s["labels_worth"] > 1.2  # 20 labels: the scale's pseudo-labels (stats.PSEUDO) weigh on both intervals
        assert s["ppi_low"] <= truth[s["system"]] <= s["ppi_high"]
    pairs = {(p["a"], p["b"]): p for p in result["pairs"]}
    assert set(pairs) == {("good", "fair"), ("good", "poor"), ("fair", "poor")}
    poor = pairs[("good", "poor")]
    assert poor["pairing"] == "paired" and poor["high"] < 0 and poor["p_value"] < 0.001
    assert poor["labels_needed_per"] == "input" and poor["labels_needed"] <= 20
    assert "PPI++" in stdout and "poor - good" in stdout
    assert "assumed: the labeled rows of each system are a uniform random sample" in stderr


def test_estimate_from_a_score_file_gives_the_same_figures_without_scoring(run_cli, overlap_judge, outputs,
                                                                           tmp_path):
    data, _ = outputs
    scored = tmp_path / "scored.jsonl"  # --label: a mapped file keeps its other columns (system) under meta
    assert run_cli(["score", "--config", str(overlap_judge), "--data", str(data), "--label", "label", "--out",
                    str(scored)])[0] == 0
    direct = run_cli(["estimate", "--config", str(overlap_judge), "--data", str(data), "--by", "system", "--json"])
    from_file = run_cli(["estimate", "--config", str(overlap_judge), "--data", str(data), "--by", "system",
                         "--scores", str(scored), "--json"])
    assert direct[0] == from_file[0] == 0
    assert json.loads(direct[1])["systems"] == json.loads(from_file[1])["systems"]
    assert json.loads(direct[1])["pairs"] == json.loads(from_file[1])["pairs"]


def test_the_python_api_returns_a_dataframe(overlap_judge, outputs):
    pytest.importorskip("pandas")
    import judgetune

    data, rows = outputs
    frame = judgetune.estimate(str(overlap_judge), [dict(r) for r in _labeled_on(rows, {"q1", "q2", "q3", "q4"})],
                               by="system")
    assert list(frame["what"]) == ["system"] * 3 + ["difference"] * 3
    assert list(frame["name"])[3:] == ["fair - good", "poor - good", "poor - fair"]
    assert frame.loc[0, "labeled"] == 4 and frame.attrs["notes"]


def _refused(run_cli, argv: list[str]) -> str:
    code, _, stderr = run_cli(argv)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("judgetune: error: "), stderr
    return lines[0]


def test_bad_input_is_refused_with_one_line_each(run_cli, overlap_judge, outputs, tmp_path):
    from _kits import jsonl

    data, rows = outputs
    base = ["estimate", "--config", str(overlap_judge), "--by", "system"]
    one = jsonl(tmp_path / "one.jsonl", [r for r in rows if r["system"] == "good"])
    assert "holds one system ('good')" in _refused(run_cli, [*base, "--data", str(one)])
    unlabeled = jsonl(tmp_path / "unlabeled.jsonl", _labeled_on(rows, set()))
    assert "no row carries a human label" in _refused(run_cli, [*base, "--data", str(unlabeled)])
    off = jsonl(tmp_path / "off.jsonl", [{**r, "label": 7} if r["id"] == "q3-fair" else r for r in rows])
    assert "off.jsonl:" in (line := _refused(run_cli, [*base, "--data", str(off)]))
    assert "expected a label on the judge's scale 0-5" in line and "found 7" in line
    assert "scores on the scale 0-5" in _refused(run_cli, [*base, "--data", str(data), "--scale", "1-10"])
    nameless = jsonl(tmp_path / "nameless.jsonl", [{k: v for k, v in r.items() if k != "system"} for r in rows[:1]]
                     + rows[1:])  # a row without its system: its line, never dropped (each bad row a line)
    assert "nameless.jsonl:1: system: expected the system's name (--by system), found nothing" in _refused(
        run_cli, [*base, "--data", str(nameless)])


def test_pairwise_rows_need_a_judge_of_preferences(run_cli, overlap_judge, tmp_path):
    from _kits import jsonl

    pairs = jsonl(tmp_path / "pairs.jsonl", [{"id": str(i), "answer": "a b", "answer_b": "a c", "reference": "a b",
                                              "preference": 1, "model_a": "x", "model_b": "y"} for i in range(4)])
    line = _refused(run_cli, ["estimate", "--config", str(overlap_judge), "--data", str(pairs), "--by",
                              "model_a,model_b"])
    assert "pairwise preferences" in line and "scores one answer on the scale 0-5" in line


def test_a_system_without_labels_is_reported_unvalidated_not_dropped(run_cli, overlap_judge, outputs, tmp_path):
    from _kits import jsonl

    _, rows = outputs
    labeled = {f"q{i}" for i in range(10)}
    data = jsonl(tmp_path / "partly.jsonl", [{k: v for k, v in r.items() if k != "label"} if r["system"] == "poor"
                                             else r for r in _labeled_on(rows, labeled)])
    code, stdout, stderr = run_cli(["estimate", "--config", str(overlap_judge), "--data", str(data), "--by", "system",
                                    "--json"])
    assert code == 0, stderr
    result = json.loads(stdout)
    poor = next(s for s in result["systems"] if s["system"] == "poor")
    assert poor["judge_note"].startswith("unvalidated") and poor["ppi"] is None and poor["judge"] < 3
    assert [p["note"] for p in result["pairs"] if "poor" in (p["a"], p["b"])] == [
        "unvalidated: a system with fewer than 2 labeled rows"] * 2
    assert "system 'poor' has 0 labeled row(s): its judge-only figure" in stderr


def test_pick_for_estimate_draws_a_seeded_uniform_sample_the_estimate_recognises(run_cli, overlap_judge, tmp_path):
    from _kits import jsonl

    rows = _system_rows()
    data = jsonl(tmp_path / "outputs.jsonl", _labeled_on(rows, set()))
    picked = tmp_path / "picked.jsonl"
    code, stdout, _ = run_cli(["pick", "--for", "estimate", "--data", str(data), "--by", "system", "--n", "15",
                               "--seed", "3", "--out", str(picked)])
    assert code == 0 and "15 inputs every system answered" in stdout
    chosen = [json.loads(line) for line in picked.read_text().splitlines()]
    assert len(chosen) == 45 and len({r["group"] for r in chosen}) == 15  # each input's answer of every system
    assert {r["meta"]["sampling_probability"] for r in chosen} == {0.25}
    again = tmp_path / "again.jsonl"
    run_cli(["pick", "--for", "estimate", "--data", str(data), "--by", "system", "--n", "15", "--seed", "3",
             "--out", str(again)])
    assert again.read_text() == picked.read_text()
    truth = {r["id"]: r["label"] for r in rows}
    labeled = jsonl(tmp_path / "labeled.jsonl", [{**r, "label": truth[r["id"]]} for r in chosen])
    code, _, stderr = run_cli(["estimate", "--config", str(overlap_judge), "--data", str(data), "--by", "system",
                               "--labeled", str(labeled), "--json"])
    assert code == 0 and "as their recorded sampling probabilities say" in stderr and "assumed" not in stderr


def test_labels_drawn_with_unequal_probabilities_are_refused(run_cli, overlap_judge, tmp_path):
    from _kits import jsonl

    rows = _system_rows()
    weighted = [{**r, "meta": {"sampling_probability": 0.5 if r["group"] in ("q1", "q2") else 0.25}}
                if r["group"] in ("q1", "q2", "q3", "q4") else {k: v for k, v in r.items() if k != "label"}
                for r in rows]
    data = jsonl(tmp_path / "weighted.jsonl", weighted)
    line = _refused(run_cli, ["estimate", "--config", str(overlap_judge), "--data", str(data), "--by", "system"])
    assert "unequal probabilities (0.25 to 0.5)" in line


def test_scores_of_another_judge_are_refused(run_cli, overlap_judge, outputs, tmp_path):
    from judgetune.config import JudgeConfig
    from judgetune.scoring._output import done_marker

    data, _ = outputs
    scored = tmp_path / "scored.jsonl"
    assert run_cli(["score", "--config", str(overlap_judge), "--data", str(data), "--label", "label", "--out",
                    str(scored)])[0] == 0
    assert done_marker(scored).exists()  # the record estimate reads (its own spelling of the same path)
    other = JudgeConfig.load(overlap_judge).model_copy(update={"seed": 7}).save(tmp_path / "o.json")
    line = _refused(run_cli, ["estimate", "--config", str(other), "--data", str(data), "--by", "system", "--scores",
                              str(scored)])
    assert "written by another judge" in line


def test_a_catalog_source_on_another_scale_is_refused(run_cli, overlap_judge, data_root):
    line = _refused(run_cli, ["estimate", "--config", str(overlap_judge), "--data", "linkage-webglm", "--by", "model"])
    assert "linkage-webglm's scale 1-3: the judge" in line and "scores on the scale 0-5" in line


def test_labels_on_a_narrow_part_of_the_judge_scale_are_said(run_cli, overlap_judge, tmp_path):
    from _kits import jsonl

    rows = [r for r in _system_rows() if r["label"] >= 4]  # grades 4-5 only, on the judge's 0-5
    data = jsonl(tmp_path / "narrow.jsonl", _labeled_on(rows, {r["group"] for r in rows[::3]}))
    code, _, stderr = run_cli(["estimate", "--config", str(overlap_judge), "--data", str(data), "--by", "system"])
    assert code == 0 and "the labels span 4-5, less than half the judge's scale 0-5" in stderr


def test_the_arrow_reader_and_the_row_reader_agree(tmp_path):
    pytest.importorskip("pyarrow")
    from _kits import jsonl

    from judgetune.estimating import read_data, read_observations
    from judgetune.estimating._arrow import ArrowIds

    rows = _labeled_on(_system_rows(12), {"q1", "q5"})
    regular = jsonl(tmp_path / "regular.jsonl", [{**r, "meta": {"sampling_probability": 0.5}} for r in rows])
    fast = read_observations(regular, ["system"])
    assert isinstance(fast.ids, ArrowIds)  # the whole file in one Arrow read
    slow = read_data(regular, ["system"])  # row by row
    assert list(fast.ids) == slow.ids and fast.names == slow.names
    for name in ("lines", "system", "inputs", "labels", "probabilities"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name))
    odd = tmp_path / "odd.jsonl"  # a blank line and an integer id: the row reader's, with its lines
    odd.write_text(regular.read_text().replace("\n", "\n\n", 1).replace('"id": "q0-fair"', '"id": 7'))
    read = read_observations(odd, ["system"])
    assert not isinstance(read.ids, ArrowIds) and read.ids[1] == "7" and list(read.lines[:3]) == [1, 3, 4]


def _comparisons(rows: list[dict]) -> list[dict]:
    """Every pair of systems on every input as a pairwise row: preference = label_b - label_a, cut to -2..2."""
    by_input: dict[str, list[dict]] = {}
    for r in rows:
        by_input.setdefault(r["group"], []).append(r)
    out = []
    for group, answers in by_input.items():
        for i, a in enumerate(answers):
            for b in answers[i + 1:]:
                out.append({"id": f"{group}-{a['system']}-{b['system']}", "group": group, "answer": a["answer"],
                            "answer_b": b["answer"], "reference": a["reference"], "model_a": a["system"],
                            "model_b": b["system"], "preference": max(-2, min(2, b["label"] - a["label"]))})
    return out


def test_win_rates_from_pairwise_comparisons(run_cli, tmp_path):
    from _kits import jsonl

    from judgetune.calibration import fit_calibrator
    from judgetune.config import JudgeConfig
    from judgetune.datasets import example_from_record
    from judgetune.judges import build_judge

    judge = build_judge("overlap", None)  # on a pair: answer_b's overlap minus answer's
    train = [example_from_record({k: v for k, v in r.items() if k not in ("model_a", "model_b")}, where="train",
                                 default_id=r["id"], problems=[]) for r in _comparisons(_system_rows(30, seed=7))]
    raw = [v.score for v in judge.judge_all(train)]
    calibrator, _ = fit_calibrator(raw, [e.preference for e in train], label_range=(-2.0, 2.0), kinds=("isotonic",))
    config = JudgeConfig.from_judge(judge, lm=None, calibrator=calibrator, label_range=(-2.0, 2.0)).save(
        tmp_path / "judge.json")
    pairs = _comparisons(_system_rows())
    data = jsonl(tmp_path / "pairs.jsonl", [{k: v for k, v in p.items() if k != "preference"} for p in pairs])
    picked = tmp_path / "picked.jsonl"
    code, stdout, _ = run_cli(["pick", "--for", "estimate", "--data", str(data), "--by", "model_a,model_b", "--n",
                               "45", "--out", str(picked)])
    assert code == 0 and "45 comparisons" in stdout
    truth = {p["id"]: p["preference"] for p in pairs}
    labeled = jsonl(tmp_path / "labeled.jsonl", [{**json.loads(line), "preference": truth[json.loads(line)["id"]]}
                                                 for line in picked.read_text().splitlines()])
    code, stdout, stderr = run_cli(["estimate", "--config", str(config), "--data", str(data), "--by",
                                    "model_a,model_b", "--labeled", str(labeled), "--json"])
    assert code == 0, stderr
    result = json.loads(stdout)
    assert result["measure"] == "win rate"
    rates = {s["system"]: s for s in result["systems"]}
    assert rates["good"]["ppi"] > rates["fair"]["ppi"] > rates["poor"]["ppi"]
    assert all(s["rows"] == 120 and 0 <= s["ppi_low"] <= s["ppi_high"] <= 1 for s in rates.values())
    poor = next(p for p in result["pairs"] if {p["a"], p["b"]} == {"good", "poor"})
    assert poor["pairing"] == "comparisons" and poor["labels_needed_per"] == "comparison" and poor["p_value"] < 0.01


# --- bounded labels: few per system, piled at one end ------------------------------------------------------------

def test_an_all_equal_sample_gets_a_non_zero_interval_on_the_scale():
    est = stats.labels_mean([5.0] * 10, rows=100, scale=(1.0, 5.0))
    assert est.value == 5.0 and est.high == 5.0 and 0 < est.width < 1.5  # not [5, 5]
    judged = stats.ppi_mean([5.0] * 10, [4.6] * 10, [4.0] * 90, scale=(1.0, 5.0))
    assert judged.low < 5.0 and judged.high <= 5.0


def test_two_labels_per_system_stay_on_the_scale_and_identical_labels_differ_by_nothing():
    rng = np.random.default_rng(4)
    judge = np.clip(rng.normal(3, 1.2, 200), 0, 5)  # a judge that knows nothing of these labels
    for seed in range(200):
        pick = np.random.default_rng(seed).choice(200, 2, replace=False)
        labels = np.asarray([3.0, 5.0]) if seed % 2 else np.asarray([4.0, 4.0])
        est = stats.ppi_mean(labels, judge[pick], np.delete(judge, pick), scale=(0.0, 5.0))
        assert 0.0 <= est.low <= est.value <= est.high <= 5.0
        assert est.lam == 0.0  # below MIN_JUDGED labels the estimate is the labels' own
    same = stats.difference_paired([4.0, 5.0], [4.0, 5.0], [1.0, 4.0], [4.9, 0.2], [3.0] * 20, [2.0] * 20,
                                   scale=(0.0, 5.0))
    assert same.low < 0 < same.high and same.p_value() > 0.5


def _ceiling_population(rng: np.random.Generator, systems: int, rows: int) -> tuple[np.ndarray, ...]:
    """Systems whose 1-5 labels pile at 5 (70-90%), and a judge on the labels' scale that sees them through noise."""
    system = np.repeat(np.arange(systems), rows)
    top = 0.7 + 0.2 * rng.random(systems)
    labels = np.where(rng.random(len(system)) < top[system], 5.0, rng.integers(1, 5, len(system)).astype(float))
    judge = np.clip(labels + rng.normal(0, 0.9, len(labels)), 1, 5)
    return system, labels, judge


@pytest.mark.parametrize("n", [5, 10])
def test_labels_piled_at_the_top_are_covered_at_few_labels(n):
    """The t interval covers about 80% here at 5 labels (samples of all 5s get zero width); the bounded one
    holds its level."""
    rng = np.random.default_rng(8)
    system, labels, judge = _ceiling_population(rng, 8, 100)
    hits = {"labels": [], "ppi++": []}
    for _ in range(150):
        for k in range(8):
            rows = np.flatnonzero(system == k)
            pick = rng.choice(rows, n, replace=False)
            rest = np.setdiff1d(rows, pick)
            target = labels[rows].mean()
            for name, est in (("labels", stats.labels_mean(labels[pick], rows=100, scale=(1.0, 5.0))),
                              ("ppi++", stats.ppi_mean(labels[pick], judge[pick], judge[rest], scale=(1.0, 5.0)))):
                hits[name].append(est.low <= target <= est.high)
    for name, hit in hits.items():
        assert 0.93 <= np.mean(hit) <= 0.99, (name, np.mean(hit))


def test_a_judge_cross_fitted_on_every_systems_labels_holds_and_is_worth_labels():
    from judgetune.estimating import Observations, estimate_observations
    from judgetune.estimating._cross import cross_observations

    rng = np.random.default_rng(12)
    system, labels, judge = _ceiling_population(rng, 8, 100)
    raw = 2 * judge + rng.normal(0, 0.3, len(judge))  # the frozen judge on its own scale: the fit maps it
    truth = [labels[system == k].mean() for k in range(8)]
    hits, worth = [], []
    for draw in range(60):
        keep = np.zeros(len(labels), dtype=bool)
        for k in range(8):
            keep[rng.choice(np.flatnonzero(system == k), 10, replace=False)] = True
        obs = Observations("t", [str(i) for i in range(len(labels))], np.arange(len(labels)), [str(k) for k in range(8)],
                           system, None, np.full(len(labels), -1), np.where(keep, labels, np.nan),
                           np.full(len(labels), np.nan), raw)
        crossed = estimate_observations(cross_observations(obs, raw[:, None], (1.0, 5.0), seed=draw), (1.0, 5.0),
                                        lam=1.0, method="cross")
        for record, target in zip(crossed.systems, truth):
            hits.append(record["ppi_low"] <= target <= record["ppi_high"])
            worth.append(record["labels_worth"])
    assert 0.92 <= np.mean(hits) <= 0.99, np.mean(hits)
    assert np.mean(worth) > 1.2, np.mean(worth)


def test_cross_fitting_never_predicts_a_label_from_a_model_that_saw_it():
    from judgetune.estimating._cross import cross_fit

    rng = np.random.default_rng(1)
    labels = rng.integers(1, 6, 300).astype(float)
    identity = np.eye(300)  # one feature per row: a model that saw a row's label could learn it exactly
    labeled = np.where(rng.random(300) < 0.5, labels, np.nan)
    predicted = cross_fit(labeled, identity, np.full(300, -1), (1.0, 5.0))
    seen = ~np.isnan(labeled)
    # out of fold a row's own feature was never trained on: its prediction is about the other folds' mean
    assert np.corrcoef(predicted[seen], labels[seen])[0, 1] < 0.2


def test_estimate_fit_cross_fits_a_judge_on_the_same_labels(run_cli, overlap_judge, outputs, tmp_path):
    data, rows = outputs
    truth = {name: np.mean([r["label"] for r in rows if r["system"] == name]) for name in SYSTEMS}
    for fit in ("score", "signals"):
        out = tmp_path / f"estimate-{fit}.json"
        code, stdout, stderr = run_cli(["estimate", "--config", str(overlap_judge), "--data", str(data), "--by",
                                        "system", "--fit", fit, "--out", str(out)])
        assert code == 0, stderr
        result = json.loads(out.read_text())
        assert result["method"] == "cross" and "cross (fitted)" in stdout and "cross: a judge fitted on the 60" in stderr
        for s in result["systems"]:
            assert 0.0 <= s["ppi_low"] <= truth[s["system"]] <= s["ppi_high"] <= 5.0
            assert s["labels_worth"] > 1.0  # a judge fitted on 60 labels, each predicted out of fold


def test_estimate_fit_with_too_few_labels_is_refused_in_one_line(run_cli, overlap_judge, tmp_path, monkeypatch):
    from _kits import jsonl

    from judgetune.estimating import _run

    def scored(*args, **kwargs):
        raise AssertionError("scored before the refusal")

    monkeypatch.setattr(_run, "score_observations", scored)  # refused before the judge scores a row
    rows = _labeled_on(_system_rows(20), {"q0", "q1"})  # 6 labeled rows in all
    data = jsonl(tmp_path / "few.jsonl", rows)
    code, _, stderr = run_cli(["estimate", "--config", str(overlap_judge), "--data", str(data), "--by", "system",
                               "--fit", "score"])
    assert code == 2 and "--fit: 6 labeled row(s)" in stderr and "Traceback" not in stderr


def test_the_coverage_table_in_the_docs_is_the_result_files():
    """docs/estimate.md's coverage table is what benchmarks/estimate.py --table renders from the committed results."""
    import sys

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        import estimate as bench
    finally:
        sys.path.remove(str(root / "benchmarks"))
    names = ("xsumfaith", "summeval", "stsb", "webglm", "ragchecker")
    rendered = bench.table([root / "benchmarks" / "results" / f"estimate-{name}.json" for name in names])
    page = (root / "docs" / "estimate.md").read_text(encoding="utf-8")
    assert rendered in page


def test_a_judge_constant_up_to_rounding_raises_no_balance_warning():
    from judgetune.estimating import Observations, estimate_observations

    rng = np.random.default_rng(0)
    n = 60
    scores = np.full(n, 4.62) + rng.normal(0, 1e-15, n)  # one score, written with float rounding noise
    labels = np.where(np.arange(n) % 2 == 0, rng.integers(3, 6, n).astype(float), np.nan)
    obs = Observations("t", [str(i) for i in range(n)], np.arange(n), ["a", "b"], np.arange(n) % 3 % 2, None,
                       np.full(n, -1), labels, np.full(n, np.nan), scores)
    notes = estimate_observations(obs, (0.0, 5.0)).notes
    assert not any("do not look like a uniform random sample" in line for line in notes), notes
