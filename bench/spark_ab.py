"""Runtime Spark SQL settings A/B on a small publish pair, in one JVM (issue 22
item 6: the tests' session settings).

    python -m bench.spark_ab --rounds 4 'base:' \\
      'interp:spark.sql.codegen.wholeStage=false,spark.sql.codegen.factoryMode=NO_CODEGEN'

One SparkSession as the tests start it (``tests.support.spark.start_spark``, which
already carries the tests' settings: compare against them by naming them in an
arm) and a real redis-server. Each round runs every arm, the order rotated by one
each round (the first arm of round 0 pays the cold JVM), on a fresh data dir: 12
events over 6 players through the API, a full publish, 6 more, the incremental
publish. Per arm and round one JSON line: the Spark jobs, the JVM's CPU seconds
(``/proc``), this process's CPU, the wall time, the load, and a hash of both
generations' segment files (the same ``now`` per round: equal hashes within a
round mean equal results).

Caveat for CPU: a setting that changes physical planning reaches only the queries
planned after it is set; plans Delta keeps (a table snapshot's cached state) run
as they were planned under the arm before. Codegen on and off mixed that way
(a JFR profile of the "off" arm still showed code generation); compare such
settings in separate JVMs too (a test module run in each of two checkouts with
``-p tests.support.measure``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")


def _jvm_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _segments_hash(segments: Path, generations: list[str]) -> str:
    digest = hashlib.sha256()
    for generation in generations:
        for path in sorted((segments / generation).iterdir()):
            if path.name != "manifest.json":  # it records the build's time
                digest.update(path.name.encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def ingest(settings: Any, factory: Any, n: int, tag: str) -> None:
    """``n`` events of ``factory`` through the API of ``settings``."""
    from fastapi.testclient import TestClient

    from api.main import create_app
    from bench.harness import signed

    with TestClient(create_app(settings)) as client:
        for _ in range(n):
            body = json.dumps(factory.event(tag)).encode()
            reply = client.post("/v1/score-events", content=body, headers=signed(body))
            reply.raise_for_status()


def parse_arm(spec: str) -> tuple[str, dict[str, str]]:
    """``name:key=value,key=value`` -> (name, settings)."""
    name, _, rest = spec.partition(":")
    return name, dict(kv.split("=", 1) for kv in rest.split(",") if kv)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("arms", nargs="+", help="name:key=value,key=value")
    args = ap.parse_args()
    arms = [parse_arm(spec) for spec in args.arms]

    import redis
    from pyspark import SparkContext

    from bench.harness import KEY_ID, SECRET, EventFactory, bench_boards_file
    from conf.settings import Settings
    from jobs.publish import run_publish
    from speed.server import RedisServer
    from tests.support.spark import start_spark

    keys = {key for _, conf in arms for key in conf}
    with tempfile.TemporaryDirectory(prefix="spark-ab-") as tmp:
        root = Path(tmp)
        spark = start_spark(root / "warehouse")
        pid = int(SparkContext._gateway.proc.pid)  # type: ignore[union-attr]
        defaults = {key: spark.conf.get(key, None) for key in keys}
        server = RedisServer(root / "redis").start()
        try:
            for round_ in range(args.rounds):
                shift = round_ % len(arms)
                now = datetime.now(UTC)
                for name, conf in arms[shift:] + arms[:shift]:
                    for key in keys:
                        value = conf.get(key, defaults[key])
                        if value is None:
                            spark.conf.unset(key)
                        else:
                            spark.conf.set(key, value)
                    redis.Redis.from_url(server.url).flushall()
                    work = root / f"r{round_}-{name}"
                    work.mkdir()
                    settings = Settings(
                        redis_url=server.url,
                        data_dir=work / "lb",
                        partitions=4,
                        rate_limit="off",
                        boards_file=bench_boards_file(work, now),
                        hmac_keys=f"{KEY_ID}:{SECRET.decode()}",
                    )
                    factory = EventFactory(6, seed=7, now=now)

                    ingest(settings, factory, 12, "full")
                    scheduler = spark.sparkContext._jsc.sc().dagScheduler()  # type: ignore[union-attr]
                    jobs, jvm = scheduler.nextJobId(), _jvm_cpu(pid)
                    own, started = _own_cpu(), time.monotonic()
                    first = run_publish(settings, spark=spark, full=True)
                    ingest(settings, factory, 6, "incr")
                    second = run_publish(settings, spark=spark, full=False)
                    record = {
                        "round": round_,
                        "arm": name,
                        "jobs": scheduler.nextJobId() - jobs,
                        "jvm_cpu": round(_jvm_cpu(pid) - jvm, 1),
                        "py_cpu": round(_own_cpu() - own, 1),
                        "wall": round(time.monotonic() - started, 1),
                        "load": round(os.getloadavg()[0], 1),
                        "segments": _segments_hash(
                            settings.segments_dir, [first, second]
                        ),
                    }
                    print(json.dumps(record), flush=True)
        finally:
            server.stop()
            spark.stop()


if __name__ == "__main__":
    main()
