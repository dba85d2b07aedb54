"""A test interrupted inside a Py4J call (pytest-timeout's SIGALRM) leaves the
shared SparkSession's connection out of step; the guard before each Spark test
(tests/support/isolation.py) puts it back in step, so the tests after it on the
worker are not handed the answers of the calls before theirs."""

from __future__ import annotations

import signal
from types import FrameType

import pytest
from pyspark.sql import SparkSession

from tests.support.isolation import _answers_in_step, resync_py4j, spark_problem

pytestmark = pytest.mark.integration


class Interrupted(BaseException):
    """Like pytest's ``Failed`` raised by pytest-timeout: not an ``Exception``."""


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted


def test_a_py4j_call_interrupted_by_a_signal_is_put_back_in_step(
    spark: SparkSession,
) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    assert _answers_in_step(spark)
    handler = signal.signal(signal.SIGALRM, _interrupt)
    outer = signal.setitimer(signal.ITIMER_REAL, 0.5)  # pytest-timeout's, if any
    try:
        # Kept, as pytest keeps a failed test's traceback (and so the connection).
        with pytest.raises(Interrupted) as interrupted:
            jvm.java.lang.Thread.sleep(5000)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
        if outer[0]:
            signal.setitimer(signal.ITIMER_REAL, outer[0])
    # The premise: the next call reads the sleep's answer, not its own.
    assert not _answers_in_step(spark)
    # The guard before the next Spark test: back in step, nothing to report.
    assert spark_problem(spark) is None
    assert _answers_in_step(spark)
    assert spark.range(7).count() == 7
    assert SparkSession.getActiveSession() is not None
    assert not resync_py4j(spark)  # in step: nothing to do
    del interrupted
