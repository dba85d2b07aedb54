"""A Spark standalone cluster on loopback: one master and N workers started from
the pyspark distribution's ``bin/spark-class``, for `make cluster-demo` and the
tests that publish on a cluster (``LB_SPARK_MASTER=spark://...``).

A real deployment runs its own cluster; this one is the same software on one
machine, with the scratch space of the daemons and executors under ``root``."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from jobs.spark import JAVA_17

SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT = 240


class StandaloneFailed(RuntimeError):
    """The master or a worker exited, or the workers did not register in time."""


@dataclass(frozen=True)
class Standalone:
    master_url: str
    env: dict[str, str]
    master_ui: str
    pids: dict[str, int] = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cluster_env(root: Path, daemon_java_options: str | None = None) -> dict[str, str]:
    """The environment of the daemons, and of a driver that should find them;
    ``daemon_java_options``: the master's and workers' JVM flags
    (``SPARK_DAEMON_JAVA_OPTS``)."""
    env = dict(os.environ)
    env["SPARK_HOME"] = str(SPARK_HOME)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_NO_DAEMONIZE"] = "1"
    # Scratch space (shuffle files, fetched jars) of the daemons and executors under
    # ``root``, removed with it, instead of /tmp/spark-*.
    env["SPARK_LOCAL_DIRS"] = str(root / "scratch")
    # The master and workers only schedule: a small heap each.
    env["SPARK_DAEMON_MEMORY"] = "256m"
    if daemon_java_options:
        env["SPARK_DAEMON_JAVA_OPTS"] = daemon_java_options
    if "JAVA_HOME" not in env and JAVA_17.is_dir():
        env["JAVA_HOME"] = str(JAVA_17)
    return env


@contextmanager
def standalone_cluster(
    root: Path,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    timeout: float = START_TIMEOUT,
    daemon_java_options: str | None = None,
) -> Iterator[Standalone]:
    """A master and ``workers`` workers (``cores`` and ``memory`` each), their logs
    and scratch space under ``root``; stopped (terminated, then killed) on exit.
    ``daemon_java_options``: the daemons' JVM flags.

    :raises StandaloneFailed: a daemon exited, or not every worker registered
        within ``timeout`` seconds (the master's log tail is in the message).
    """
    (root / "scratch").mkdir(parents=True, exist_ok=True)
    env = cluster_env(root, daemon_java_options)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port, ui_port = _free_port(), _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs = []
    try:
        master_log = root / "master.log"
        logs.append(master_log.open("wb"))
        procs["master"] = subprocess.Popen(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui_port),
            ],
            env=env,
            stdout=logs[-1],
            stderr=subprocess.STDOUT,
            cwd=root,
        )
        for i in range(workers):
            work = root / f"worker{i}"
            work.mkdir(exist_ok=True)
            logs.append((root / f"worker{i}.log").open("wb"))
            procs[f"worker{i}"] = subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    master_url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    "--webui-port",
                    str(_free_port()),
                    "--work-dir",
                    str(work),
                ],
                env=env,
                stdout=logs[-1],
                stderr=subprocess.STDOUT,
                cwd=root,
            )
        deadline = time.monotonic() + timeout
        while True:
            text = master_log.read_text(errors="replace")
            if len(re.findall(r"Registering worker", text)) >= workers:
                break
            dead = [name for name, p in procs.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise StandaloneFailed(
                    f"standalone cluster did not start (exited: {dead or 'none'}): "
                    f"{text[-2000:]}"
                )
            time.sleep(0.2)
        yield Standalone(
            master_url,
            env,
            f"http://127.0.0.1:{ui_port}",
            {name: p.pid for name, p in procs.items()},
        )
    finally:
        for proc in reversed(procs.values()):
            proc.terminate()
        for proc in reversed(procs.values()):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for fh in logs:
            fh.close()
