"""report.html: a self-contained page (figures inlined as PNG data URIs, no JavaScript)."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

import jsonlines
import optuna

from judgetune._files import write_text
from judgetune.config import JudgeConfig
from judgetune.report import _plots

METRIC_KEYS = ("n", "parse_failures", "mae", "bracket_accuracy", "spearman", "kendall", "pearson",
               "spearman_per_group", "best_accuracy")


def _figure(title: str, png: bytes | None, note: str = "") -> str:
    if png is None:
        return f"<figure><figcaption>{html.escape(title)}</figcaption><p>{html.escape(note)}</p></figure>"
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(title)}</figcaption></figure>")


def _cell(row: dict, key: str) -> str:
    value = row.get(key)
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    ci = row.get(f"{key}_ci")
    text = f"{value:.3f}"
    if ci and ci[0] is not None:
        text += f" <small>[{ci[0]:.2f}, {ci[1]:.2f}]</small>"
    return text


def _table(rows: list[tuple[str, dict]]) -> str:
    keys = [k for k in METRIC_KEYS if any(r.get(k) is not None for _, r in rows)]
    head = "".join(f"<th>{k}</th>" for k in ["", *keys])
    body = "".join(f"<tr><th>{html.escape(name)}</th>{''.join(f'<td>{_cell(r, k)}</td>' for k in keys)}</tr>"
                   for name, r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _f(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def selection_section(selection: dict[str, Any] | None) -> str:
    """The front re-scored on dev: search-split vs dev figures of each candidate, the chosen one marked."""
    if not selection:
        return ""
    body = "".join(
        f"<tr><th>{r['number']}{' (chosen)' if r['chosen'] else ''}</th><td>{html.escape(str(r['instruction']))}</td>"
        f"<td>{_f(r['search']['spearman'])}</td><td>{_f(r['dev']['spearman'])}</td><td>{_f(r['search']['mae'])}</td>"
        f"<td>{_f(r['dev']['mae'])}</td><td>{'yes' if r['on_front'] else 'no'}</td></tr>" for r in selection["rows"])
    return (f"<h2>Selection on dev</h2><p>Candidates re-scored on dev ({selection.get('lm_calls', 0)} LM calls) and "
            f"picked by {html.escape(selection['rule'])} on dev. MAE is after a cross-fitted calibrator. The gap "
            "between the search and dev columns is how much of a trial's search figure was luck.</p>"
            "<table><thead><tr><th>trial</th><th>instruction</th><th>Spearman search</th><th>Spearman dev</th>"
            f"<th>MAE search</th><th>MAE dev</th><th>on front</th></tr></thead><tbody>{body}</tbody></table>")


def proposals_section(proposals: dict[str, Any] | None) -> str:
    """Every instruction of the pool with its figures, and each proposal round with its refusals."""
    if not proposals:
        return ""
    rows = []
    for c in proposals["instructions"]:
        search, dev = c.get("search") or {}, c.get("dev") or {}
        round_ = "-" if c["round"] is None else c["round"]
        rows.append(f"<tr><th>{c['id']}</th><td>{html.escape(c['source'])}</td><td>{round_}</td>"
                    f"<td style='text-align:left'>{html.escape(c['text'])}</td><td>{c['trials']}</td>"
                    f"<td>{_f(search.get('spearman'))}</td><td>{_f(dev.get('spearman'))}</td>"
                    f"<td>{_f(search.get('mae'))}</td><td>{_f(dev.get('mae'))}</td></tr>")
    rounds = []
    for r in proposals["rounds"]:
        refused = "".join(f"<li>{html.escape(x['reason'])}: <code>{html.escape(x['text'][:200] or '(nothing)')}</code></li>"
                          for x in r["refused"])
        rounds.append(f"<h3>Round {r['round']} ({html.escape(r['source'])}"
                      f"{'' if r.get('based_on_trial') is None else ', reflecting on trial ' + str(r['based_on_trial'])})"
                      f"</h3><p>asked {r['asked']}, accepted {html.escape(str(r['accepted']))}, refused "
                      f"{html.escape(json.dumps(r['refused_counts']))}; {r.get('lm_calls', 0)} LM calls</p>"
                      f"<ul>{refused}</ul>")
    return (f"<h2>Instruction pool and proposal rounds</h2><p>Refused in all: "
            f"{html.escape(json.dumps(proposals['refused_counts']))}. Search: the instruction's best trial; dev: its "
            "re-scored trial where it was among the candidates.</p>"
            "<table><thead><tr><th>id</th><th>source</th><th>round</th><th>instruction</th><th>trials</th>"
            "<th>Spearman search</th><th>Spearman dev</th><th>MAE search</th><th>MAE dev</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>{''.join(rounds)}")


def build_report(*, study: optuna.Study, config: JudgeConfig, predictions: list[dict[str, Any]]) -> str:
    metrics = config.metrics
    label_range = tuple(config.label_range)
    kept = [p for p in predictions if p["score"] is not None]
    raw, calibrated, human = ([p["raw_score"] for p in kept], [p["score"] for p in kept], [p["human"] for p in kept])
    rows = [(f"judge ({split})", metrics[split]) for split in ("train", "dev", "test") if split in metrics]
    rows += [(f"{name} (test)", row) for name, row in metrics.get("baselines", {}).items()]
    search = metrics.get("search", {})
    figures = [
        _figure("Pareto front", _plots.pareto_front(study, search.get("chosen_trial"))),
        _figure("Optimization history", _plots.history(study)),
        _figure("Parameter importance", _plots.importance(study), "too few completed trials to estimate importance"),
        _figure("Predicted vs human, with the calibration curve",
                _plots.predicted_vs_human(raw, calibrated, human, config.calibrator, label_range)),
        _figure("Bracket confusion matrix", _plots.bracket_confusion(calibrated, human, label_range)),
    ]
    settings = {"judge": config.judge, "params": config.params, "lm": config.lm, "calibrator": config.calibrator,
                "criterion": config.criterion, "instruction": config.instruction, "demos": len(config.demos)}
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>judgetune report: {html.escape(config.judge)}</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}figure{{display:inline-block;margin:1em}}
pre{{background:#f6f6f6;padding:1em;overflow:auto}}</style></head>
<body>
<h1>judgetune: {html.escape(config.judge)} judge on {html.escape(str(config.data.get('source', '?')))}</h1>
<p>Scale {label_range[0]:g}-{label_range[1]:g}. Search: {html.escape(json.dumps(search.get('trials', {})))} trials,
{search.get('lm_calls', 0)} LM calls, {search.get('tokens', 0)} tokens; chosen trial {search.get('chosen_trial')}
by the rule "{html.escape(str(search.get('pick_rule')))}". Dev figures are in-sample for the calibrator;
test was scored once.</p>
<h2>Metrics (calibrated scores, 95% bootstrap intervals)</h2>
{_table(rows)}
{selection_section(metrics.get("selection"))}
{proposals_section(metrics.get("proposals"))}
<h2>Figures</h2>
{''.join(figures)}
<h2>Frozen settings</h2>
<pre>{html.escape(json.dumps(settings, indent=2))}</pre>
</body></html>
"""


def write_report(run_dir: str | Path, *, study: optuna.Study, config: JudgeConfig | None = None) -> Path:
    """Write ``run_dir/report.html`` from the run's judge.json, test predictions and study."""
    run_dir = Path(run_dir)
    config = config or JudgeConfig.load(run_dir / "judge.json")
    with jsonlines.open(run_dir / "test_predictions.jsonl") as reader:
        predictions = list(reader)
    path = run_dir / "report.html"
    write_text(path, build_report(study=study, config=config, predictions=predictions))
    return path
