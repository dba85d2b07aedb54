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
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections import defaultdict
from pathlib import Path


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", type=Path, help="an event log file or its directory")
    print(profile(load(ap.parse_args().path)))


if __name__ == "__main__":
    main()
