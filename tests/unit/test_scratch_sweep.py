"""The sorted runs a killed reader left in its scratch directory are removed by the
next reader on the same host; live readers', other hosts' and older code's stay."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.spark import sweep_dead_runs

pytestmark = pytest.mark.unit


def test_runs_of_dead_readers_on_this_host_are_swept(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = int(done.stdout)  # exited: nobody has its pid in the next instant
    host = socket.gethostname()
    dead_runs = tmp_path / f"rows-{host}-{dead}-abc123"
    live_runs = tmp_path / f"rows-{host}-{os.getpid()}-def456"
    other_host = tmp_path / f"rows-elsewhere.example-{dead}-ghi789"
    # A host whose name starts with ours and a dash: not ours.
    longer_host = tmp_path / f"rows-{host}-{dead}-{dead}-jkl012"
    older_code = tmp_path / "rows-k2j3h4"
    for directory in (dead_runs, live_runs, other_host, longer_host, older_code):
        (directory / "_run=0").mkdir(parents=True)
        (directory / "_run=0" / "part-0.parquet").write_bytes(b"x")
    assert sweep_dead_runs(tmp_path) == [dead_runs]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (live_runs, other_host, longer_host, older_code)
    )
    assert sweep_dead_runs(tmp_path) == []
