"""The data dir's publish lock: one publisher at a time per ``LB_DATA_DIR``.

Everything that numbers and writes a generation takes it: ``lb publish``, ``lb
replay``, ``lb season close`` and each step of the Airflow DAG ``publish_generation``
(:mod:`jobs.publish_steps`). A second publisher would race the first for the same
generation number, so it fails fast (:class:`PublishBusy`) instead of waiting.

It is an ``flock`` on ``<run_dir>/publish.lock``: the kernel releases it when the
holder's file is closed, which includes the holder dying (SIGKILL, OOM), so a crashed
publisher never leaves the data dir locked. The lock belongs to an open file, not a
process: a second :func:`publish_lock` in the same process is refused too.
"""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conf.settings import Settings

LOCK_FILE = "publish.lock"
SCRATCH = "scratch"


def scratch_dir(settings: Settings, job: str = "publish") -> Path:
    """Where ``job`` keeps files for its life (the sorted runs of jobs/spark.py
    ``rows_in_order``), each read removing its own when done: ``run/scratch/<job>``.
    The publisher's (``publish``) is emptied whenever the publish lock is taken:
    what is there then was left by a publisher that died. A job that runs beside
    a publish without its lock (``lb rebuild``, ``lb verify``) has a directory of
    its own, which taking the lock leaves alone; what such a job leaves there when
    it is killed, the next reader on the host removes (jobs/spark.py
    ``sweep_dead_runs``)."""
    return settings.run_dir / SCRATCH / job


class PublishBusy(RuntimeError):
    """Another publisher holds the data dir's publish lock.

    ``lb`` maps it to exit code 5 (busy) with :attr:`hint` (cli/main.py)."""

    exit_code = 5
    hint = "wait for it to finish (one publish at a time per LB_DATA_DIR)"


@contextmanager
def publish_lock(settings: Settings) -> Iterator[None]:
    """Hold the publish lock of ``settings.data_dir`` for the ``with`` body.

    :raises PublishBusy: another publisher holds it (never waits).
    """
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    with open(settings.run_dir / LOCK_FILE, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PublishBusy(
                f"another `lb publish` (or replay, season close or publish DAG step) "
                f"is running for {settings.data_dir}"
            ) from None
        shutil.rmtree(scratch_dir(settings), ignore_errors=True)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
