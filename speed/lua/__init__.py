"""Lua scripts of the speed layer, one per file, loaded as package data.

A script may include a shared fragment of ``lib/`` with a line
``--#include <name>``: :func:`load` puts ``lib/<name>.lua`` in its place (the token
bucket of every rate limit is one such fragment).
"""

from __future__ import annotations

import re
from importlib import resources

_INCLUDE = re.compile(r"^--#include ([a-z_]+)$", re.M)


def _fragment(name: str) -> str:
    return resources.files(__package__).joinpath("lib", f"{name}.lua").read_text()


def load(name: str) -> str:
    code = resources.files(__package__).joinpath(f"{name}.lua").read_text()
    return _INCLUDE.sub(lambda m: _fragment(m.group(1)), code)
