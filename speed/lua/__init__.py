"""Lua scripts of the speed layer, one per file, loaded as package data."""

from __future__ import annotations

from importlib import resources


def load(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.lua").read_text()
