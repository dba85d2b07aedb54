"""The last ``lb verify`` result: ``$LB_DATA_DIR/run/verify.json``.

One home for the file: :mod:`jobs.verify` writes it after every run, ``/metrics``
and ``lb status`` read it (:mod:`api.operations`). Here, not in ``jobs/``, so the
API worker reads it without importing the batch layer (and PySpark with it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from conf.settings import Settings

LAST_VERIFY_FILE = "verify.json"


def last_verify_path(settings: Settings) -> Path:
    return settings.run_dir / LAST_VERIFY_FILE


def read_last_verify(settings: Settings) -> dict[str, Any] | None:
    """The last run's result as :func:`write_last_verify` wrote it, or None."""
    try:
        data = json.loads(last_verify_path(settings).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_last_verify(settings: Settings, body: Mapping[str, Any]) -> None:
    """Replace the last run's result atomically (a reader sees old or new)."""
    path = last_verify_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(orjson.dumps(dict(body), option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)
