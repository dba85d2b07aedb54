"""What the tests of one worker share, checked around each test (the autouse
``shared_state_guard`` in tests/conftest.py): the working directory, the ``LB_*``
environment variables (read by ``Settings`` and inherited by every ``lb``
subprocess) and the session's SparkSession. Under ``make test`` one worker runs a
whole Spark group in one process: a test that redirected or stopped any of these
would break every test after it on that worker, far from the cause."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

PREFIX = "LB_"
# The tests run so far in this process (the newest last), to name a culprit.
_history: list[str] = []


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


def spark_problem() -> str | None:
    """Why the session's SparkSession cannot serve a test (None: it can)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return "no SparkContext is running (a test stopped the session)"
    try:
        if context._jsc.sc().isStopped():  # type: ignore[union-attr]
            return "the SparkContext was stopped"
    except Exception as exc:  # the gateway or the JVM is gone
        return f"the Spark JVM does not answer: {type(exc).__name__}: {exc}"
    return None


def check_spark_running(nodeid: str) -> None:
    """Fail ``nodeid`` at once, naming the tests before it on this worker, when
    the shared SparkSession was stopped or its JVM died (instead of a confusing
    error deep in a job)."""
    problem = spark_problem()
    if problem is not None:
        pytest.fail(f"{problem}; before {nodeid} this worker ran: {_history[-3:]}")


def ran(nodeid: str) -> None:
    _history.append(nodeid)
