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
from judgetune.stats import candidate_name, gain_parts

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
    """The candidates (the default first) with their search figures and their figures on every non-test
    item (out-of-fold calibrated), the gate's verdict, the chosen one marked."""
    if not selection:
        return ""

    def name(r: dict) -> str:
        rejected = f" (rejected: {r['rejected']})" if r.get("rejected") else ""
        return candidate_name(r) + (" (chosen)" if r["chosen"] else "") + rejected

    body = "".join(
        f"<tr><th>{html.escape(name(r))}</th><td>{html.escape(json.dumps(r['params']))}</td>"
        f"<td>{_f((r.get('search') or {}).get('spearman'))}</td><td>{_f(r['spearman'])}</td>"
        f"<td>{_f((r.get('search') or {}).get('mae'))}</td><td>{_f(r['mae'])}</td>"
        f"<td>{_f(r.get('advantage_confirming'))}</td></tr>" for r in selection["rows"])
    test = selection.get("gate_result") or {}
    if selection.get("gate") == "nested":
        if test.get("refused"):
            verdict = f"The nested gate made no test: {html.escape(test['refused'])}. "
        elif test.get("winner") is None:
            verdict = f"No challenger beat the default on the {test.get('items')} search and dev items. "
        elif selection["rows"][test["winner"]].get("panel"):
            verdict = (f"The panel {'passed' if test.get('passed') else 'did not pass'}: "
                       f"{_f(test.get('winner_advantage'))} Spearman over the default on all {test.get('items')} "
                       f"search and dev items, {html.escape(str(test.get('level')))} {_f(test.get('lower_bound'))} "
                       f"({html.escape(str(test.get('method')))}). ")
        else:
            verdict = (f"The nested gate {'passed' if test.get('passed') else 'did not pass'}: choosing the challenger "
                       f"best on the {test.get('items')} search and dev items gained {_f(test.get('winner_advantage'))} "
                       f"Spearman over the default on held-out folds, "
                       f"{html.escape(str(test.get('level', 'one-sided 95% lower bound')))} "
                       f"{_f(test.get('lower_bound'))} ({html.escape(str(test.get('method')))}). ")
        verdict += "The default judge shipped." if selection.get("default_shipped") else "The challenger shipped."
        intro = (f"Candidates scored on {selection.get('items')} non-test items ({selection.get('lm_calls', 0)} LM "
                 f"calls), MAE out of fold. {verdict}")
    elif selection.get("gate") == "on":
        if test.get("refused"):
            verdict = f"The gate made no test: {html.escape(test['refused'])}. "
        elif test.get("winner") is None:
            verdict = "No challenger beat the default on the search items. "
        else:
            guard = test.get("guard") or {}
            verdict = (f"The gate {'passed' if test.get('passed') else 'did not pass'}: the challenger chosen on the "
                       f"search items had a dev advantage of {_f(test.get('winner_advantage'))} on the "
                       f"{test.get('items')} dev items, the lower end of its paired 95% interval "
                       f"{_f(test.get('lower_bound'))} ({html.escape(str(test.get('method')))})"
                       + (f"; its {guard.get('objective')} was worse than the default's beyond noise"
                          if guard.get("worse") else "") + ". ")
        verdict += "The default judge shipped." if selection.get("default_shipped") else "The challenger shipped."
        intro = (f"Candidates scored on {selection.get('items')} non-test items ({selection.get('lm_calls', 0)} LM "
                 f"calls), MAE out of fold; chosen by {html.escape(selection['rule'])}. {verdict}")
    else:
        intro = (f"Gate off (the old rule): candidates re-scored on dev ({selection.get('lm_calls', 0)} LM calls), "
                 f"picked by {html.escape(selection['rule'])} on dev.")
    return (f"<h2>Selection</h2><p>{intro}</p>"
            "<table><thead><tr><th>candidate</th><th>settings</th><th>Spearman search</th><th>Spearman selection</th>"
            "<th>MAE search</th><th>MAE selection</th><th>advantage (dev)</th></tr></thead>"
            f"<tbody>{body}</tbody></table>")


