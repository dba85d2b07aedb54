"""Lua scripts of the speed layer, one per file, loaded as package data.

A script may include a shared fragment of ``lib/`` with a line
``--#include <name>``: :func:`load` puts ``lib/<name>.lua`` in its place (the token
bucket of every rate limit is one such fragment). The KEYS/ARGV offset tables are
not here: ``speed.scripts.source`` prepends them, generated from the declared layout.
"""

from __future__ import annotations

import re
from importlib import resources

_INCLUDE = re.compile(r"^--#include ([a-z_]+)$", re.M)


def _fragment(name: str) -> str:
    return resources.files(__package__).joinpath("lib", f"{name}.lua").read_text()


def include(code: str, seen: set[str] | None = None) -> str:
    """``code`` with each ``--#include <name>`` line replaced by its fragment, the
    fragments' own includes too; a fragment is included once per script (a
    second ``local function`` of the same name would shadow the first)."""
    done: set[str] = set() if seen is None else seen

    def expand(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in done:
            return ""
        done.add(name)
        return include(_fragment(name), done)

    return _INCLUDE.sub(expand, code)


def load(name: str) -> str:
    """The file with its fragments included, without the offset tables that
    speed/scripts.py generates for it (``speed.scripts.source`` is what Redis runs)."""
    return include(resources.files(__package__).joinpath(f"{name}.lua").read_text())
