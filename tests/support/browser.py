"""Debian's headless Chromium for the page tests (Playwright drives it)."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def require_chromium() -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: run `make chromium` (or make test)")
