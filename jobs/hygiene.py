"""Delta hygiene: documented tables, compaction, and a VACUUM that keeps every
generation that must stay reproducible.

* **Documentation in the tables**: each table gets the first paragraph of its
  section in ``docs/TABLES.md`` as its comment, each column the "meaning" cell of
  its row (``ALTER TABLE ... ALTER COLUMN ... COMMENT``, only where it differs), and
  the retention properties below. ``docs/TABLES.md`` stays the one place the
  tables are described.
* **OPTIMIZE** compacts the small files landing and merging leave (bin-packing;
  bronze keeps its position order within a partition, so file skipping on position
  still works for the incremental delta).
* **VACUUM** removes files no table version still needs only when they were removed
  longer ago than the retention, and the retention is computed so the table
  versions recorded in the manifest (``tableVersions``) of every protected
  generation stay readable by time travel: the newest ``retained_generations``, the
  speed layer's bases and every award snapshot's generation (kept forever). It is
  the age of the oldest protected generation plus a day, and never below Delta's
  default of 7 days. The log is kept as long (``delta.logRetentionDuration``).

Schema changes (a column added) go through ``mergeSchema`` on write, so tables are
extended in place, never dropped.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

TABLES_DOC = Path(__file__).resolve().parents[1] / "docs" / "TABLES.md"
MIN_RETENTION_HOURS = 168  # Delta's own default and safety floor
MARGIN_HOURS = 24
ROW = re.compile(r"^\| ([a-z_]+) \| [^|]+ \| (.+) \|\s*$")


@dataclass(frozen=True, slots=True)
class TableDoc:
    name: str
    comment: str
    columns: dict[str, str] = field(default_factory=dict)


def parse_tables_doc(text: str) -> dict[str, TableDoc]:
    """``## <table>`` sections of docs/TABLES.md: first paragraph and column rows."""
    docs: dict[str, TableDoc] = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, _, body = section.partition("\n")
        name = heading.strip()
        if not re.fullmatch(r"[a-z_]+", name):
            continue
        paragraphs = [p.strip() for p in body.strip().split("\n\n") if p.strip()]
        comment = " ".join(paragraphs[0].split()) if paragraphs else ""
        columns = {}
        for line in body.splitlines():
            match = ROW.match(line)
            if match and match.group(1) != "column":
                columns[match.group(1)] = match.group(2).replace("\\|", "|").strip()
        docs[name] = TableDoc(name, comment, columns)
    return docs


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def retention_hours(published: Iterable[datetime], now: datetime | None = None) -> int:
    """Hours that keep every protected generation's table versions readable."""
    now = now or datetime.now(UTC)
    oldest = min(published, default=now)
    age = max(0.0, (now - oldest).total_seconds() / 3600)
    return max(MIN_RETENTION_HOURS, math.ceil(age) + MARGIN_HOURS)


def apply_docs(
    spark: SparkSession, path: Path, doc: TableDoc, retention: int
) -> list[str]:
    """Comment, properties and column comments of one table; returns the columns
    whose comment changed."""
    target = f"delta.`{path}`"
    days = math.ceil(retention / 24)
    spark.sql(
        f"ALTER TABLE {target} SET TBLPROPERTIES ("
        f"'comment' = {_quote(doc.comment)}, "
        f"'delta.logRetentionDuration' = 'interval {days} days', "
        f"'delta.deletedFileRetentionDuration' = 'interval {days} days', "
        "'lb.documentation' = 'docs/TABLES.md')"
    )
    schema = spark.read.format("delta").load(str(path)).schema
    changed = []
    for column in schema.fields:
        text = doc.columns.get(column.name)
        if text is None or column.metadata.get("comment") == text:
            continue
        spark.sql(
            f"ALTER TABLE {target} ALTER COLUMN `{column.name}` COMMENT {_quote(text)}"
        )
        changed.append(column.name)
    return changed


@dataclass(slots=True)
class MaintenanceReport:
    retention_hours: int
    tables: dict[str, dict[str, object]] = field(default_factory=dict)


def protected_published_at(
    manifests: Mapping[str, str], protected: set[str]
) -> list[datetime]:
    """publishedAt of the protected generations (manifest texts by generation)."""
    out = []
    for generation, text in manifests.items():
        if generation not in protected:
            continue
        stamp = json.loads(text).get("publishedAt")
        if stamp:
            out.append(datetime.fromisoformat(stamp.replace("Z", "+00:00")))
    return out


def run_maintenance(
    spark: SparkSession,
    delta_dir: Path,
    protected_times: Iterable[datetime],
    *,
    optimize: bool = True,
    vacuum: bool = True,
    doc_path: Path = TABLES_DOC,
) -> MaintenanceReport:
    """Document, compact and vacuum every documented Delta table under
    ``delta_dir``."""
    from delta.tables import DeltaTable

    retention = retention_hours(protected_times)
    docs = parse_tables_doc(doc_path.read_text()) if doc_path.exists() else {}
    report = MaintenanceReport(retention)
    for name, doc in sorted(docs.items()):
        # Spark resolves a relative path against the JVM's working directory, which
        # need not be Python's (LB_DATA_DIR defaults to a relative path).
        path = (delta_dir / name).resolve()
        if not (path / "_delta_log").is_dir():
            continue
        entry: dict[str, object] = {
            "commented": apply_docs(spark, path, doc, retention)
        }
        table = DeltaTable.forPath(spark, str(path))
        if optimize:
            metrics = table.optimize().executeCompaction().first()
            entry["optimized"] = metrics is not None
        if vacuum:
            table.vacuum(float(retention))
            entry["vacuumed_hours"] = retention
        report.tables[name] = entry
    return report
