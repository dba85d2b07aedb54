"""The Spark driver JVM's class-data archive (AppCDS): the classes a publish loads
from Spark's and Delta's jars, parsed, verified and laid out once, then mapped
from disk by every later driver JVM instead of being loaded again.

Every `lb publish`, Airflow task and test session starts a driver JVM that loads
some 20,000 classes before its first job. A JDK 17 dynamic archive
(``-XX:ArchiveClassesAtExit``) written by a JVM that ran a small publish pair
holds them; a JVM given it (``-XX:SharedArchiveFile``) skips the parsing and the
bytecode verification of each. ``cli/class_archive.py`` writes it (``make
setup``); ``jobs/spark.py`` passes it to the driver when it is there. Figures:
bench/RESULTS.md, "Test suite".

An archive only fits the JVM build, the application class path (pyspark's
``jars`` directory, in order, each jar's size and modification time) and the
flags it was dumped with; the JVM checks all of it and runs without the archive
(``-Xshare:auto``) when anything differs. The archive's file name is a digest of
those inputs, so a new pyspark, Delta jar or JDK simply finds no archive until
``make setup`` writes one, and each virtual environment (the Airflow one has its
own pyspark) gets its own. The name also carries a tag of the environment (its
pyspark ``jars`` directory), so that writing a new archive removes the ones it
replaces (204 MB each) and not another environment's.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path

from jobs.jars import ARTIFACTS, JARS_DIR, REPO_ROOT, jar_name

ARCHIVE_DIR = REPO_ROOT / ".cache" / "cds"
# What the JVM would print about an archive it cannot use (another JDK build, a
# jar changed since the dump) goes to stdout by default: `lb`'s JSON output must
# not carry it. Off for the tags the archive logs under.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _java() -> Path | None:
    """The java binary spark-submit starts (``$JAVA_HOME/bin/java``, else the
    first ``java`` on PATH), resolved through links."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).is_file() else None


def _pyspark_jars() -> Path | None:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    return jars if jars.is_dir() else None


def _environment_tag(spark_jars: Path) -> str:
    """Which environment an archive belongs to: its pyspark ``jars`` directory."""
    return hashlib.sha256(str(spark_jars).encode()).hexdigest()[:8]


def _digest(jars_dir: Path) -> str | None:
    """A digest of what the archive depends on, or None when Java or pyspark
    cannot be found."""
    java, spark_jars = _java(), _pyspark_jars()
    if java is None or spark_jars is None:
        return None
    h = hashlib.sha256()
    inputs = [java, *sorted(spark_jars.iterdir())]
    inputs += [jars_dir / jar_name(a) for a in ARTIFACTS]
    for path in inputs:
        try:
            st = path.stat()
        except OSError:
            return None
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return f"{_environment_tag(spark_jars)}-{h.hexdigest()[:16]}"


def archive_path(jars_dir: Path = JARS_DIR) -> Path | None:
    """Where this environment's archive is (or would be written), or None when
    Java or pyspark cannot be found."""
    digest = _digest(jars_dir)
    return ARCHIVE_DIR / f"spark-driver-{digest}.jsa" if digest else None


def superseded(target: Path) -> list[Path]:
    """The archives that ``target`` replaces: the same environment's, written for
    jars or a JDK it no longer has, and those named before archives carried an
    environment tag (``spark-driver-<digest>.jsa``, whichever environment wrote
    them). No JVM can use them any more; a driver that has one mapped keeps its
    copy when it is removed."""
    tag = target.name.removeprefix("spark-driver-").split("-")[0]
    found = []
    for path in target.parent.glob("spark-driver-*.jsa"):
        parts = path.name.removeprefix("spark-driver-").removesuffix(".jsa")
        if path != target and (parts.split("-")[0] == tag or "-" not in parts):
            found.append(path)
    return sorted(found)


def driver_java_options(jars_dir: Path = JARS_DIR) -> str:
    """The driver's JVM options that map this environment's archive; empty when
    it has not been written (the JVM then loads every class itself)."""
    path = archive_path(jars_dir)
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto {QUIET}"


def dump_java_options(target: Path) -> str:
    """The JVM options that write the archive to ``target`` when the JVM exits."""
    return f"-XX:ArchiveClassesAtExit={target} {QUIET}"
