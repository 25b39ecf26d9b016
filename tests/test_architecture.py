"""The package layering the README draws: imports point one way, and no package reaches into another's
private module. Read from the source (AST), so a lazy import inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "judgetune"
# every package may use these
BASE = {"datasets", "stats", "errors", "_files", "_offline", "_progress", "_endpoints"}
# who may import whom (besides BASE and itself); anything not listed is not allowed
ALLOWED = {
    "cli": {"*"},
    "__init__": {"*"},
    "_api": {"_frozen", "tuning", "evaluation", "report", "config", "calibration", "judges", "lm", "scoring", "picking",
             "estimating"},
    "_frozen": {"config", "judges", "lm", "scoring"},
    "picking": {"judges", "lm"},
    "estimating": {"_frozen", "config", "judges"},  # judges: the cheap signals a cross-fitted judge reads
    "_demo": {"tuning", "evaluation", "report", "config"},
    "integrations": {"_api", "config"},
    "tuning": {"audit", "evaluation", "config", "calibration", "judges", "lm"},
    "audit": {"config", "calibration", "judges", "lm"},
    "evaluation": {"config", "calibration", "judges", "lm"},
    "nrp": {"config", "judges", "lm", "scoring"},
    "ragcheck": {"config", "judges", "lm"},
    "report": {"config", "calibration"},
    "reproduce": {"nrp", "ragcheck"},
    "testing": {"config", "judges", "lm"},
    "scoring": {"config", "calibration", "judges", "lm"},
    "config": {"calibration", "judges", "lm"},
    "judges": {"lm"},
    "calibration": set(),
    "lm": set(),
    "datasets": {"errors", "_files"},
    "stats": set(),
    "errors": set(),
    "_endpoints": set(),  # the trust rules every request follows (scoring, data downloads)
    "_files": set(),
    "_offline": set(),
    "_progress": set(),
}


def _unit(path: Path) -> str:
    """The top-level unit (package or module) a file belongs to."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return parts[0]


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every judgetune import in a file, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = ("judgetune", *path.relative_to(ROOT).with_suffix("").parts)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("judgetune")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(here[:len(here) - node.level])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            if module.startswith("judgetune"):
                # `from judgetune import x` imports the unit x
                names = [f"{module}.{a.name}" for a in node.names] if module == "judgetune" else [module]
                out += [(node.lineno, n) for n in names]
    return out


FILES = sorted(ROOT.rglob("*.py"))


def test_the_layering_table_covers_every_unit():
    units = {_unit(f) for f in FILES}
    assert units <= set(ALLOWED), f"add {sorted(units - set(ALLOWED))} to the layering table (and the README)"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_one_way_and_never_into_a_private_module(path: Path):
    unit = _unit(path)
    allowed = ALLOWED[unit]
    problems = []
    for line, name in _imports(path):
        parts = name.split(".")
        if len(parts) < 2:
            continue
        target = parts[1]
        if target == unit:
            continue
        if "*" not in allowed and target not in allowed | BASE:
            problems.append(f"{path.name}:{line}: {unit} imports {name} ({unit} may use {sorted(allowed | BASE)})")
        if any(p.startswith("_") and p != "__init__" for p in parts[2:]):
            problems.append(f"{path.name}:{line}: imports {name}, a private module of another package")
    assert not problems, "\n".join(problems)


def test_nothing_imports_the_cli():
    users = [f"{p.relative_to(ROOT)}:{line}" for p in FILES for line, name in _imports(p)
             if name == "judgetune.cli" and _unit(p) != "cli"]
    assert not users


@pytest.mark.parametrize("package", sorted({_unit(f) for f in FILES if f.name == "__init__.py" and f.parent != ROOT}))
def test_every_public_package_declares_all(package):
    import importlib

    module = importlib.import_module(f"judgetune.{package}")
    assert isinstance(getattr(module, "__all__", None), list) and module.__all__
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing


def test_the_files_scheduled_first_exist():
    """conftest's LONGEST_FILES orders the two workers' files; a renamed file would silently drop out."""
    from conftest import LONGEST_FILES

    tests = Path(__file__).parent
    assert [name for name in LONGEST_FILES if not (tests / name).is_file()] == []


def _module_graph() -> dict[str, set[str]]:
    """Module -> the judgetune modules it imports (lazy imports inside functions too), from the source."""
    root = Path(__file__).resolve().parents[1] / "judgetune"
    files = {".".join(f.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): f
             for f in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                targets = [module, *(f"{module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in files and t != name}
    return graph


def test_no_import_circle_between_modules():
    """No module reaches, through the modules it imports, back to itself (a package's __init__, which
    re-exports its modules, aside)."""
    graph = _module_graph()
    inits = {m for m in graph if (Path(__file__).resolve().parents[1] / m.replace(".", "/") / "__init__.py").is_file()}
    circles = set()
    for start in graph:
        if start in inits:
            continue
        stack = [(start, (start,))]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node] - inits:
                if nxt == start:
                    circles.add(tuple(sorted(path)))
                elif nxt not in path and len(path) < 6:
                    stack.append((nxt, (*path, nxt)))
    assert not circles, sorted(circles)
