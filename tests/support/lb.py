"""The ``lb`` CLI as a subprocess, as an operator runs it (the one copy of the
helper: cli, e2e and drill tests import it from here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.settings import open_windows_env
from tests.support.spark import SUBPROCESS_ENV

LB_TIMEOUT = 120.0


def lb(
    *args: str, env: dict[str, str] | None = None, timeout: float = LB_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run ``lb ARGS`` (``python -m cli.main``) to completion; never raises on a
    non-zero exit (tests assert on ``returncode``, ``stdout``, ``stderr``)."""
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def lb_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This process's environment without any ``LB_*`` setting, data under
    ``tmp_path/lb``, the tests' Spark settings (``SUBPROCESS_ENV``), plus
    ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LB_")}
    env["LB_DATA_DIR"] = str(tmp_path / "lb")
    env.update(SUBPROCESS_ENV)
    env.update(extra)
    return env


def stack_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """Environment of an ``lb up`` stack in ``data_dir``: no rate limit, windows
    open for events dated November 2026, its own Redis (no ``LB_REDIS_URL``), the
    tests' Spark settings (``SUBPROCESS_ENV``)."""
    env = dict(
        os.environ,
        LB_DATA_DIR=str(data_dir),
        LB_RATE_LIMIT="off",
        **{**SUBPROCESS_ENV, **extra},
    )
    env |= open_windows_env(data_dir.parent / "conf")  # events dated November 2026
    env.pop("LB_REDIS_URL", None)
    return env


def running(pid: int) -> bool:
    """Whether ``pid`` is alive (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"
