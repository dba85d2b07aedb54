"""Where a Spark application's time went, from its event log.

    python -m bench.spark_profile /tmp/events/local-1234   # or the directory

Run the program with the event log on (no code change needed)::

    PYSPARK_SUBMIT_ARGS="--conf spark.eventLog.enabled=true \
      --conf spark.eventLog.dir=file:///tmp/events pyspark-shell" \
      python -m bench.publish --players 100000 --events 1000000 --no-duckdb

Prints one line per SQL execution (wall time, its description and the stages it
ran) and per stage: wall time, tasks, summed task run / CPU / GC time, input,
output, shuffle read/write bytes, spill. Stage names are Spark's call sites
(``save at ...``, ``count at ...``), which place each stage in the publish code.

Counts instead of seconds (the same on a loaded machine)::

    python -m bench.spark_profile --count-publish

runs a small full publish and the incremental one after it in process (a real
redis-server, the API, Spark local[2] with one shuffle partition like the tests)
and prints their Spark jobs and Delta commits per phase, and the project lines that
launched the jobs (:class:`JobCounter`, usable around any driver code).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _mb(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def load(path: Path) -> list[dict]:
    """Events of one application: a log file, a rolling log directory
    (``eventlog_v2_*``, Spark 4's default: ``events_<n>_*`` files), or a directory of
    applications (the newest is read)."""
    if path.is_dir() and not any(p.name.startswith("events_") for p in path.iterdir()):
        path = max(path.iterdir(), key=lambda p: p.stat().st_mtime)
    if path.is_dir():
        parts = [p for p in path.iterdir() if p.name.startswith("events_")]
        files = sorted(parts, key=lambda p: int(p.name.split("_")[1]))
    else:
        files = [path]
    events = []
    for file in files:
        if file.suffix == ".zstd":  # spark.eventLog.compress (on by default in 4.x)
            text = subprocess.run(
                ["zstd", "-dc", str(file)], check=True, capture_output=True, text=True
            ).stdout
        else:
            text = file.read_text()
        events += [json.loads(line) for line in text.splitlines() if line.strip()]
    return events


def profile(events: list[dict]) -> str:
    stages: dict[int, dict] = {}
    metrics: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    stage_sql: dict[int, int] = {}
    sql: dict[int, dict] = {}
    for e in events:
        kind = e.get("Event", "")
        if kind == "SparkListenerJobStart":
            props = e.get("Properties") or {}
            execution = props.get("spark.sql.execution.id")
            for stage in e.get("Stage IDs", []):
                if execution is not None:
                    stage_sql[stage] = int(execution)
        elif kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            stages[info["Stage ID"]] = info
        elif kind == "SparkListenerTaskEnd":
            m = e.get("Task Metrics") or {}
            s = metrics[e["Stage ID"]]
            s["run_ms"] += m.get("Executor Run Time", 0)
            s["cpu_ms"] += m.get("Executor CPU Time", 0) / 1e6
            s["gc_ms"] += m.get("JVM GC Time", 0)
            s["spill_disk"] += m.get("Disk Bytes Spilled", 0)
            s["spill_mem"] += m.get("Memory Bytes Spilled", 0)
            s["in_bytes"] += (m.get("Input Metrics") or {}).get("Bytes Read", 0)
            s["in_rows"] += (m.get("Input Metrics") or {}).get("Records Read", 0)
            s["out_bytes"] += (m.get("Output Metrics") or {}).get("Bytes Written", 0)
            s["out_rows"] += (m.get("Output Metrics") or {}).get("Records Written", 0)
            r = m.get("Shuffle Read Metrics") or {}
            s["sh_read"] += r.get("Remote Bytes Read", 0) + r.get("Local Bytes Read", 0)
            s["sh_read_rows"] += r.get("Total Records Read", 0)
            w = m.get("Shuffle Write Metrics") or {}
            s["sh_write"] += w.get("Shuffle Bytes Written", 0)
            s["sh_write_rows"] += w.get("Shuffle Records Written", 0)
        elif kind.endswith("SQLExecutionStart"):
            sql[e["executionId"]] = {
                "start": e["time"],
                "description": e.get("description", ""),
            }
        elif kind.endswith("SQLExecutionEnd"):
            if e["executionId"] in sql:
                sql[e["executionId"]]["end"] = e["time"]
    lines = []
    by_sql: dict[int, list[int]] = defaultdict(list)
    for stage, execution in stage_sql.items():
        by_sql[execution].append(stage)
    lines.append("SQL executions (wall s, description, stages):")
    for execution, info in sorted(sql.items()):
        wall = (info.get("end", info["start"]) - info["start"]) / 1000
        if wall < 0.5:
            continue
        ids = sorted(by_sql.get(execution, []))
        lines.append(
            f"  sql {execution:4d} {wall:8.1f} s  {info['description'][:60]!r} "
            f"stages {ids}"
        )
    lines.append("")
    lines.append(
        "stage  sql   wall_s  tasks  run_s  cpu_s   gc_s  in_MB(rows)  out_MB(rows)  "
        "shR_MB(rows)  shW_MB(rows)  spill_MB  name"
    )
    for sid, info in sorted(stages.items()):
        wall = (info.get("Completion Time") or 0) - (info.get("Submission Time") or 0)
        wall /= 1000
        m = metrics[sid]
        if wall < 0.5:
            continue
        lines.append(
            f"{sid:5d} {stage_sql.get(sid, -1):4d} {wall:8.1f} "
            f"{info.get('Number of Tasks', 0):6d} "
            f"{m['run_ms'] / 1000:6.1f} {m['cpu_ms'] / 1000:6.1f} "
            f"{m['gc_ms'] / 1000:6.1f} "
            f"{_mb(m['in_bytes'])}({int(m['in_rows']):,}) "
            f"{_mb(m['out_bytes'])}({int(m['out_rows']):,}) "
            f"{_mb(m['sh_read'])}({int(m['sh_read_rows']):,}) "
            f"{_mb(m['sh_write'])}({int(m['sh_write_rows']):,}) "
            f"{_mb(m['spill_disk'])} {info.get('Stage Name', '')[:60]}"
        )
    lines.append(
        f"all stages: task run {sum(m['run_ms'] for m in metrics.values()) / 1000:.1f}"
        f" s, task CPU {sum(m['cpu_ms'] for m in metrics.values()) / 1000:.1f} s, "
        f"GC {sum(m['gc_ms'] for m in metrics.values()) / 1000:.1f} s"
    )
    return "\n".join(lines)


# ------------------------------------------------------------------ job counting


# Where a job's launching line is looked for (not the venv, not this bench).
PROJECT_PACKAGES = frozenset({"jobs", "speed", "serving", "conf", "api", "cli"})


class JobCounter:
    """Spark jobs and Delta commits of a block of driver code, by phase and by the
    project line that launched them: load-independent counts (a tiny publish's
    time is per-job overhead, so fewer jobs is the lever, bench/RESULTS.md).

    Every Py4J call the driver makes is wrapped: when the JVM's next job id moved
    during the call, the jobs are charged to the innermost frame of this project
    (``jobs/...:line function``) and to the current phase (``PhaseClock.lap``
    names the phase that just ended). Delta commits are the ``_delta_log/*.json``
    files that appeared under ``root``, per table. A bench tool, not production:
    it reads DAGScheduler's job counter through Py4J.
    """

    def __init__(self, spark: Any, root: Path) -> None:
        self.spark = spark
        self.root = root
        self.scheduler = spark.sparkContext._jsc.sc().dagScheduler()
        self.by_phase: dict[str, int] = defaultdict(int)
        self.by_site: dict[str, int] = defaultdict(int)
        self.commits_by_phase: dict[str, dict[str, int]] = {}
        self.pending = 0
        # Stages (created, skipped ones included) per phase: under AQE a job runs
        # one query stage, so a plan of fewer, bigger jobs is not fewer stages
        # (AQE off: 49 jobs / 81 stages against 75 / 120; its wall time, two loaded
        # pairs, went either way: bench/RESULTS.md).
        self.stages_by_phase: dict[str, int] = defaultdict(int)
        self._stage = self.next_stage()
        self._commits = self._delta_commits()
        self._inside = False

    def next_job(self) -> int:
        value = self.scheduler.nextJobId()  # an AtomicInteger, or its int
        return int(value if isinstance(value, int) else value.get())

    def next_stage(self) -> int:
        value = self.scheduler.nextStageId()
        return int(value if isinstance(value, int) else value.get())

    def _delta_commits(self) -> dict[str, int]:
        found: dict[str, int] = defaultdict(int)
        for log in self.root.rglob("_delta_log"):
            table = str(log.parent.relative_to(self.root))
            found[table] = sum(1 for p in log.glob("*.json") if p.stem.isdigit())
        return found

    def _site(self) -> str:
        here = Path(__file__).resolve().parents[1]
        frame = sys._getframe(2)
        while frame is not None:
            path = Path(frame.f_code.co_filename)
            if path.is_relative_to(here):
                rel = path.relative_to(here)
                if rel.parts[0] in PROJECT_PACKAGES:
                    return f"{rel}:{frame.f_lineno} {frame.f_code.co_name}"
            frame = frame.f_back
        return "?"

    def lap(self, phase: str) -> None:
        self.by_phase[phase] += self.pending
        self.pending = 0
        self._inside = True  # this Py4J call is the counter's, not the job's
        try:
            stage = self.next_stage()
        finally:
            self._inside = False
        self.stages_by_phase[phase] += stage - self._stage
        self._stage = stage
        now = self._delta_commits()
        changed = {t: n - self._commits.get(t, 0) for t, n in now.items()}
        changed = {t: n for t, n in changed.items() if n}
        if changed:
            into = self.commits_by_phase.setdefault(phase, {})
            for table, n in changed.items():
                into[table] = into.get(table, 0) + n
        self._commits = now

    @contextmanager
    def watching(self) -> Iterator[JobCounter]:
        from py4j import java_gateway

        from jobs.phase_clock import PhaseClock

        counter = self
        original_call = java_gateway.JavaMember.__call__
        original_lap = PhaseClock.lap

        def call(member: Any, *args: Any) -> Any:
            if counter._inside:
                return original_call(member, *args)
            counter._inside = True
            try:
                before = counter.next_job()
            finally:
                counter._inside = False
            try:
                return original_call(member, *args)
            finally:
                counter._inside = True
                try:
                    started = counter.next_job() - before
                finally:
                    counter._inside = False
                if started:
                    counter.pending += started
                    counter.by_site[counter._site()] += started

        def lap(clock: PhaseClock, phase: str) -> None:
            counter.lap(phase)
            original_lap(clock, phase)

        java_gateway.JavaMember.__call__ = call  # type: ignore[method-assign]
        PhaseClock.lap = lap  # type: ignore[method-assign]
        try:
            yield self
        finally:
            java_gateway.JavaMember.__call__ = original_call  # type: ignore[method-assign]
            PhaseClock.lap = original_lap  # type: ignore[method-assign]
            self.lap("(after the last phase)")

    def report(self, title: str) -> str:
        lines = [
            f"{title}: {sum(self.by_phase.values())} Spark jobs, "
            f"{sum(self.stages_by_phase.values())} stages"
        ]
        for phase, n in self.by_phase.items():
            commits = self.commits_by_phase.get(phase, {})
            if not n and not commits:
                continue
            text = ", ".join(f"{t} {c}" for t, c in sorted(commits.items()))
            total = sum(commits.values())
            stages = self.stages_by_phase.get(phase, 0)
            lines.append(
                f"  {phase:28s} {n:4d} jobs {stages:4d} stages  {total:2d} commits  "
                f"{text}"
            )
        lines.append("  by the line that launched them:")
        for site, n in sorted(self.by_site.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"    {n:4d}  {site}")
        return "\n".join(lines)


def count_publishes(
    workdir: Path,
    players: int = 6,
    events: int = 12,
    conf: dict[str, str] | None = None,
) -> str:
    """A small ``lb publish`` pair in process, counted: ``events`` results over
    ``players`` players through the API into a real redis-server, a full publish,
    ``events // 2`` more, then the incremental publish after it."""
    import httpx
    from fastapi.testclient import TestClient

    from api.main import create_app
    from bench.harness import KEY_ID, SECRET, EventFactory, bench_boards_file, signed
    from conf.settings import Settings
    from jobs.publish import run_publish
    from jobs.spark import get_spark
    from speed.server import RedisServer

    now = datetime.now(UTC)
    server = RedisServer(workdir / "redis").start()
    try:
        settings = Settings(
            redis_url=server.url,
            data_dir=workdir / "lb",
            partitions=4,
            rate_limit="off",
            boards_file=bench_boards_file(workdir, now),
            hmac_keys=f"{KEY_ID}:{SECRET.decode()}",
        )
        factory = EventFactory(players, seed=7, now=now)

        def ingest(n: int, tag: str) -> None:
            with TestClient(create_app(settings)) as client:
                for _ in range(n):
                    body = json.dumps(factory.event(tag)).encode()
                    reply: httpx.Response = client.post(
                        "/v1/score-events",
                        content=body,
                        headers=signed(body),
                    )
                    reply.raise_for_status()

        spark = get_spark(
            "spark-jobs-count",
            shuffle_partitions=int(os.environ.get("LB_SPARK_SHUFFLE_PARTITIONS", "1")),
            driver_memory="2g",
            conf={
                "spark.sql.warehouse.dir": str(workdir / "warehouse"),
                **(conf or {}),
            },
        )
        out = []
        for title, n, full in (
            ("full publish", events, True),
            ("incremental publish", events // 2, False),
        ):
            ingest(n, title[:4])
            counter = JobCounter(spark, settings.delta_dir)
            started = time.perf_counter()
            with counter.watching():
                generation = run_publish(settings, spark=spark, full=full)
            wall = time.perf_counter() - started
            out.append(counter.report(f"{title} ({generation}, {wall:.1f} s)"))
        return "\n\n".join(out)
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", type=Path, nargs="?", help="an event log (or directory)")
    ap.add_argument(
        "--count-publish",
        action="store_true",
        help="count the Spark jobs and Delta commits of a small publish pair",
    )
    ap.add_argument("--players", type=int, default=6)
    ap.add_argument("--events", type=int, default=12)
    ap.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the counted run (e.g. to compare job counts)",
    )
    args = ap.parse_args()
    if args.count_publish:
        conf = dict(item.split("=", 1) for item in args.conf)
        with tempfile.TemporaryDirectory(prefix="spark-jobs-") as tmp:
            print(count_publishes(Path(tmp), args.players, args.events, conf))
    elif args.path is None:
        ap.error("an event log path, or --count-publish")
    else:
        print(profile(load(args.path)))


if __name__ == "__main__":
    main()
