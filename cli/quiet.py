"""Spark without console noise: its JVM writes to ``$LB_DATA_DIR/logs/spark.log``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from conf.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_LOG_LEVEL = "WARN"


def spark_log_path(settings: Settings) -> Path:
    return settings.data_dir / "logs" / "spark.log"


def quiet_spark(settings: Settings, app_name: str = "leaderboard") -> SparkSession:
    """Start (or return the running) SparkSession with its log in a file.

    The JVM that PySpark launches inherits this process's stdout and stderr, and
    log4j's console appender writes to them; pointing descriptors 1 and 2 at the log
    file while the JVM starts sends everything it ever prints there. Python's own
    output is back on the console as soon as the session exists.
    """
    from pyspark.sql import SparkSession

    from jobs.jars import jar_paths
    from jobs.spark import get_spark

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    jar_paths()  # a missing jar is reported on the console, not in the log file
    path = spark_log_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    saved = (os.dup(1), os.dup(2))
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        spark = get_spark(app_name)
        spark.sparkContext.setLogLevel(SPARK_LOG_LEVEL)
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log_fd):
            os.close(fd)
    return spark
