"""Driver program for the standalone-cluster test: publish two generations (full,
then incremental) of given bronze batches against a Spark master, in its own process
(one SparkContext per process; the tests' shared session is local mode).

Usage: python -m tests.jobs.cluster_publish '<json config>'
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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
            "spark.executor.memory": "768m",
            "spark.executor.cores": "1",
        },
    )
    from conf.settings import Settings
    from jobs.publish import run_publish
    from tests.jobs.test_incremental import append_bronze

    settings = Settings(
        redis_url=config["redis_url"],
        data_dir=Path(config["data_dir"]),
        partitions=2,
        boards_file=Path(config["boards_file"]),
        rate_limit="off",
    )
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()  # type: ignore[union-attr]
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
