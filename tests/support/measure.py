"""Per-test cost in figures a shared machine does not distort as much as wall time
(issue 22 item 6): an opt-in pytest plugin, not loaded by ``make test``.

    PYTHONPATH=$PWD .venv/bin/pytest tests/jobs/test_x.py -p tests.support.measure

appends one JSON line per test to ``$MEASURE_OUT`` (default
``.cache/measure.jsonl``): wall seconds; this process's CPU; the CPU of its reaped
children (an ``lb`` subprocess and whatever it waited for); the CPU of the
session's Spark JVM (from ``/proc``); the number of Spark jobs the test ran in it;
and the 1-minute load average. Not counted: JVMs a subprocess left to exit on
their own (a PySpark driver does not wait for its JVM), processes still running
(a session's cluster or stack).
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TICK = os.sysconf("SC_CLK_TCK")


def _spark() -> tuple[Any, int | None]:
    """The running SparkContext and its JVM's pid (None, None without one)."""
    try:
        from pyspark import SparkContext
    except ImportError:
        return None, None
    context = SparkContext._active_spark_context
    if context is None:
        return None, None
    proc = getattr(SparkContext._gateway, "proc", None)
    return context, None if proc is None else int(proc.pid)


def _jvm_cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def _jobs(context: Any) -> int:
    if context is None:
        return 0
    # A test that timed out inside a Py4J call can leave the context stopped (its
    # Scala context null): count nothing rather than end the run (INTERNALERROR).
    scala = None if context._jsc is None else context._jsc.sc()
    if scala is None or scala.dagScheduler() is None:
        return 0
    value = scala.dagScheduler().nextJobId()
    return int(value if isinstance(value, int) else value.get())


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Iterator[None]:
    context, pid = _spark()
    jobs, jvm = _jobs(context), _jvm_cpu(pid)
    own, children = _cpu()
    started = time.monotonic()
    try:
        return (yield)
    finally:
        wall = time.monotonic() - started
        own_after, children_after = _cpu()
        context_after, pid_after = _spark()
        if pid_after != pid:  # the test started the session: count from zero
            jobs, jvm = 0, 0.0
        record = {
            "test": item.nodeid,
            "wall": round(wall, 1),
            "cpu": round(own_after - own, 1),
            "children_cpu": round(children_after - children, 1),
            "jvm_cpu": round(_jvm_cpu(pid_after) - jvm, 1),
            "spark_jobs": _jobs(context_after) - jobs,
            "load": round(os.getloadavg()[0], 1),
        }
        out = Path(os.environ.get("MEASURE_OUT", ".cache/measure.jsonl"))
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a") as sink:
            sink.write(json.dumps(record) + "\n")
