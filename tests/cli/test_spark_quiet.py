"""`lb publish` and `lb demo` keep Spark's output off the console, in a log file."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import redis

from speed.server import RedisServer, free_port
from tests.support.lb import lb, lb_env

SPARK_NOISE = ("WARN", "log4j", "SparkContext", "Setting default log level", "py4j")


@pytest.mark.integration
def test_publish_prints_the_generation_and_no_spark_noise(
    tmp_path: Path, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    env = lb_env(tmp_path, LB_REDIS_URL=redis_server.url, LB_PARTITIONS="2")
    done = lb("publish", env=env, timeout=900)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "g1"
    console = done.stdout + done.stderr
    for noise in SPARK_NOISE:
        assert noise not in console, console
    log = (tmp_path / "lb" / "logs" / "spark.log").read_text()
    assert "Spark" in log  # the JVM's own start-up lines went to the file


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(1800)  # a full demo: ingest, Spark publish, serve, Ctrl-C
def test_demo_serves_the_page_until_ctrl_c(tmp_path: Path) -> None:
    env = lb_env(tmp_path)
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli.main",
            "demo",
            "--players",
            "300",
            "--events",
            "3000",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines = []
    try:
        # Rich wraps at 80 columns when not on a terminal: match on the joined text.
        for line in process.stdout:
            lines.append(line)
            if "Press Ctrl-C" in " ".join(x.strip() for x in lines[-3:]):
                break
        output = "".join(lines)
        assert "Press Ctrl-C" in " ".join(output.split()), output
        match = re.search(r"Open the page: (http://127\.0\.0\.1:\d+/#\S+)", output)
        assert match, output
        assert "exact, live: generation g1" in output
        for noise in SPARK_NOISE:
            assert noise not in output
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=30)
        assert page.status_code == 200 and "Leaderboard" in page.text
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            # Ctrl-C first: the demo stops its own stack on the way out.
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                lb("down", env=dict(env, LB_DATA_DIR=str(tmp_path / "lb" / "demo")))
    assert process.returncode == 0, rest
    assert "Stopped the demo stack" in rest
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    assert (tmp_path / "lb" / "demo" / "logs" / "spark.log").stat().st_size > 0
