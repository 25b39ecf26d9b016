"""estimate.html: each system's PPI++ and labels-only intervals drawn from an estimate's JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

from judgetune.cli import main
from judgetune.report import build_estimates_report, estimates_svg

RECORD = {"measure": "mean", "method": "ppi++", "confidence": 0.95, "scale": [0, 5],
          "systems": [{"system": "gpt", "rows": 100, "labeled": 20, "labels": 2.55, "labels_low": 2.30,
                       "labels_high": 2.80, "ppi": 2.556, "ppi_low": 2.29, "ppi_high": 2.82},
                      {"system": "<llama>", "rows": 100, "labeled": 1, "labels": None, "labels_low": None,
                       "labels_high": None, "ppi": 1.45, "ppi_low": -0.5, "ppi_high": 1.77}],
          "pairs": [], "notes": ["labels: a uniform random sample per system"]}


def test_each_system_has_both_intervals_where_it_has_them() -> None:
    svg = estimates_svg(RECORD)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count('<g class="ppi">') == 2 and svg.count('<g class="labels">') == 1  # llama has no labels figure
    assert "gpt: PPI++ 2.556 [2.290, 2.820]" in svg and "gpt: labels only 2.550 [2.300, 2.800]" in svg
    assert "&lt;llama&gt;" in svg and "<llama>" not in svg
    xs = [float(v) for v in re.findall(r'x[12]="([-\d.]+)"', svg)]
    assert min(xs) >= 0 and max(xs) <= 640  # an interval below the scale widens the axis, never leaves the picture
    assert ">-0.5<" in svg  # the axis starts at the lowest end


def test_the_page_and_the_command(tmp_path: Path, capsys) -> None:
    page = build_estimates_report(RECORD, title="estimate")
    assert "<table>" in page and "2.556 [2.290, 2.820]" in page and "95% intervals" in page
    assert "labels: a uniform random sample per system" in page
    path = tmp_path / "estimate.json"
    path.write_text(json.dumps(RECORD), encoding="utf-8")
    assert main(["report", str(path)]) == 0
    assert capsys.readouterr().out.strip().endswith("estimate.html")
    assert (tmp_path / "estimate.html").read_text(encoding="utf-8") == page
    path.write_text('{"rows": []}', encoding="utf-8")
    assert main(["report", str(path)]) == 2
    assert "expected the JSON judgetune estimate --out writes" in capsys.readouterr().err


def test_a_fitted_estimate_is_drawn_under_its_own_name():
    from judgetune.report._estimates import build_estimates_report

    record = {"method": "cross", "confidence": 0.95, "scale": [0, 5], "measure": "mean label",
              "systems": [{"system": "a", "rows": 10, "labeled": 5, "labels": 3.0, "labels_low": 2.0, "labels_high": 4.0,
                           "ppi": 3.1, "ppi_low": 2.6, "ppi_high": 3.5}]}
    page = build_estimates_report(record)
    assert "cross (fitted) 3.100 [2.600, 3.500]" in page and "PPI++" not in page
