"""bench.harness' CPU meter counts the API's worker processes (children of the pid
`lb up` records), not only that pid."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bench.harness import CpuMeter, _proc_cpu, _tree_cpu

pytestmark = pytest.mark.unit

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"


def test_a_tree_counts_its_children_and_a_process_does_not() -> None:
    # A parent that only waits while its child burns 0.3 CPU-s, like uvicorn's
    # supervisor and its workers.
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys\n"
            f"subprocess.run([sys.executable, '-c', {BURN!r}])\n"
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
    )
    try:
        meter = CpuMeter({"api": parent.pid, "alone": parent.pid}, trees=("api",))
        start_tree = _tree_cpu(parent.pid)
        # Until the child has burnt its CPU (the parent then blocks on stdin).
        deadline = time.monotonic() + 30
        while _tree_cpu(parent.pid) - start_tree < 0.25:
            assert time.monotonic() < deadline, "the child never burnt its CPU"
            time.sleep(0.05)
        out = meter.stop(events=1)
    finally:
        parent.communicate(b"")
    # The reaped child's CPU is in the tree (cutime); the parent alone barely ran.
    assert out["api_cpu_s"] >= 0.25
    assert out["alone_cpu_s"] < 0.2
    assert _proc_cpu(parent.pid) == 0.0  # gone: nothing to read, no error
