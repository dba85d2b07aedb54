"""The Spark driver's class-data archive (jobs/class_archive.py): named after what
it depends on, passed to the driver only when written, harmless when it does not
fit, and mapped by this session's own driver JVM once `make setup` wrote it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pyspark import SparkContext
from pyspark.sql import SparkSession

from jobs import class_archive
from jobs.jars import ARTIFACTS, JARS_DIR, jar_name

pytestmark = pytest.mark.integration


def _fake_jars(root: Path) -> Path:
    root.mkdir()
    for artifact in ARTIFACTS:
        (root / jar_name(artifact)).write_bytes(b"jar")
    return root


def test_the_archive_is_named_after_the_jars_it_was_dumped_with(tmp_path: Path) -> None:
    jars = _fake_jars(tmp_path / "jars")
    before = class_archive.archive_path(jars)
    assert before is not None and before.parent == class_archive.ARCHIVE_DIR
    assert class_archive.archive_path(jars) == before
    # A changed jar (a new Delta release) makes the old archive unusable: the JVM
    # would refuse it, so it gets another name and is written again.
    (jars / jar_name(ARTIFACTS[0])).write_bytes(b"another jar")
    assert class_archive.archive_path(jars) not in (None, before)
    # A missing jar: no archive at all (Spark would not start either).
    (jars / jar_name(ARTIFACTS[1])).unlink()
    assert class_archive.archive_path(jars) is None


def test_the_driver_maps_the_archive_only_once_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jars = _fake_jars(tmp_path / "jars")
    monkeypatch.setattr(class_archive, "ARCHIVE_DIR", tmp_path / "cds")
    assert class_archive.driver_java_options(jars) == ""
    archive = class_archive.archive_path(jars)
    assert archive is not None
    archive.parent.mkdir()
    archive.write_bytes(b"")
    options = class_archive.driver_java_options(jars).split()
    assert f"-XX:SharedArchiveFile={archive}" in options
    assert "-Xshare:auto" in options


def test_an_archive_that_does_not_fit_is_ignored_in_silence(tmp_path: Path) -> None:
    # An archive from another JDK build or a changed jar: the JVM runs without
    # it, and says nothing on stdout, where `lb` writes its JSON.
    broken = tmp_path / "broken.jsa"
    broken.write_bytes(b"not an archive" * 100)
    java = class_archive._java()
    assert java is not None
    options = f"-XX:SharedArchiveFile={broken} -Xshare:auto {class_archive.QUIET}"
    done = subprocess.run(
        [str(java), *options.split(), "-version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "version" in done.stderr and "cds" not in done.stderr.lower()


def test_this_sessions_driver_maps_the_archive(spark: SparkSession) -> None:
    archive = class_archive.archive_path(JARS_DIR)
    assert archive is not None
    if not archive.is_file():
        reason = f"no class-data archive at {archive}: `make setup` writes it"
        if os.environ.get("LB_REQUIRE_OPS_TOOLS"):
            pytest.fail(reason)
        pytest.skip(reason)
    proc = getattr(SparkContext._gateway, "proc", None)
    assert proc is not None, "the session's JVM was not started by this process"
    # The JVM maps an archive it accepted; one it refused is never mapped.
    maps = Path(f"/proc/{proc.pid}/maps").read_text()
    assert str(archive) in maps


def test_force_writes_it_again_and_removes_the_archives_it_replaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The JVM part (a publish pair dumping its classes) runs in every `make setup`;
    # here the writer's file handling around it, with a stand-in for that run.
    from cli import class_archive as writer

    monkeypatch.setattr(class_archive, "ARCHIVE_DIR", tmp_path / "cds")
    target = class_archive.archive_path(JARS_DIR)
    assert target is not None
    tag = target.name.split("-")[2]
    target.parent.mkdir()
    target.write_bytes(b"current")
    same_env_older = target.with_name(f"spark-driver-{tag}-{'0' * 16}.jsa")
    untagged = target.with_name(f"spark-driver-{'1' * 16}.jsa")
    other_env = target.with_name(f"spark-driver-ffffffff-{'2' * 16}.jsa")
    for path in (same_env_older, untagged, other_env):
        path.write_bytes(b"old")
    dumps: list[Path] = []

    def dump(workdir: Path, partial: Path) -> None:
        # The dumping JVM must not be handed the old archive (get_spark maps it
        # while it exists, and a JVM cannot map one archive and dump another).
        assert not target.exists()
        assert class_archive.driver_java_options(JARS_DIR) == ""
        dumps.append(partial)
        partial.write_bytes(b"new")

    monkeypatch.setattr(writer, "_publish_pair", dump)
    assert writer.write_archive() == target and dumps == []  # there: a no-op
    assert writer.write_archive(force=True) == target
    assert len(dumps) == 1 and not dumps[0].exists()  # renamed into place
    assert target.read_bytes() == b"new"
    # Gone: the same environment's archive for older jars and the untagged one
    # of older code; another environment's (the Airflow venv's) stays.
    assert sorted(p.name for p in target.parent.iterdir()) == sorted(
        [target.name, other_env.name]
    )


def test_a_failed_dump_leaves_no_archive_and_setup_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import class_archive as writer

    monkeypatch.setattr(class_archive, "ARCHIVE_DIR", tmp_path / "cds")
    target = class_archive.archive_path(JARS_DIR)
    assert target is not None

    def half_written(workdir: Path, partial: Path) -> None:
        partial.write_bytes(b"half an archive")
        raise RuntimeError("the driver JVM died")

    monkeypatch.setattr(writer, "_publish_pair", half_written)
    with pytest.raises(RuntimeError, match="died"):
        writer.write_archive(force=True)
    assert list(target.parent.iterdir()) == []  # no archive, no partial file
    assert writer.main(["--force"]) == 0  # `make setup` goes on without it
    err = capsys.readouterr().err
    assert "the driver JVM died" in err and "not written" in err
