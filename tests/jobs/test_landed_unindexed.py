"""Landed records without their contribution value (``rc``: logged before the
landed records index existed) inside the record lifetime: no generation can write
a complete index while they are, and the publish must not read the whole lifetime
of the log again per generation to find that out (jobs/record_indexes.py,
jobs/landed.py): the first finds it (a sorted read shared with the contributions
index, or an aggregate in Spark), the manifest names the newest such record, and
the next ones read nothing for the landed index until it leaves the lifetime."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from jobs import landed, record_indexes
from jobs.record_indexes import write_record_indexes
from serving.manifest import MANIFEST_FILE
from speed.server import RedisServer
from tests.support.incremental import OCCURRED, append_bronze, log_lines, make_settings

pytestmark = pytest.mark.integration


def _history(received: list[int]) -> list[dict[str, Any]]:
    return [
        {
            "player": "a" if i % 2 else "b",
            "match": i,
            "revision": 1,
            "points": i,
            "occurred": OCCURRED[2],
            "region": "eu",
            "late": False,
            "kind": 0,
            "received": ms,
        }
        for i, ms in enumerate(received)
    ]


def test_an_index_that_cannot_be_complete_is_found_once(
    spark: SparkSession, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = int(time.time() * 1000)
    taken: list[int] = []
    take = landed.LandedIndexWriter.take

    def counted(self: landed.LandedIndexWriter, *args: Any) -> None:
        taken.append(args[1])
        take(self, *args)

    monkeypatch.setattr(landed.LandedIndexWriter, "take", counted)
    reads: list[int] = []
    rows_in_order = record_indexes.log_rows_in_order

    def counted_reads(*args: Any) -> Any:
        reads.append(1)
        return rows_in_order(*args)

    monkeypatch.setattr(record_indexes, "log_rows_in_order", counted_reads)
    # Two batches of records without rc, all received within the lifetime.
    lines = log_lines(_history([now - 9_000, now - 8_000, now - 7_000, now - 6_000]))
    with tempfile.TemporaryDirectory(prefix="landed-unindexed-") as tmp:
        settings = make_settings(Path(tmp), redis_server)
        settings.segments_dir.mkdir(parents=True)

        def generation(
            name: str, number: int, *, landed_entry: bool = True
        ) -> dict[str, Any]:
            """Both indexes of ``name`` over the bronze appended so far, and its
            manifest (``landed_entry=False``: as a generation published before the
            landed index existed, which names none)."""
            boundary = {
                p: max(r["position"] for r in appended if r["partition"] == p)
                for p in {r["partition"] for r in appended}
            }
            directory = settings.segments_dir / name
            directory.mkdir()
            reads.clear()
            taken.clear()
            entry, contributions = write_record_indexes(
                settings, spark, name, number, boundary, directory
            )
            manifest = {
                "generation": name,
                "complete": True,
                "boundary": {str(p): v for p, v in boundary.items()},
                "contributions": contributions,
                **({"landed": entry} if landed_entry and entry else {}),
            }
            (directory / MANIFEST_FILE).write_text(json.dumps(manifest))
            return {"entry": entry, "reads": len(reads), "taken": len(taken)}

        appended = lines[:2]
        append_bronze(spark, settings, appended)
        # g1: one read, shared by both indexes: the landed index takes every record
        # and keeps the newest one's time.
        g1 = generation("g1", 1, landed_entry=False)
        assert g1 == {
            "entry": {"unindexedThroughMs": now - 8_000},
            "reads": 1,
            "taken": 2,
        }

        appended = lines
        append_bronze(spark, settings, lines[2:])
        # g2 over g1, which names nothing (as if published before): the
        # contributions index reads the delta; the landed index finds the records
        # without rc by an aggregate over the lifetime, not a read of each record.
        g2 = generation("g2", 2)
        assert g2 == {
            "entry": {"unindexedThroughMs": now - 6_000},
            "reads": 1,
            "taken": 0,
        }

        # g3 over g2, which names its newest such record, still within the
        # lifetime: no read for the landed index at all.
        append_bronze(spark, settings, [])
        g3 = generation("g3", 3)
        assert g3 == {
            "entry": {"unindexedThroughMs": now - 6_000},
            "reads": 1,
            "taken": 0,
        }
        # The premise of g3's one read: the contributions index's, of an empty delta.
        assert json.loads((settings.segments_dir / "g3" / MANIFEST_FILE).read_text())[
            "contributions"
        ]
