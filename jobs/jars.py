"""Delta Lake's Spark jars, fetched once from Maven Central into ``.cache/jars``.

``python -m jobs.jars --fetch`` has Maven (``mvn dependency:copy``, with a local
repository under ``.cache/m2`` so nothing outside the project is touched) download the
pinned artifacts below, checksums verified by Maven; it is a no-op when they are
already cached, so Spark starts offline afterwards (``spark.jars``, never
``spark.jars.packages``).

The list is the runtime closure of ``io.delta:delta-spark_4.2_2.13`` as Maven resolves
it (``mvn dependency:copy-dependencies -DincludeScope=runtime``) minus every artifact
pyspark already ships in ``pyspark/jars`` (scala-library, jackson, parquet, hadoop
client, RoaringBitmap, jts, antlr4-runtime, ...). Two more are left out on purpose:
``commons-logging`` (pyspark's ``jcl-over-slf4j`` provides the same classes) and
RoaringBitmap's ``shims`` (merged into RoaringBitmap 1.x, which pyspark ships).

Version note: the pip package is delta-spark 4.4.1, but Maven Central has no 4.4.1
jars (404 for ``delta-spark_2.13``, ``delta-spark_4.2_2.13`` and ``delta-storage``);
4.4.0 is the newest release there, built against Spark 4.2.0. The Python side of
delta-spark is a thin py4j wrapper, so a patch-level difference is harmless.
``delta-spark_4.2_2.13`` is the artifact ``delta.pip_utils`` picks for Spark 4.2.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
DELTA_VERSION = "4.4.0"
REPO_ROOT = Path(__file__).resolve().parent.parent
JARS_DIR = REPO_ROOT / ".cache" / "jars"
MAVEN_REPO = REPO_ROOT / ".cache" / "m2"

# (groupId, artifactId, version)
ARTIFACTS: tuple[tuple[str, str, str], ...] = (
    ("io.delta", "delta-spark_4.2_2.13", DELTA_VERSION),
    ("io.delta", "delta-storage", DELTA_VERSION),
    ("io.delta", "delta-kernel-api", DELTA_VERSION),
    ("io.delta", "delta-kernel-defaults", DELTA_VERSION),
    ("io.delta", "delta-kernel-unitycatalog", DELTA_VERSION),
    ("io.unitycatalog", "unitycatalog-client", "0.6.0"),
    ("io.unitycatalog", "unitycatalog-hadoop", "0.6.0"),
    # Same version as pyspark's jackson-core/databind, not the 2.13.5 Maven picks:
    # mixing Jackson minor versions on one classpath breaks module registration.
    ("com.fasterxml.jackson.datatype", "jackson-datatype-jdk8", "2.21.2"),
    ("javax.annotation", "javax.annotation-api", "1.3.2"),
)


class JarsMissing(RuntimeError):
    """The jar cache is incomplete; ``make jars`` fills it."""


def jar_name(artifact: tuple[str, str, str]) -> str:
    _, name, version = artifact
    return f"{name}-{version}.jar"


def jar_paths(jars_dir: Path = JARS_DIR) -> list[Path]:
    """Every cached jar Spark needs; raises :class:`JarsMissing` when one is absent."""
    paths = [jars_dir / jar_name(a) for a in ARTIFACTS]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise JarsMissing(
            f"Delta Lake jars missing from {jars_dir}: {', '.join(missing)}. "
            "Run `make jars` (python -m jobs.jars --fetch) once while online."
        )
    return paths


def fetch(jars_dir: Path = JARS_DIR, maven_repo: Path = MAVEN_REPO) -> list[Path]:
    """Have Maven copy every missing jar into ``jars_dir``."""
    jars_dir.mkdir(parents=True, exist_ok=True)
    mvn = shutil.which("mvn")
    paths = []
    for artifact in ARTIFACTS:
        target = jars_dir / jar_name(artifact)
        paths.append(target)
        if target.is_file():
            continue
        if mvn is None:
            raise JarsMissing("Maven (mvn) is needed once to fetch the Delta jars")
        coordinates = ":".join(artifact)
        print(f"fetching {coordinates}", file=sys.stderr)
        # mvn -q still prints terminal escape codes: keep its output for failures.
        done = subprocess.run(
            [
                mvn,
                "-B",
                "-q",
                f"-Dmaven.repo.local={maven_repo}",
                f"{DEPENDENCY_PLUGIN}:copy",
                f"-Dartifact={coordinates}:jar",
                f"-DoutputDirectory={jars_dir}",
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            print(done.stdout, done.stderr, sep="\n", file=sys.stderr)
            raise RuntimeError(f"mvn could not fetch {coordinates}")
        if not target.is_file():
            raise RuntimeError(f"mvn did not produce {target}")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fetch", action="store_true", help="download missing jars")
    parser.add_argument("--dir", type=Path, default=JARS_DIR)
    args = parser.parse_args(argv)
    if args.fetch:
        paths = fetch(args.dir)
    else:
        try:
            paths = jar_paths(args.dir)
        except JarsMissing as exc:
            print(exc, file=sys.stderr)
            return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
