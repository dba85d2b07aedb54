"""Driver program for the standalone-cluster test: publish two generations (full,
then incremental) of given bronze batches against a Spark master, in its own process
(one SparkContext per process; the tests' shared session is local mode).

Usage: python -m tests.drills.cluster_publish '<json config>'
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The driver is up before the worker's executors have registered with it.
EXECUTORS_TIMEOUT = 180


def main() -> None:
    config = json.loads(sys.argv[1])
    # Executors run the same interpreter and import the project from the checkout.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from jobs.spark import get_spark

    spark = get_spark(
        "cluster-publish",
        master=config["master"],
        shuffle_partitions=4,
        driver_memory="1g",
        conf={
            "spark.executorEnv.PYTHONPATH": str(REPO),
            "spark.executor.memory": config["executor_memory"],
            # One core each: the worker's cores go to that many executors.
            "spark.executor.cores": "1",
            # Blocks of a local checkpoint live on one executor: its tasks would
            # wait up to 3 s (the default) for that executor when the other is
            # free. Here the executors share a host and every task is tiny.
            "spark.locality.wait": "0s",
            # The JIT flags of the driver and executors (get_spark's own flags are
            # their extraJavaOptions; these go before them).
            "spark.driver.defaultJavaOptions": config["java_options"],
            "spark.executor.defaultJavaOptions": config["java_options"],
        },
    )
    from conf.settings import Settings
    from jobs.publish import run_publish
    from tests.support.incremental import append_bronze

    settings = Settings(
        redis_url=config["redis_url"],
        data_dir=Path(config["data_dir"]),
        partitions=2,
        boards_file=Path(config["boards_file"]),
        rate_limit="off",
    )
    # Wait for every executor (plus the driver's block manager): a publish started
    # before would run on whichever registered first.
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus  # type: ignore[union-attr]
    deadline = time.monotonic() + EXECUTORS_TIMEOUT
    while status().size() < 1 + config["executors"] and time.monotonic() < deadline:
        time.sleep(0.1)
    executors = status().size()
    generations = []
    for batch in config["batches"]:
        append_bronze(spark, settings, batch)
        generations.append(
            run_publish(settings, spark=spark, land=False, bucket_target=2)
        )
    print(json.dumps({"generations": generations, "executors": executors}))
    spark.stop()


if __name__ == "__main__":
    main()
