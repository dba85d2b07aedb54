"""Spark without console noise: its JVM writes to ``$LB_DATA_DIR/logs/spark.log``."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conf.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_LOG_LEVEL = "WARN"
_LAUNCH_LOCK = threading.Lock()


def spark_log_path(settings: Settings) -> Path:
    return settings.data_dir / "logs" / "spark.log"


def quiet_spark(
    settings: Settings,
    app_name: str = "leaderboard",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Start (or return the running) SparkSession with its console output in a file
    (``conf``: more settings, as for ``get_spark``).

    PySpark launches its JVM with ``launch_gateway(conf, popen_kwargs)``, whose
    ``popen_kwargs`` exist for capturing the JVM's stdout and stderr; the JVM (and
    log4j's console appender in it) then writes to the log file for its whole life,
    while this process's own output stays on the console. Safe to call from a
    background thread.
    """
    from pyspark.core import context as spark_context
    from pyspark.sql import SparkSession

    from jobs.jars import jar_paths
    from jobs.spark import get_spark

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    jar_paths()  # a missing jar is reported on the console, not in the log file
    path = spark_log_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    original = spark_context.launch_gateway

    with open(path, "ab") as log, _LAUNCH_LOCK:

        def launch_to_log(conf: Any = None, popen_kwargs: Any = None) -> Any:
            kwargs = dict(popen_kwargs or {})
            kwargs.update(stdout=log, stderr=subprocess.STDOUT)
            return original(conf, kwargs)

        spark_context.launch_gateway = launch_to_log
        try:
            spark = get_spark(app_name, conf=conf)
        finally:
            spark_context.launch_gateway = original
    spark.sparkContext.setLogLevel(SPARK_LOG_LEVEL)
    return spark