def gain_paragraph(metrics: dict[str, Any]) -> str:
    """What tuning bought: shipped minus default on test (``metrics.gain``), in one line."""
    g = metrics.get("gain")
    if not g or not g.get("spearman"):
        return ""
    if g["default_shipped"]:
        return (f"<h2>Gain over the default judge</h2><p>None claimed: the default judge shipped (no reliable gain "
                f"found; see Selection), so its {g['n']} test items score as the untuned judge's.</p>")
    return (f"<h2>Gain over the default judge</h2><p>Shipped minus default on the same {g['n']} test items (paired "
            f"95% interval; MAE: negative is better): {html.escape(', '.join(gain_parts(g)))}; a tuned judge "
            "shipped.</p>")


def proposals_section(proposals: dict[str, Any] | None) -> str:
    """Every instruction of the pool with its figures, and each proposal round with its refusals."""
    if not proposals:
        return ""
    rows = []
    for c in proposals["instructions"]:
        search, dev = c.get("search") or {}, c.get("selection") or c.get("dev") or {}
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
            f"{html.escape(json.dumps(proposals['refused_counts']))}. Search: the instruction's best trial; selection: its "
            "candidate's figures where it was among the candidates.</p>"
            "<table><thead><tr><th>id</th><th>source</th><th>round</th><th>instruction</th><th>trials</th>"
            "<th>Spearman search</th><th>Spearman selection</th><th>MAE search</th><th>MAE selection</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>{''.join(rounds)}")


def audit_section(audit: dict[str, Any] | None) -> str:
    """The audit of the frozen judge: each probe's effect with its 95% interval, q (corrected across
    probes), the minimum detectable effect and how to read it; then the probes that did not apply."""
    if not audit:
        return ""
    if audit.get("error"):
        return f"<h2>Audit</h2><p>The audit could not run: {html.escape(audit['error'])}</p>"
    body = "".join(
        f"<tr><th>{html.escape(r['probe'])}</th><td>{r['effect']:+.3f} <small>[{r['low']:+.3f}, {r['high']:+.3f}]"
        f"</small></td><td>{_f(r['q'])}</td><td>{_f(r['mde'])}</td><td>{r['n']}</td>"
        f"<td style='text-align:left'>{html.escape(r.get('reading', ''))}</td>"
        f"<td style='text-align:left'><small>{html.escape(r.get('unit', ''))}</small></td></tr>"
        for r in audit.get("probes", []))
    skipped = "".join(f"<li>{html.escape(r['probe'])}: {html.escape(r['why'])}</li>"
                      for r in audit.get("not_applicable", []))
    return ("<h2>Audit</h2><p>How far the score moves when something that should not matter changes (see "
            "docs/audit.md): effect with its 95% bootstrap interval (clustered by question), q after the "
            "Benjamini-Hochberg correction across the probes, and the minimum detectable effect (MDE) at power 0.8. "
            "No effect found with an MDE above the size that matters means too few items to tell.</p>"
            "<table><thead><tr><th>probe</th><th>effect [95% interval]</th><th>q</th><th>MDE</th><th>n</th>"
            f"<th>reading</th><th>unit</th></tr></thead><tbody>{body}</tbody></table>"
            + (f"<p>Not run:</p><ul>{skipped}</ul>" if skipped else ""))


def build_report(*, study: optuna.Study, config: JudgeConfig, predictions: list[dict[str, Any]]) -> str:
    metrics = config.metrics
    label_range = tuple(config.label_range)
    kept = [p for p in predictions if p["score"] is not None]
    raw, calibrated, human = ([p["raw_score"] for p in kept], [p["score"] for p in kept], [p["human"] for p in kept])
    rows = [(f"judge ({split})", metrics[split]) for split in ("search_items", "dev", "test") if split in metrics]
    rows += [(f"{name} (test)", row) for name, row in metrics.get("baselines", {}).items()]
    search = metrics.get("study", {})
    panel = config.judge == "panel" and config.fitted is not None
    chosen = f"the panel of {len(config.fitted['members'])} candidates" if panel else f"trial {search.get('chosen_trial')}"
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
{search.get('lm_calls', 0)} LM calls, {search.get('tokens', 0)} tokens; chosen: {html.escape(chosen)}
by the rule "{html.escape(str(search.get('pick_rule')))}". Dev figures are in-sample for the calibrator;
test was scored once.</p>
<h2>Metrics (calibrated scores, 95% bootstrap intervals)</h2>
{_table(rows)}
{gain_paragraph(metrics)}
{selection_section(metrics.get("selection"))}
{proposals_section(metrics.get("proposals"))}
{audit_section(metrics.get("audit"))}
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
