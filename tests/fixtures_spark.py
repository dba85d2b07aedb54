"""The one session-scoped SparkSession (with Delta) shared by the tests needing it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from jobs.jars import JarsMissing


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from jobs.spark import get_spark

    try:
        session = get_spark(
            "leaderboard-tests", shuffle_partitions=4, driver_memory="2g"
        )
    except JarsMissing as exc:
        pytest.fail(str(exc))
    yield session
    session.stop()
