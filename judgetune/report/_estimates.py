"""estimate.html: each system's PPI++ and labels-only intervals drawn side by side (inline SVG, no JavaScript)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from judgetune._files import read_bounded, write_text
from judgetune.errors import JudgetuneError, shown

__all__ = ["build_estimates_report", "estimates_svg", "write_estimates_report"]

_WIDTH, _LEFT, _RIGHT, _ROW = 640, 150, 20, 34
_INTERVALS = (("labels", "labels only", "#888888", -6), ("ppi", "PPI++", "#1f5fa8", 6))
_JUDGED = {"ppi++": ("PPI++", "the judge's scores corrected by the labels"),
           "cross": ("cross (fitted)", "a judge fitted on these labels, each labeled row predicted by folds that did not "
                     "see it")}


def _judged(record: dict[str, Any]) -> tuple[str, str]:
    """The judge-assisted figure's name and what it is (``method`` of the record; PPI++ when absent)."""
    return _JUDGED.get(str(record.get("method", "ppi++")), _JUDGED["ppi++"])


def estimates_svg(record: dict[str, Any]) -> str:
    """An SVG of every system's mean: its labels-only interval (grey) above its PPI++ interval (blue), on the
    record's scale (widened to any interval that passes it)."""
    systems = record.get("systems") or []
    ends = [v for r in systems for key, *_ in _INTERVALS for v in (r.get(f"{key}_low"), r.get(f"{key}_high"))
            if v is not None]
    low, high = (record.get("scale") or [0.0, 1.0])[:2]
    low, high = min([low, *ends]), max([high, *ends])
    span = (high - low) or 1.0
    height = 40 + _ROW * len(systems) + 30

    def x(value: float) -> float:
        return round(_LEFT + (value - low) / span * (_WIDTH - _LEFT - _RIGHT), 1)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
             f'role="img" aria-label="each system\'s mean with its intervals">']
    named = [(key, name if key == "labels" else _judged(record)[0], colour, dy) for key, name, colour, dy in _INTERVALS]
    for n, (_, name, colour, _) in enumerate(named):
        parts.append(f'<line x1="{_LEFT + 120 * n}" y1="14" x2="{_LEFT + 120 * n + 24}" y2="14" stroke="{colour}" '
                     f'stroke-width="3"/><text x="{_LEFT + 120 * n + 30}" y="18" font-size="12">{name}</text>')
    for i, row in enumerate(systems):
        y = 40 + _ROW * i + _ROW / 2
        parts.append(f'<text x="{_LEFT - 8}" y="{y + 4}" font-size="12" text-anchor="end">'
                     f'{html.escape(str(row.get("system", "")))}</text>')
        for key, name, colour, dy in named:
            value, lo, hi = row.get(key), row.get(f"{key}_low"), row.get(f"{key}_high")
            if value is None or lo is None or hi is None:
                continue
            title = f"{row.get('system')}: {name} {value:.3f} [{lo:.3f}, {hi:.3f}]"
            parts.append(f'<g class="{key}"><title>{html.escape(title)}</title>'
                         f'<line x1="{x(lo)}" y1="{y + dy}" x2="{x(hi)}" y2="{y + dy}" stroke="{colour}" '
                         f'stroke-width="3"/><circle cx="{x(value)}" cy="{y + dy}" r="4" fill="{colour}"/></g>')
    axis = 40 + _ROW * len(systems) + 6
    parts.append(f'<line x1="{_LEFT}" y1="{axis}" x2="{_WIDTH - _RIGHT}" y2="{axis}" stroke="#000"/>')
    for tick in (low, (low + high) / 2, high):
        parts.append(f'<text x="{x(tick)}" y="{axis + 16}" font-size="11" text-anchor="middle">{tick:g}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _interval(row: dict[str, Any], key: str) -> str:
    value, low, high = row.get(key), row.get(f"{key}_low"), row.get(f"{key}_high")
    if value is None:
        return "-"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]" if low is not None and high is not None else f"{value:.3f}"


def build_estimates_report(record: dict[str, Any], *, title: str = "estimate") -> str:
    """The page: the intervals drawn, then the figures in a table and the record's notes."""
    confidence = record.get("confidence")
    level = f"{confidence:.0%} " if isinstance(confidence, (int, float)) else ""
    rows = "".join(
        f"<tr><td>{html.escape(str(r.get('system', '')))}</td><td>{r.get('rows', '-')}</td>"
        f"<td>{r.get('labeled', '-')}</td><td>{_interval(r, 'labels')}</td><td>{_interval(r, 'ppi')}</td></tr>"
        for r in record.get("systems") or [])
    notes = "".join(f"<li>{html.escape(str(note))}</li>" for note in record.get("notes") or [])
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title></head><body>"
            f"<h1>{html.escape(title)}</h1><p>each system's {html.escape(str(record.get('measure', 'mean')))}, "
            f"{level}intervals: labels only and {_judged(record)[0]} ({_judged(record)[1]})</p>"
            f"{estimates_svg(record)}<table><tr><th>system</th><th>rows</th><th>labeled</th><th>labels only</th>"
            f"<th>{html.escape(_judged(record)[0])}</th></tr>{rows}</table>"
            + (f"<ul>{notes}</ul>" if notes else "") + "</body></html>\n")


def write_estimates_report(path: str | Path, out: str | Path | None = None) -> Path:
    """Write the page of an estimate's JSON (``judgetune estimate --out``) to ``out`` (default: beside it, .html)."""
    path = Path(path)
    try:
        record = json.loads(read_bounded(path, 50_000_000, "estimate file").decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise JudgetuneError(f"{shown(path)}: expected the JSON judgetune estimate --out writes ({err})") from None
    if not isinstance(record, dict) or not isinstance(record.get("systems"), list):
        raise JudgetuneError(f"{shown(path)}: expected the JSON judgetune estimate --out writes (no systems list)")
    out = Path(out) if out is not None else path.with_suffix(".html")
    write_text(out, build_estimates_report(record, title=path.stem))
    return out
