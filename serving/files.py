"""Files of the serving format: Arrow IPC writes and reads, checksums, fsync."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

# Names starting with this are work in progress: never read, removed by repair.
TMP_PREFIX = ".tmp-"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_arrow(path: Path, table: pa.Table) -> str:
    """Write ``table`` as an Arrow IPC file of one uncompressed record batch
    (memory-mappable, byte-reproducible), fsync it; returns its sha256."""
    table = table.combine_chunks()
    with pa.OSFile(str(path), "wb") as sink:
        with ipc.new_file(sink, table.schema) as writer:
            for batch in table.to_batches():
                writer.write_batch(batch)
    with path.open("rb") as fh:
        os.fsync(fh.fileno())
    return sha256_file(path)


def read_arrow(path: Path) -> pa.Table:
    """A memory-mapped Arrow IPC file, one chunk per column (files are written as
    one batch, so combining is normally free)."""
    table = ipc.open_file(pa.memory_map(str(path), "r")).read_all()
    if any(c.num_chunks > 1 for c in table.columns):
        return table.combine_chunks()
    return table


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so a reader sees the old file or the whole new one."""
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}.{uuid.uuid4().hex}")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
