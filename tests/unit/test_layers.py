"""The layering rule (DESIGN.md, "Layout"), held by walking every import.

conf < serving < speed < jobs; api uses conf, serving and speed (never jobs:
the API process does not load Spark); cli and dags sit on top. Every
``import``/``from ... import`` in every production module counts, wherever it
stands (module level, inside a function, under ``if TYPE_CHECKING``), so a
deferred import cannot hide an upward edge. There are no exceptions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

# Rank of each production package; a module may import a package of lower or
# equal rank, except the pairs in FORBIDDEN (api and jobs share a rank but api
# must never import jobs, nor jobs api).
RANK = {"conf": 0, "serving": 1, "speed": 2, "jobs": 3, "api": 3, "cli": 4, "dags": 4}
FORBIDDEN = {("api", "jobs"), ("jobs", "api")}


def _package_files() -> list[tuple[str, Path]]:
    files = []
    for package in RANK:
        for path in sorted((ROOT / package).rglob("*.py")):
            files.append((package, path))
    return files


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """Every (line, absolute module name) the file imports, anywhere in it."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((node.lineno, name))
        elif isinstance(node, ast.Call):
            # importlib.import_module("jobs.x") / __import__("jobs.x") with a
            # literal name is an import too.
            func = node.func
            called = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if (
                called in ("import_module", "__import__")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                out.append((node.lineno, node.args[0].value))
    return out


def _runs_up(package: str, name: str) -> bool:
    target = name.split(".")[0]
    if target not in RANK or target == package:
        return False
    return RANK[target] > RANK[package] or (package, target) in FORBIDDEN


def upward_of(package: str, names: list[str]) -> list[str]:
    return sorted(n for n in names if _runs_up(package, n))


def upward_imports() -> list[str]:
    bad = []
    for package, path in _package_files():
        module = _module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, name in _imported(tree, module, path.name == "__init__.py"):
            if _runs_up(package, name):
                rel = path.relative_to(ROOT)
                bad.append(f"{rel}:{line}: {package} imports {name}")
    return bad


def test_no_production_module_imports_upward() -> None:
    bad = upward_imports()
    assert not bad, "imports that run up the layers:\n" + "\n".join(bad)


def test_the_walk_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The checker itself: imports inside functions, relative imports, guarded
    imports and import_module calls are all seen."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "import conf.settings\n"
        "if TYPE_CHECKING:\n"
        "    from jobs import spark\n"
        "def f():\n"
        "    import api.main\n"
        "    from ..cli import main\n"
        "    import importlib\n"
        "    importlib.import_module('dags.x')\n"
    )
    names = [n for _, n in _imported(ast.parse(source), "speed.sub.mod", False)]
    assert sorted(names) == [
        "api.main",
        "conf.settings",
        "dags.x",
        "importlib",
        "jobs",
        "speed.cli",
        "typing",
    ]
    assert upward_of("speed", names) == ["api.main", "dags.x", "jobs"]
    assert upward_of("api", ["jobs.verify", "speed.x", "serving.y"]) == ["jobs.verify"]
    assert upward_of("jobs", ["api.served", "speed.x"]) == ["api.served"]
    assert upward_of("cli", ["api.served", "jobs.verify", "dags.x"]) == []


def test_every_production_package_is_walked() -> None:
    files = _package_files()
    assert {package for package, _ in files} == set(RANK)
    assert len(files) > 50
