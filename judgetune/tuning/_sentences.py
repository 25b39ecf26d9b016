"""What a tuning run says to its user: the gate's verdict and the gain over the default, one line each
(printed by the CLI and the demo, from ``judge.json``'s metrics alone)."""

from __future__ import annotations

from typing import Any

from judgetune.stats import candidate_name, gain_parts

__all__ = ["gain_line", "gate_line", "lm_line", "seconds_line"]


def gate_line(selection: dict[str, Any] | None) -> str | None:
    """What the gate saw, in one line: the challenger chosen on the search items, its advantage on the confirming
    items (pool and dev) with
    its interval, and why the default shipped when it did (None for a run without the gate)."""
    if not selection or selection.get("gate") not in ("on", "nested"):
        return None
    return _verdict(selection) + _saved(selection.get("racing"))


def _saved(racing: dict[str, Any] | None) -> str:
    """How many judgments stopping early saved, when it saved any."""
    if not racing or not racing.get("saved"):
        return ""
    return f" (judged {racing['judgments']} of {racing['every_judgment']} candidate-items: losers stopped early)"


def _verdict(selection: dict[str, Any]) -> str:
    test, rows = selection.get("gate_result") or {}, selection["rows"]
    name, fmt = selection["rule"], (lambda x: "-" if x is None else f"{x:+.3f}")  # noqa: E731
    if test.get("stopped") and not test.get("refused"):
        return f"gate{' (nested)' if selection['gate'] == 'nested' else ''}: {test['stopped']}; the default shipped"
    if selection["gate"] == "nested":
        return _nested_line(test, rows, fmt)
    name = "Spearman" if name == "spearman" else "MAE (default's minus its own)"
    if test.get("refused"):
        return f"gate: no test ({test['refused']})"
    if test.get("winner") is None:
        best = max((r for r in rows[1:] if r.get("search_figure") is not None and not r.get("rejected")),
                   key=lambda r: r["search_figure"], default=None)
        if best is None:
            return "gate: no challenger left to test; the default shipped"
        return (f"gate: no challenger beat the default on the search items (best {best['search_figure']:.3f}, trial "
                f"{best['number']}, vs the default's {rows[0]['search_figure']:.3f}); the default shipped")
    win = rows[test["winner"]]
    low, high = win.get("advantage_confirming_ci") or (None, None)
    line = (f"gate: {candidate_name(win)}, best on the search items ({win['search_figure']:.3f} vs the default's "
            f"{rows[0]['search_figure']:.3f}), had an advantage of {fmt(test.get('winner_advantage'))} "
            f"[{fmt(low)}, {fmt(high)}] in {name} on the {test.get('items')} confirming items (pool and dev) "
            f"({test.get('method')}, {test.get('level', '95%')})")
    guard = test.get("guard") or {}
    if test.get("passed"):
        return line + "; it shipped"
    if guard.get("worse"):
        return line + f", but its {guard['objective']} was worse than the default's beyond noise; the default shipped"
    needed = test.get("units_to_pass")
    more = (f" (were the advantage and its spread to hold, about {needed} confirming "
            f"{'questions' if test.get('groups') else 'items'} would pass it in 80% of runs)") if needed else ""
    return line + f": not above zero; the default shipped{more}"


def _nested_line(test: dict[str, Any], rows: list[dict[str, Any]], fmt, *, prefix: str = "gate (nested): ",
                 level: str = "95%") -> str:
    if test.get("refused"):
        return f"{prefix}no test ({test['refused']})"
    panel = test.get("panel")
    if panel:  # two tests, each at half the level (judgetune.stats.panel_gate)
        half = f"{1 - panel['alpha']:.1%}"
        said = (f"the panel {fmt(panel['advantage'])} Spearman over the default on the "
                f"{panel.get('items', test.get('items'))} confirming items "
                f"(one-sided {half} lower bound {fmt(panel['lower'])})")
        if panel.get("passed") and test.get("winner") is not None and rows[test["winner"]].get("panel"):
            return f"gate (panel and nested): {candidate_name(rows[test['winner']])} shipped: {said}"
        verdict = "passed, but the nested gate's choice gained more" if panel.get("passed") else "not above zero"
        return (f"gate (panel and nested): {said}: {verdict}; the nested gate: "
                + _nested_line({**test, "panel": None}, rows, fmt, prefix="", level=half))
    if test.get("winner") is None:
        return (f"{prefix}no challenger beat the default on the {test.get('items')} selection items (search, pool, dev); "
                "the default shipped")
    win = rows[test["winner"]]
    line = (f"{prefix}{candidate_name(win)}, best on all {test.get('items')} selection items; the choice "
            f"cross-validated gained {fmt(test.get('winner_advantage'))} Spearman over the default on held-out folds of the "
            f"{test.get('confirming_items')} confirming items "
            f"(one-sided {level} lower bound {fmt(test.get('lower_bound'))}, {test.get('method')})")
    return line + ("; it shipped" if test.get("passed") else ": not above zero; the default shipped")


def gain_line(metrics: dict[str, Any]) -> str:
    """What tuning bought: the gain over the default on test and the gate's verdict in one line, then what
    the gate saw (``gate_line``) and any warning, one line each."""
    g = metrics.get("gain")
    if not g or g.get("spearman") is None:
        return "gain over the default judge: not measured"
    if g["default_shipped"]:  # the shipped judge is the default: a gain of exactly 0 says nothing
        line = f"gain over the default judge on {g['n']} test items: none claimed, the default shipped (the gate below)"
    else:
        line = (f"gain over the default judge on {g['n']} test items (paired 95%): {', '.join(gain_parts(g))}; "
                "a tuned judge shipped")
    gate = gate_line(metrics.get("selection"))
    if gate:
        line += f"\n{gate}"
    if g.get("warning"):
        line += f"\nwarning: {g['warning']}"
    if metrics.get("vs_constant", {}).get("worse"):
        c = metrics["vs_constant"]["mae"]
        line += (f"\nwarning: test MAE is worse than the constant predictor's (the training median) by "
                 f"{c['value']:.3f} [{c['low']:.3f}, {c['high']:.3f}]")
    return line


def lm_line(metrics: dict[str, Any]) -> str | None:
    """A stacking run's comparison with the LM judge alone, in one line (None for other runs)."""
    vs = metrics.get("gain_vs_lm")
    if not vs:
        return None
    d, lm_cost = vs["spearman"], vs["lm_judge_cost"].get("seconds_per_item")
    shipped_cost = (metrics.get("cost", {}).get("test") or {}).get("seconds_per_item")
    fmt = (lambda x: "-" if x is None else f"{x:+.3f}")  # noqa: E731
    secs = (lambda x: "-" if x is None else f"{x:.2f} s")  # noqa: E731
    spearman = vs["lm_judge_spearman"]
    return (f"vs the LM judge alone (untuned {vs['lm_judge']['judge']}, test Spearman "
            f"{'-' if spearman is None else f'{spearman:.3f}'}): {fmt(d['value'])} [{fmt(d['low'])}, "
            f"{fmt(d['high'])}] Spearman; seconds per item: shipped {secs(shipped_cost)}, LM judge {secs(lm_cost)}")


STEPS = ("search", "choosing", "freezing", "scoring", "default", "audit")  # the order a run takes them


def seconds_line(metrics: dict[str, Any]) -> str | None:
    """Each step's wall time in one line (``metrics.seconds``), so a slow step shows itself; None without them."""
    seconds = metrics.get("seconds") or {}
    parts = [f"{step} {seconds[step]:.0f} s" for step in STEPS if step in seconds]
    return f"time: {', '.join(parts)}" if parts else None
