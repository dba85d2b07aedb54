"""Delta table versions a generation was built from, recorded in its manifest.

Silver is overwritten by every publish and bronze keeps growing, so an analyst who
wants the exact rows behind generation ``gN`` reads each table *as of* the version
recorded here (Delta time travel: ``versionAsOf`` in Spark, ``version=`` in the
``deltalake`` package).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

DELTA_LOG = "_delta_log"


def table_version(path: Path) -> int | None:
    """The latest committed version of the Delta table at ``path`` (None if none).

    Read from the commit files' names (``_delta_log/<version>.json``) rather than
    through Spark: the publish job holds the only writer, so the newest commit file
    is the version it just wrote, and listing a directory costs no Spark job.
    """
    try:
        names = [entry.name for entry in (path / DELTA_LOG).iterdir()]
    except FileNotFoundError:
        return None
    versions = [
        int(name[: -len(".json")])
        for name in names
        if name.endswith(".json") and name[: -len(".json")].isdigit()
    ]
    return max(versions, default=None)


def table_versions(delta_dir: Path, tables: Iterable[str]) -> dict[str, int]:
    """``{table: version}`` for each table that exists under ``delta_dir``."""
    found = {name: table_version(delta_dir / name) for name in tables}
    return {name: v for name, v in found.items() if v is not None}
