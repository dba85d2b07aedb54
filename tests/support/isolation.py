"""What the tests of one worker share, checked around each test (the autouse
``shared_state_guard`` in tests/conftest.py): the working directory, the ``LB_*``
environment variables (read by ``Settings`` and inherited by every ``lb``
subprocess) and the session's SparkSession. Under ``make test`` one worker runs a
whole Spark group in one process: a test that redirected or stopped any of these
would break every test after it on that worker, far from the cause."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

import pytest
from pyspark.sql import SparkSession

PREFIX = "LB_"
# The tests run so far in this process (the newest last), to name a culprit.
_history: list[str] = []
# When the Py4J connection had to be put back in step (len(_history) then).
_resyncs: list[int] = []


def _lb_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(PREFIX)}


@dataclass(frozen=True)
class SharedState:
    cwd: str
    environ: dict[str, str]

    @classmethod
    def capture(cls) -> SharedState:
        return cls(os.getcwd(), _lb_environ())

    def restore(self) -> list[str]:
        """Undo what changed since ``capture``; returns what that was (empty if
        nothing)."""
        changed = []
        cwd = os.getcwd()
        if cwd != self.cwd:
            changed.append(f"cwd {self.cwd} -> {cwd}")
            os.chdir(self.cwd)
        now = _lb_environ()
        for key in sorted(set(now) | set(self.environ)):
            if now.get(key) != self.environ.get(key):
                changed.append(f"{key}: {self.environ.get(key)!r} -> {now.get(key)!r}")
                if key in self.environ:
                    os.environ[key] = self.environ[key]
                else:
                    del os.environ[key]
        return changed


def _answers_in_step(spark: SparkSession) -> bool:
    """Whether a call through this thread's Py4J connection gets its own answer."""
    nonce = secrets.randbelow(2**31)
    try:
        return bool(
            spark.sparkContext._jvm.java.lang.Integer.toString(nonce) == str(nonce)
        )  # type: ignore[union-attr]
    except Exception:
        return False


def resync_py4j(spark: SparkSession) -> bool:
    """Put this thread's Py4J connection back in step if it is not; returns whether
    it had to.

    pytest-timeout (signal method) fails a test by raising from a SIGALRM handler,
    an exception that is not an ``Exception``: raised while Py4J waits for the
    JVM's answer, Py4J neither reads that answer nor drops the connection, and in
    pinned-thread mode (PySpark's default) the thread keeps using it. Every later
    call then reads the answer to the call before it: the session looks alive, but
    jobs get wrong values (empty tables, missing keys) for every test after it on
    the worker. A fresh connection (a new JVM thread) answers in step again; the
    session is made that thread's active one, as the old thread's was."""
    if _answers_in_step(spark):
        return False
    client = spark.sparkContext._gateway._gateway_client  # type: ignore[union-attr]
    get = getattr(client, "get_thread_connection", None)
    connection = get() if get is not None else None
    if connection is not None:
        connection.close()
    jvm = spark.sparkContext._jvm
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)  # type: ignore[union-attr]
    jvm.org.apache.spark.sql.SparkSession.setDefaultSession(spark._jsparkSession)  # type: ignore[union-attr]
    return True


def spark_problem(spark: SparkSession) -> str | None:
    """Why the session's SparkSession cannot serve a test (None: it can). A Py4J
    connection out of step is put back in step first (``resync_py4j``): before
    that, every answer is the previous call's (a whole run showed it: "the
    SparkContext was stopped" and "'bool' object has no attribute 'isStopped'"
    in turn, test after test)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return "no SparkContext is running (a test stopped the session)"
    try:
        if resync_py4j(spark):
            _resyncs.append(len(_history))
        if context._jsc.sc().isStopped():  # type: ignore[union-attr]
            return "the SparkContext was stopped"
        if not _answers_in_step(spark):
            return "the Spark JVM's answers are out of step (Py4J)"
    except Exception as exc:  # the gateway or the JVM is gone
        return f"the Spark JVM does not answer: {type(exc).__name__}: {exc}"
    return None


def check_spark_running(spark: SparkSession, nodeid: str) -> None:
    """Fail ``nodeid`` at once, naming the tests before it on this worker, when
    the shared SparkSession was stopped or its JVM died (instead of a confusing
    error deep in a job); a Py4J connection left out of step by an interrupted
    test is repaired."""
    problem = spark_problem(spark)
    if problem is not None:
        pytest.fail(f"{problem}; before {nodeid} this worker ran: {_history[-3:]}")


def ran(nodeid: str) -> None:
    _history.append(nodeid)
