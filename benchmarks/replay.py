"""The gate as users run it, replayed on a saved score matrix with the product's own code and no LM time.

Each draw takes ``N`` rows of the matrix (whole questions, seeded) as a user's labeled file and keeps the rest
of the matrix as new data. The file goes through ``judgetune.tuning.prepare_splits`` exactly as ``judgetune
tune`` reads a CSV (train / dev / test, the search items, the demo pool, ``--gate-items``). The trials are
``--trials`` of the matrix's non-default columns (seeded, as a sampler's draws), each given its search
figures by the objective ``tune`` uses (``objectives`` on the search items); ``candidate_trials`` takes the
strongest ``--rescore`` of them, and ``choose`` (the selection and gate of ``tune``) decides on their
columns over the selection items. The shipped column minus the default column on the new data is the
gain (raw Spearman, per question where there are questions: tune's ``metrics.gain.spearman_raw``; its
``metrics.gain.spearman`` is of calibrated scores); "worse" is a draw whose gain's 95% paired
interval lies wholly below 0. The gain on the whole matrix is the shipped column's figure over every item (the
population the draws come from) minus the default's: the new data is what a draw left, and on a matrix not much
larger than the file a column's luck on the file is paid back on the rest, which biases the gain on the new data
downward for any choice made from the file (``gain_on``). The same draw with the file's labels shuffled (trials,
candidates and gate all re-run on them) gives the null ship rate. Each row also says what choosing cost: the
judgments made on the confirming items (the gate stops losers early) beside the search's (trials x search items)
and what judging every candidate on every confirming item would cost.

    python benchmarks/replay.py benchmarks/results/matrix-smollm2-likelihood-sts2012-msrpar.json \\
        [--rows 100 300 1000] [--draws 200] [--trials 12] [--seed 0] [--json] [--out PATH]

    python benchmarks/replay.py --table benchmarks/results/replay-*.json   # a Markdown table of these files
    python benchmarks/replay.py --docs docs/tuning.md   # its tables under <!-- replay-table: FILE ... --> redone

Writes ``benchmarks/results/replay-<lm>-<judge>-<set>.json``: ``{"meta": {...}, "rows": [{"rows_n", "gate",
"panel", "mean_gain", "gain_low", "gain_high", "population_gain", "population_gain_low", "population_gain_high",
"ship_rate", "worse_rate", "null_ship_rate", "draws", ...}]}``.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from _matrix import load_matrix, split_units
from _results import write_result

from judgetune import stats
from judgetune.judges import Verdict
from judgetune.tuning import RESCORE, RESCORE_ITEMS, RunSpec
from judgetune.tuning._objective import objectives
from judgetune.tuning._racing import SCREEN_KEEP, SCREEN_SHARE
from judgetune.tuning._selection import Candidate, SelectionItems, candidate_trials, choose, with_rescore
from judgetune.tuning._space import FAMILY, PANEL
from judgetune.tuning._splits import prepare_splits

RESULTS = Path(__file__).parent / "results"
RULES = (("nested", False), ("nested", True), ("on", False), ("on", True))
COLUMN = "column"  # a trial's only parameter: the matrix column it stands for


def write_file(path: Path, m: dict[str, Any], rows: np.ndarray, gold: np.ndarray) -> None:
    """The draw's rows as a user's CSV: its ids, labels, and questions as its groups (the texts are not needed: no LM
    runs). A grouped matrix's file names each row's question in ``group``, as the catalog's LINKAGE sets do: tune
    then splits whole questions and ranks within each."""
    grouped = m["groups"] is not None
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["id", "question", "answer", "reference", "label", *(["group"] if grouped else [])])
        for i, label in zip(rows, gold):
            question = m["groups"][i] if grouped else ""
            out.writerow([m["ids"][i], question, "an answer", "a reference", repr(float(label)),
                          *([question] if grouped else [])])


def trial_study(columns: list[int], raws: np.ndarray, splits, spec: RunSpec) -> optuna.Study:
    """An in-memory study holding one complete trial per column, its values the objective's on the search items
    (made once per draw and labels: every rule reads the same trials)."""
    study = optuna.create_study(directions=["minimize", "maximize"])
    dist = {COLUMN: optuna.distributions.IntDistribution(0, int(raws.shape[0]) - 1)}
    for j in columns:
        verdicts = [Verdict(score=None, parsed=False, raw="failed") if np.isnan(v) else Verdict(score=float(v))
                    for v in raws[j, :len(splits.search)]]
        mae, rho, _ = objectives(verdicts, splits.search, label_range=splits.label_range, seed=spec.seed,
                                 pooled=spec.pooled)
        study.add_trial(optuna.trial.create_trial(params={COLUMN: j}, distributions=dist, values=[mae, rho]))
    return study


def run_rule(spec: RunSpec, splits, study: optuna.Study, raws: np.ndarray, gold: np.ndarray,
             cache: dict, early_stop: bool = True, screen: bool = True,
             families: tuple[Candidate, ...] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """The settings ``tune`` ships on these selection labels (``raws``: every column's scores on the selection
    items): ``{COLUMN: j}``, or a panel's (its members' columns, centres and scales); and the choice's record.
    ``choose`` runs as the product does, uncalibrated (the decision reads raw scores under the Spearman rule) and
    with one figures ``cache`` for the rules of a draw."""
    spec = with_rescore(spec, splits)
    chosen = candidate_trials(study, spec, exclude=[{COLUMN: 0}])
    candidates = [Candidate(None, {COLUMN: 0}), *(Candidate(t.number, dict(t.params), tuple(t.values)) for t in chosen),
                  *families]
    grouped = len({e.group_key for e in splits.selection}) < len(splits.selection)
    items = SelectionItems(gold, [e.group_key for e in splits.selection] if grouped else None,
                           len(splits.search), splits.label_range, spec.pooled)
    index, record = choose(spec, candidates, [raws[c.params[COLUMN]] for c in candidates], items, calibrate=False,
                           figures=cache, early_stop=early_stop, screen=screen)
    return record["rows"][index]["params"], record


def shipped_scores(m: dict[str, Any], params: dict[str, Any], where: np.ndarray) -> np.ndarray:
    """The shipped judge's scores on the items ``where``: its column, or its panel's mean of standardized columns."""
    if PANEL not in params:
        return m["scores"][params[COLUMN], where]
    panel = params[PANEL]
    columns = [p[COLUMN] for p in panel["members"]]
    return stats.panel_mean(m["scores"][columns][:, where], panel["center"], panel["scale"])[0]


def one_draw(m: dict[str, Any], rows_n: int, draw: int, args, tmp: Path) -> list[dict[str, Any]]:
    rng = np.random.default_rng([args.seed, rows_n, draw])
    inside, outside = split_units(m["all_groups"], rows_n, rng)
    shuffled = rng.permutation(m["gold"][inside])
    own = m.get("own_columns", len(m["scores"]))  # the matrix's own columns (--families columns follow them)
    columns = sorted(rng.choice(np.arange(1, own), size=min(args.trials - 1, own - 1), replace=False).tolist())
    families = tuple(Candidate(None, {COLUMN: own + f, FAMILY: {"judge": kind, "params": {}}})
                     for f, kind in enumerate(m.get("families", [])))
    out = []
    for labels, null in ((m["gold"][inside], False), (shuffled, True)):
        path = tmp / f"draw-{rows_n}-{draw}-{int(null)}.csv"
        write_file(path, m, inside, labels)
        study, cache = None, {}  # the splits, the trials' search figures and the figures are the same for every rule
        for gate, panel in RULES:
            spec = RunSpec(name="replay", judge="embedding", data=str(path), seed=draw, gate=gate, panel=panel,
                           pooled=args.pooled)
            splits = prepare_splits(spec)
            index = {m["ids"][i]: i for i in inside}
            sel = np.array([index[e.id] for e in splits.selection])
            gold = np.asarray([e.judgment for e in splits.selection], dtype=float)
            study = study or trial_study(columns, m["scores"][:, sel], splits, spec)
            params, record = run_rule(spec, splits, study, m["scores"][:, sel], gold, cache,
                                      early_stop=not args.every_row, screen=not args.no_screen,
                                      families=families if gate == "nested" else ())  # tune: --also is nested only
            shipped = params != {COLUMN: 0}
            every = (len(record["rows"]) - bool(record["rows"][-1].get("panel"))) * (record["items"]
                                                                                   - record["search_items"])
            racing = record["racing"] or {"confirming_judgments": every}  # no early stopping: every row judged
            per = racing.get("confirming_by_candidate")  # the families' (--also: no LM) counted apart
            lm_made = (every - sum(bool(r.get("family")) for r in record["rows"]) * (record["items"]
                                                                                   - record["search_items"])
                       if per is None else sum(n for n, row in zip(per, record["rows"]) if not row.get("family")))
            out.append({"gate": gate, "panel": panel, "null": null, "shipped": shipped,
                        "shipped_panel": PANEL in params, "selection_items": len(sel),
                        "search_items": len(splits.search), "search_judgments": len(columns) * len(splits.search),
                        "choosing_judgments": racing.get("confirming_judgments"), "every_confirming_judgment": every,
                        "choosing_lm_judgments": lm_made,
                        **({} if null else gain_on(m, params, outside))})
    return out


def gain_on(m: dict[str, Any], params: dict[str, Any], new: np.ndarray) -> dict[str, Any]:
    """Shipped minus default on the new data (Spearman; per question where there are questions), whether the
    shipped judge is worse beyond noise there (the 95% paired interval wholly below 0), and ``population_gain``:
    the same difference over every item of the matrix, the population the draws are taken from.

    The new data is what the draw left, so on a matrix not much larger than the file it is anti-correlated with
    the file: a column that looks better than it is on the file's rows looks worse than it is on the rest (the two
    add up to the matrix). The population gain has no such bias: it is how good the choice is, for any draw."""
    if params == {COLUMN: 0}:
        return {"gain": 0.0, "worse": False, "population_gain": 0.0}
    groups = None if m["ranked"] is None else [m["ranked"][i] for i in new]
    pair = np.stack([m["scores"][0, new], shipped_scores(m, params, new)])
    fig = stats.paired_advantages("spearman", pair, pair, m["gold"][new], groups, 0.95)[1]
    every = np.arange(len(m["gold"]))
    whole = stats.figures(np.stack([m["scores"][0], shipped_scores(m, params, every)]), m["gold"], m["ranked"])
    return {"gain": fig["advantage"], "worse": fig["interval"][1] is not None and fig["interval"][1] < 0,
            "population_gain": float(whole[1] - whole[0])}


def summary(records: list[dict[str, Any]], rows_n: int) -> list[dict[str, Any]]:
    """Per rule: the mean gain over draws with its 95% t interval, ship, worse and null ship rates."""
    out = []
    for gate, panel in RULES:
        mine = [r for r in records if r["gate"] == gate and r["panel"] == panel]
        real = [r for r in mine if not r["null"]]
        null = [r for r in mine if r["null"]]
        gains = np.asarray([r["gain"] for r in real if r["gain"] is not None], dtype=float)
        low, high = stats.t_interval(float(gains.mean()), gains, 0.95) if len(gains) > 1 else (None, None)
        population = np.asarray([r["population_gain"] for r in real], dtype=float)
        pop_low, pop_high = (stats.t_interval(float(population.mean()), population, 0.95) if len(population) > 1
                             else (None, None))
        out.append({"rows_n": rows_n, "gate": gate, "panel": panel, "mean_gain": float(gains.mean()),
                    "gain_low": low, "gain_high": high, "population_gain": float(population.mean()),
                    "population_gain_low": pop_low, "population_gain_high": pop_high,
                    "ship_rate": float(np.mean([r["shipped"] for r in real])),
                    "panel_ship_rate": float(np.mean([r["shipped_panel"] for r in real])),
                    "worse_rate": float(np.mean([bool(r["worse"]) for r in real])),
                    "null_ship_rate": float(np.mean([r["shipped"] for r in null])), "draws": len(real),
                    "selection_items": float(np.mean([r["selection_items"] for r in real])),
                    "search_items": float(np.mean([r["search_items"] for r in real])),
                    **{key: float(np.mean([r[key] for r in mine])) for key in
                       ("search_judgments", "choosing_judgments", "choosing_lm_judgments",
                        "every_confirming_judgment")}})
    return out


def baselines(m: dict[str, Any], rows_n: int, draws: int, seed: int) -> dict[str, Any]:
    """The untuned default's Spearman on the new data, and the best column's gain there (an oracle no rule reaches)."""
    whole = stats.figures(m["scores"], m["gold"], m["ranked"])
    defaults, oracle = [], []
    for draw in range(draws):
        _, new = split_units(m["all_groups"], rows_n, np.random.default_rng([seed, rows_n, draw]))
        groups = None if m["ranked"] is None else [m["ranked"][i] for i in new]
        fig = stats.figures(m["scores"][:, new], m["gold"][new], groups)
        defaults.append(fig[0])
        oracle.append(np.nanmax(fig) - fig[0])
    return {"rows_n": rows_n, "default_spearman": float(np.nanmean(defaults)), "oracle_gain": float(np.nanmean(oracle)),
            "population_oracle_gain": float(np.nanmax(whole) - whole[0]), "new_items": len(m["gold"]) - rows_n}


def table(paths: list[Path]) -> str:
    """The result files as the Markdown table docs/tuning.md shows: per matrix, N and rule, the figures."""
    lines = ["| matrix (trials) | screen | rows | gate | panel | ships | mean gain on the new data [95%] | mean gain on "
             "the whole matrix [95%] (best column) | significantly worse | ships on shuffled labels | default's "
             "Spearman | LM judgments: choosing / search |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for path in paths:
        result = json.loads(path.read_text())
        base = {b["rows_n"]: b for b in result["baselines"]}
        screen = result.get("screen")  # files replayed before the screen's share and keep were recorded: 1 on
        screen = (f"{screen['share']:.0%} of rows, best {screen['keep']:.0%} on" if screen else "search-sized, best 1 on")
        for r in result["rows"]:
            low, high = (f"{v:+.3f}" if v is not None else "n/a" for v in (r["gain_low"], r["gain_high"]))
            link = f"[{path.stem.removeprefix('replay-')}](../benchmarks/results/{path.name})"
            population = "-"
            if "population_gain" in r:
                oracle = base[r["rows_n"]]["population_oracle_gain"]
                population = (f"{r['population_gain']:+.3f} [{r['population_gain_low']:+.3f}, "
                              f"{r['population_gain_high']:+.3f}] ({oracle:+.3f})")
            lines.append(f"| {link} ({result['trials']}) | {screen} | {r['rows_n']} | "
                         f"{r['gate']} | {'yes' if r['panel'] else 'no'} | {r['ship_rate']:.0%} | "
                         f"{r['mean_gain']:+.3f} [{low}, {high}] | {population} | {r['worse_rate']:.1%} | "
                         f"{r['null_ship_rate']:.1%} | "
                         f"{base[r['rows_n']]['default_spearman']:.3f} | "
                         f"{r.get('choosing_lm_judgments', r['choosing_judgments']):.0f} / {r['search_judgments']:.0f} |")
    return "\n".join(lines)


MARKER = re.compile(r"<!-- replay-table: (?P<files>[^>]*?) -->\n")


def render_page(text: str, results: Path) -> str:
    """``text`` with the table after each ``<!-- replay-table: FILE ... -->`` (result files under ``results``)
    rendered again from those files."""
    out, at = [], 0
    for marker in MARKER.finditer(text):
        end = marker.end()
        while end < len(text) and text.startswith("|", end):  # the table's lines, up to the first that is not one
            end = text.index("\n", end) + 1
        out += [text[at:marker.end()], table([results / name for name in marker["files"].split()]) + "\n"]
        at = end
    return "".join(out) + text[at:]


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        print(table([Path(p) for p in sys.argv[2:]]))
        return
    if sys.argv[1:2] == ["--docs"]:  # --docs PAGE: its marked replay tables rendered again from the results
        page = Path(sys.argv[2])
        page.write_text(render_page(page.read_text(encoding="utf-8"), Path(__file__).parent / "results"),
                        encoding="utf-8")
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("matrix", type=Path)
    parser.add_argument("--rows", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--trials", type=int, default=12, help="trials per draw, the default among them (tune's --trials)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every-row", action="store_true",
                        help="the gate judges every confirming row (no early stopping), for comparison")
    parser.add_argument("--no-screen", action="store_true",
                        help="early stopping by futility looks only (no screening of the challengers)")
    parser.add_argument("--pooled", action="store_true", help="tune's --pooled: Spearman over all rows, the "
                        "groups clusters that stay together in the splits (a document's claims), not questions")
    parser.add_argument("--families", type=Path, help="a family_columns.py file: its columns join every draw's "
                        "candidates as tune --also's do")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    m = load_matrix(args.matrix)
    m["ranked"] = None if args.pooled else m["groups"]  # the groups Spearman is taken within (none: pooled)
    suffix = ""
    if args.families:
        extra = json.loads(args.families.read_text())["families"]
        m["own_columns"], m["families"] = len(m["scores"]), list(extra)
        m["scores"] = np.vstack([m["scores"], [[np.nan if v is None else v for v in extra[k]["scores"][:m["n"]]]
                                               for k in extra]])
        suffix = "-also-" + "-".join(extra)
    out = args.out or RESULTS / f"replay-{args.matrix.stem.removeprefix('matrix-')}{suffix}.json"  # one per matrix
    rows, extra, started = [], [], time.time()
    trials = min(args.trials, m.get("own_columns", len(m["scores"])))
    with tempfile.TemporaryDirectory() as tmp:
        for rows_n in args.rows:
            if rows_n >= len(m["gold"]) - 50:
                print(f"{rows_n} rows: the matrix holds {len(m['gold'])} items; fewer than 50 would be left as new "
                      "data: skipped", file=sys.stderr)
                continue
            records = []
            for draw in range(args.draws):
                records += one_draw(m, rows_n, draw, args, Path(tmp))
                if (draw + 1) % 20 == 0:
                    print(f"{out.name}: {rows_n} rows, {draw + 1}/{args.draws} draws ({time.time() - started:.0f} s)",
                          file=sys.stderr, flush=True)
            rows += summary(records, rows_n)
            extra.append(baselines(m, rows_n, args.draws, args.seed))
            payload = {"matrix": str(args.matrix), "trials": trials, "candidates": m.get("own_columns", len(m["scores"])),
                       "families": m.get("families", []), "pooled": args.pooled,
                       "rescore": RunSpec.rescore or f"one per {RESCORE_ITEMS} confirming items, at least {RESCORE}",
                       "screen": {"share": SCREEN_SHARE, "keep": SCREEN_KEEP}, "gate_items": RunSpec.gate_items,
                       "baselines": extra, "rows": rows}
            write_result(out, payload, sys.argv)
    if args.json:
        print(json.dumps({"rows": rows, "baselines": extra}, indent=1))
    else:
        for r in rows:
            low, high = (f"{v:+.3f}" if v is not None else "n/a" for v in (r["gain_low"], r["gain_high"]))
            print(f"{r['rows_n']:>5} {r['gate']:>6} panel={r['panel']!s:<5} gain {r['mean_gain']:+.3f} [{low}, {high}] "
                  f"ship {r['ship_rate']:.0%} worse {r['worse_rate']:.1%} null {r['null_ship_rate']:.1%} "
                  f"({r['draws']} draws)")


if __name__ == "__main__":
    main()
