"""The data dir's publish lock (jobs/publish_lock.py): one holder at a time, in this
process or another; released when the holder leaves or dies; what `lb` makes of it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli.main import EXIT_BUSY, explain
from conf.settings import Settings
from jobs.publish_lock import PublishBusy, publish_lock, scratch_dir

REPO = Path(__file__).resolve().parents[2]


def _settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "lb")


@pytest.mark.unit
def test_second_holder_is_refused_until_the_first_leaves(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    with publish_lock(settings):
        # A second open of the same lock file, in the same process: refused.
        with pytest.raises(PublishBusy) as busy, publish_lock(settings):
            pytest.fail("two holders at once")
        assert str(settings.data_dir) in str(busy.value)
    with publish_lock(settings):  # released on leaving the block
        pass


@pytest.mark.unit
def test_released_when_the_body_raises(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    with pytest.raises(ValueError), publish_lock(settings):
        raise ValueError("publish failed")
    with publish_lock(settings):
        pass


@pytest.mark.unit
def test_taking_the_lock_removes_a_dead_publishers_scratch(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    left = scratch_dir(settings) / "log-rows-x" / "part-00000.parquet"
    left.parent.mkdir(parents=True)
    left.write_bytes(b"runs of a publisher killed mid-read")
    with publish_lock(settings):
        assert not scratch_dir(settings).exists()
    assert (settings.run_dir / "publish.lock").exists()


@pytest.mark.unit
def test_lb_maps_busy_to_exit_code_5_with_a_hint(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    with publish_lock(settings), pytest.raises(PublishBusy) as busy:
        with publish_lock(settings):
            pass
    failure = explain(busy.value)
    assert failure is not None
    assert failure.code == EXIT_BUSY == 5
    assert "another `lb publish`" in failure.message
    assert failure.hint and "wait" in failure.hint


HOLDER = textwrap.dedent(
    """
    import sys, time
    from conf.settings import Settings
    from jobs.publish_lock import publish_lock

    with publish_lock(Settings(data_dir=sys.argv[1])):
        print("held", flush=True)
        time.sleep(600)
    """
)


def _holder(settings: Settings) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(settings.data_dir)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "held"
    return process


@pytest.mark.unit
def test_holder_in_another_process_blocks_and_its_crash_releases(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path)
    holder = _holder(settings)
    try:
        with pytest.raises(PublishBusy), publish_lock(settings):
            pytest.fail("held by another process")
        # The holder dies without leaving its block (SIGKILL: no finally, no
        # unlock): the kernel drops the lock with its open files.
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert (settings.run_dir / "publish.lock").exists()  # the file stays, harmless
    with publish_lock(settings):
        pass
