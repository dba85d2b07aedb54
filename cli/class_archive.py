"""`python -m cli.class_archive` (run by `make setup`): write this environment's
class-data archive for the Spark driver JVM (jobs/class_archive.py), once.

A JVM started with ``-XX:ArchiveClassesAtExit`` runs what every driver runs: a
few hundred synthetic events (`lb demo`'s: redeliveries, corrections, ties)
through the signed batch endpoint into a throwaway redis-server, a full publish,
more events, an incremental publish. When it exits it writes the classes it
loaded; the file is renamed into place only once the JVM has ended, so a driver
never maps half an archive. A no-op when the archive is there (``--force``
writes it again).

Spark works without the archive, only slower to start: when the run fails, this
says why on stderr and exits 0, so `make setup` and the demo go on.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

from jobs.class_archive import archive_path, dump_java_options, superseded

KEY_ID, SECRET = "class-archive", "class-archive-secret"
PLAYERS = 40
# Events before the full publish, then before the incremental one.
ROUNDS = (240, 120)
BATCH = 60
JVM_EXIT_SECONDS = 300
# What a failed run shows of the driver's log (characters, from its end).
LOG_TAIL = 4000


def _publish_pair(workdir: Path, target: Path) -> None:
    """The publish pair in a driver JVM that writes its classes to ``target`` at
    exit; returns once that JVM has ended."""
    from fastapi.testclient import TestClient
    from pyspark import SparkContext

    from api.main import create_app
    from cli.demo import demo_boards, signed_batch, synthetic_events
    from cli.quiet import quiet_spark, spark_log_path
    from conf.settings import Settings
    from jobs.publish import run_publish
    from speed.server import RedisServer

    boards = workdir / "boards.yaml"
    boards.write_text(demo_boards(datetime.now(UTC)))
    server = RedisServer(workdir / "redis").start()
    settings: Settings | None = None
    try:
        settings = Settings(
            redis_url=server.url,
            data_dir=workdir / "lb",
            partitions=2,
            rate_limit="off",
            boards_file=boards,
            hmac_keys=f"{KEY_ID}:{SECRET}",
        )
        # The tests' Spark settings (PYSPARK_SUBMIT_ARGS) would replace the
        # dump option below: this driver is production's. Its console output goes
        # to the work dir's log (shown when the run fails).
        os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
        spark = quiet_spark(
            settings,
            "class-archive",
            conf={"spark.driver.defaultJavaOptions": dump_java_options(target)},
        )
        events = synthetic_events(PLAYERS, sum(ROUNDS))
        with TestClient(create_app(settings)) as client:
            for round_events, full in zip(ROUNDS, (True, False), strict=True):
                for _ in range(round_events // BATCH):
                    batch = list(islice(events, BATCH))
                    reply = client.post(
                        "/v1/score-events:batch",
                        **signed_batch(SECRET.encode(), KEY_ID, batch),
                    )
                    reply.raise_for_status()
                run_publish(settings, spark=spark, full=full)
        gateway = SparkContext._gateway
        spark.stop()
        # The JVM writes the archive as it exits, which it does when its stdin
        # (a pipe from this process) closes.
        proc = getattr(gateway, "proc", None)
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
            proc.wait(timeout=JVM_EXIT_SECONDS)
    except BaseException:
        log = spark_log_path(settings) if settings is not None else None
        if log is not None and log.is_file():
            print(log.read_text(errors="replace")[-LOG_TAIL:], file=sys.stderr)
        raise
    finally:
        server.stop()


def write_archive(force: bool = False) -> Path | None:
    """Write this environment's archive unless it is there, then remove the ones
    it replaces (jobs/class_archive.py ``superseded``); its path, or None when
    Java, pyspark or the Delta jars cannot be found.

    :raises Exception: whatever the publish pair raised; then nothing is written.
    """
    target = archive_path()
    if target is None or (target.is_file() and not force):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # A JVM cannot map one archive while it dumps another, and get_spark maps
    # this one while it exists (a driver that has it mapped keeps its copy).
    target.unlink(missing_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        with tempfile.TemporaryDirectory(prefix="class-archive-") as tmp:
            _publish_pair(Path(tmp), partial)
        if not partial.is_file():
            raise RuntimeError(f"the driver JVM ended without writing {partial}")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    for old in superseded(target):
        old.unlink(missing_ok=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cli.class_archive", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--force", action="store_true", help="write it again")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        target = write_archive(force=args.force)
    except Exception:  # noqa: BLE001 - an optimisation: Spark runs without it
        traceback.print_exc()
        print(
            "class-data archive not written (Spark starts without it, slower)",
            file=sys.stderr,
        )
        return 0
    if target is None:
        print(
            "no class-data archive: Java, pyspark or the Delta jars not found",
            file=sys.stderr,
        )
    else:
        print(f"class-data archive: {target} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
