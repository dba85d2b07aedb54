"""speed/ alone owns Redis: no module of the API builds a key (speed.partitions'
``Keys``, ``KEY_PREFIX``, ``tag``) or registers a script, and speed/scripts.py's
``register`` is the one place a production module registers a Lua script. Every
import and call counts, also those inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ("api", "cli", "conf", "dags", "jobs", "serving", "speed")
KEY_BUILDERS = {"Keys", "KEY_PREFIX", "tag"}


def modules(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (ROOT / pkg).rglob("*.py"))


def key_imports(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "speed.partitions":
            found += [a.name for a in node.names if a.name in KEY_BUILDERS | {"*"}]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "speed.partitions"]
    return found


def script_registrations(tree: ast.AST) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "register_script"
    ]


def test_the_api_builds_no_key() -> None:
    offenders = {
        str(path.relative_to(ROOT)): names
        for path in modules("api")
        if (names := key_imports(ast.parse(path.read_text())))
    }
    assert offenders == {}


def test_one_script_registration_site() -> None:
    sites = {
        str(path.relative_to(ROOT)): lines
        for path in modules(*PRODUCTION)
        if (lines := script_registrations(ast.parse(path.read_text())))
    }
    assert list(sites) == ["speed/scripts.py"], sites
    assert len(sites["speed/scripts.py"]) == 1


def test_the_checks_see_what_they_look_for() -> None:
    tree = ast.parse(
        "def f(client):\n"
        "    from speed.partitions import Keys, partition_of\n"
        "    return client.register_script('x')\n"
    )
    assert key_imports(tree) == ["Keys"]
    assert script_registrations(tree) == [3]
