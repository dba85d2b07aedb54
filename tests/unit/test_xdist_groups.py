"""The xdist groups (tests/support/groups.py): every module with a Spark test runs
on one worker as a whole (the Spark modules spread over one Spark group per
worker, each group on a worker of its own), the users of a pinned session stack
share one worker, a module with a module-scoped fixture of its own stays on one
worker, an explicit ``xdist_group`` mark is honoured, and the rest go wherever a
worker is free; under ``-n 2 --dist loadgroup`` the groups hold (pytest-xdist's
own loadgroup does not with pytest 9.2: its ``@group`` node-id suffix is lost)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The repository root: the subprocess pytest imports ``tests.support.groups`` from
# it (its own rootdir is a temporary directory, and a clean clone sets no
# PYTHONPATH).
ROOT = Path(__file__).resolve().parents[2]

# As tests/conftest.py loads it (xdist workers do not get a ``-p`` plugin).
CONFTEST = """
import pytest

pytest_plugins = ["tests.support.groups"]

@pytest.fixture(scope="session")
def spark():
    return "jvm"

@pytest.fixture
def uses_spark(spark):
    return spark

@pytest.fixture(scope="session")
def client_stack():
    return "stack"

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    from tests.support.groups import groups_of

    one, two = groups_of(items), groups_of(items, 2)
    for item in items:
        nodeid = item.nodeid
        print("GROUP", nodeid, one.get(nodeid, "-"), two.get(nodeid, "-"))
"""

MODULES = {
    "test_jobs.py": """
import pytest

def test_direct(spark):
    assert spark

# More tests than workers: without the groups they would spread.
@pytest.mark.parametrize("n", range(6))
def test_many(spark, n):
    assert spark

def test_through_a_fixture(uses_spark):
    assert uses_spark

def test_plain_in_a_spark_module():
    assert True
""",
    # A second Spark module, shorter (fewer tests): the other Spark group's.
    "test_jobs_too.py": """
import pytest

@pytest.mark.parametrize("n", range(4))
def test_other(spark, n):
    assert spark
""",
    "test_api.py": """
import pytest

def test_plain():
    assert True

def test_client(client_stack):
    assert client_stack

@pytest.mark.xdist_group("mine")
def test_marked():
    assert True
""",
    "test_fuzz.py": """
import pytest

@pytest.fixture(scope="module")
def served():
    return 1

def test_served(served):
    assert served

def test_plain():
    assert True
""",
}

# A job called in-process without the ``spark`` fixture (the SparkContext it
# would leave behind, without starting a JVM here).
STRAY = """
from pyspark import SparkContext

def test_starts_spark_itself():
    SparkContext._active_spark_context = object()
"""

# Plugins the workers need not import (each takes seconds on a loaded machine).
NO_PLUGINS = ("-p", "no:locust", "-p", "no:schemathesis", "-p", "no:anyio")


def make_tests(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    for name, source in MODULES.items():
        pytester.makepyfile(**{name.removesuffix(".py"): source})


def groups(pytester: pytest.Pytester, *args: str) -> dict[str, tuple[str, str]]:
    """Node id -> (its group with one Spark group, with two)."""
    make_tests(pytester)
    result = pytester.runpytest("--collect-only", "-q", "-s", *args)
    found = {}
    for line in result.outlines:
        if line.startswith("GROUP "):
            _, nodeid, one, two = line.split()
            found[nodeid.split("@")[0]] = (one, two)
    assert found, result.outlines
    return found


OTHERS = {
    "test_api.py::test_plain": "-",
    "test_api.py::test_client": "client_stack",
    "test_api.py::test_marked": "mine",
    "test_fuzz.py::test_served": "test_fuzz.py",
    "test_fuzz.py::test_plain": "-",
}


@pytest.mark.unit
def test_spark_modules_stack_users_and_module_fixtures_are_grouped(
    pytester: pytest.Pytester,
) -> None:
    found = groups(pytester)
    first = {
        "test_jobs.py::test_direct",
        *(f"test_jobs.py::test_many[{n}]" for n in range(6)),
        "test_jobs.py::test_through_a_fixture",
        "test_jobs.py::test_plain_in_a_spark_module",
    }
    second = {f"test_jobs_too.py::test_other[{n}]" for n in range(4)}
    assert found == {
        **dict.fromkeys(first, ("spark", "spark")),
        # With two groups the shorter module (4 tests against 9) gets the second.
        **dict.fromkeys(second, ("spark", "spark-2")),
        **{nodeid: (group, group) for nodeid, group in OTHERS.items()},
    }


@pytest.mark.unit
def test_spark_modules_spread_by_their_seconds() -> None:
    from tests.support import groups

    class Item:
        def __init__(self, nodeid: str) -> None:
            self.nodeid = nodeid

    listed = sorted(groups.SPARK_SECONDS, key=lambda m: -groups.SPARK_SECONDS[m])
    longest, second = listed[0], listed[1]
    modules = (longest, second, "tests/x.py")
    items = [Item(f"{m}::test_{i}") for m in modules for i in range(3)]
    spread = groups.spread_spark_modules(
        items,  # type: ignore[arg-type]
        set(modules),
        2,
    )
    # Longest first to "spark", the next to the lighter "spark-2", and the
    # unlisted module (3 tests x DEFAULT_TEST_SECONDS) to the lighter of the two.
    assert spread[longest] == "spark" and spread[second] == "spark-2"
    assert spread["tests/x.py"] == "spark-2"
    assert groups.spread_spark_modules(items, {longest, second}, 1) == {  # type: ignore[arg-type]
        longest: "spark",
        second: "spark",
    }


@pytest.mark.integration  # starts a pytest with two xdist worker processes
def test_under_two_workers_the_spark_module_runs_on_one(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    inherited = os.environ.get("PYTHONPATH")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), inherited]))
    )
    make_tests(pytester)
    pytester.makepyfile(test_stray=STRAY)
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", "loadgroup", "-v", *NO_PLUGINS
    )
    result.assert_outcomes(passed=18, failed=1)
    # The test that started "Spark" without the fixture, outside the groups.
    result.stdout.fnmatch_lines(["*test_stray.py::test_starts_spark_itself*"])
    assert "started a SparkSession outside the spark xdist group" in result.stdout.str()

    def workers(module: str) -> set[str]:
        return {
            line.split()[0]
            for line in result.outlines
            if "PASSED" in line and f"{module}::" in line
        }

    # Each Spark module on one worker, the two Spark groups on different ones.
    ours, theirs = workers("test_jobs.py"), workers("test_jobs_too.py")
    assert len(ours) == 1 and len(theirs) == 1, result.outlines
    assert ours | theirs == {"[gw0]", "[gw1]"}, result.outlines
