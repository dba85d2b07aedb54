"""Which tests share an xdist worker (``pytest -n 2 --dist loadgroup``, ``make
test``): a pytest plugin, loaded by ``tests/conftest.py``.

- ``spark`` / ``spark-2``: every module with a test that uses the session's
  SparkSession or the standalone Spark cluster (the ``spark`` / ``spark_cluster``
  fixtures, found in each test's fixture closure) is in one of the Spark groups,
  as many as there are workers (at most ``MAX_SPARK_GROUPS``). Each group runs on
  one worker, which holds that group's only in-process JVM; a whole module goes
  to one group, so its module-level set-up is not repeated. The modules are
  spread by their measured serial seconds (``SPARK_SECONDS``; longest first,
  each to the lighter group), so that both workers finish their Spark at about
  the same time, and the scheduler hands each worker a Spark group first.
- ``airflow``: the Airflow ``dags test`` module (one Airflow home, migrated
  once; its tasks run Spark in their own processes), on whichever worker is
  free next.
- a session fixture that starts a stack (``client_stack``) keeps its users on
  one worker, which starts it once.
- a module with a module-, class- or session-scoped fixture of its own runs on
  one worker (its fixture starts once).
- an explicit ``@pytest.mark.xdist_group(name)`` joins group ``name``.
- every other test runs wherever a worker is free (the Redis / API / stack
  tests, which mostly wait on processes).

Why not xdist's own ``loadgroup``: pytest-xdist 3.8 marks a group by appending
``@name`` to ``item._nodeid``, which pytest 9.2 no longer reads (``nodeid`` comes
from ``item._id``), so every test landed wherever a worker was free. Here the
workers write the groups they computed at collection (one JSON file per worker
in the controller's basetemp) and the controller's scheduler (xdist's
``loadgroup`` scheduler with its scope taken from that file) reads them; node
ids stay unchanged. Without xdist nothing changes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

SPARK = "spark"
# The Spark groups: one per worker, at most this many (a JVM each).
MAX_SPARK_GROUPS = 2
SPARK_FIXTURES = frozenset({"spark", "spark_cluster"})
# Modules that use the worker's SparkSession without those fixtures (none now).
SPARK_MODULES: frozenset[str] = frozenset()
# Modules that run in a group of their own, on one worker.
MODULE_GROUPS = {"tests/dags/test_dags.py": "airflow"}
# Serial seconds of the Spark modules (their tests' setup + call + teardown in a
# `make test` run, the slow ones summed), to spread them over the Spark groups; a
# module not listed counts DEFAULT_TEST_SECONDS per test. Only the balance
# depends on them: a stale figure makes one worker finish later, nothing fails.
# Where a module's tests are among the 25 slowest of the last clean-clone CI run
# (776 tests in 1,528 s, 2 workers; the lead's figures of 3 December), their call
# seconds from there, rounded up for set-up; the others from earlier runs (the
# clean-clone run of 282ed10, 773 passed in 1,602 s, quiet, and before).
SPARK_SECONDS: dict[str, float] = {
    # 7 tests in the last CI (174 + 109 + 62 + 59 + 51 + 48 + 42 = 545 s, the
    # lead's figures of 3 December); 26 publishes and 2 full recomputes then, 22
    # publishes since two tests share one chain and the versions cases one g1
    # (session 19): about 4/26 less.
    "tests/jobs/test_incremental.py": 480,
    # 95 s (196 s in 282ed10's run) with four publishes and three verifies; three
    # publishes and one verify since session 20 (the replay's generation is the
    # first): about 3/4.
    "tests/jobs/test_games_publish.py": 75,
    "tests/jobs/test_season.py": 155,
    "tests/e2e/test_publish_then_live.py": 115,  # 58 + 55 s
    # One test, one chain of three publishes (session 19: was two tests, 135 + 72 s
    # for five publishes in the last CI); an estimate from the 72 s test of three.
    "tests/docs/test_analysts_example.py": 110,
    # The closes 75 s (two closes, one publish each); one close since session 20
    # (arena's is test_games_publish's): about 40 s; the module's `lb up` stack,
    # two reads tests.
    "tests/e2e/test_games_isolation.py": 70,
    "tests/api/test_board_options.py": 90,  # 83 s and the live test
    "tests/e2e/test_backdated_tie.py": 80,  # 77 s
    # 67 s in the last CI with four publishes; three since session 19.
    "tests/speed/test_landed_records.py": 60,
    "tests/jobs/test_quarantine.py": 71,
    "tests/jobs/test_replay.py": 59,
    "tests/jobs/test_verify.py": 57,
    "tests/jobs/test_retention.py": 46,
    "tests/jobs/test_publish_steps.py": 40,
    # Its SIGKILL drill moved to tests/drills (`make drills`); the incomplete-landing
    # test left: 14 Spark jobs, not in the 25 slowest (< 48 s).
    "tests/jobs/test_season_kill.py": 20,
    # One test each, listed at the default 10 s before: their call seconds in the
    # last CI (the lead's figures of 3 December), rounded up for set-up.
    "tests/jobs/test_first_achieved.py": 80,
    "tests/jobs/test_contributions_index.py": 75,
}
DEFAULT_TEST_SECONDS = 10.0
# Groups handed out first after the Spark groups (the longest ones; longest first
# leaves the shortest tail).
EARLY_GROUPS = ("airflow", "client_stack")
# Session fixtures that start something slow: their users share one worker.
PINNED_SESSION_FIXTURES = frozenset({"client_stack"})
GROUPS_DIR = "lb_groups_dir"  # the workerinput key: where workers write groups


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def _own_scoped_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a module-, class- or session-scoped fixture defined
    in its own module."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    module = _module(item)
    for defs in info.name2fixturedefs.values():
        fixturedef = defs[-1]
        if fixturedef.scope in ("module", "class", "session") and str(
            fixturedef.baseid
        ).startswith(module):
            return True
    return False


def spark_group_names(count: int) -> list[str]:
    """``spark``, ``spark-2``, ...: ``count`` Spark groups (at least one)."""
    return [SPARK] + [f"{SPARK}-{i}" for i in range(2, max(count, 1) + 1)]


def is_spark_group(name: str | None) -> bool:
    return name is not None and (name == SPARK or name.startswith(f"{SPARK}-"))


def spark_modules_of(items: list[pytest.Item]) -> set[str]:
    """The modules (node-id paths) in a Spark group."""
    found = set(SPARK_MODULES)
    for item in items:
        if SPARK_FIXTURES & set(getattr(item, "fixturenames", ())):
            found.add(_module(item))
    return found


def spread_spark_modules(
    items: list[pytest.Item], spark_modules: set[str], count: int
) -> dict[str, str]:
    """Module -> Spark group: the longest module first (``SPARK_SECONDS``, else
    ``DEFAULT_TEST_SECONDS`` per test), each to the group with the fewest seconds
    so far (the first of equals). The same items give the same groups on every
    worker."""
    tests: dict[str, int] = {}
    for item in items:
        module = _module(item)
        if module in spark_modules:
            tests[module] = tests.get(module, 0) + 1
    seconds = {
        module: SPARK_SECONDS.get(module, DEFAULT_TEST_SECONDS * tests.get(module, 1))
        for module in spark_modules
    }
    names = spark_group_names(count)
    load = dict.fromkeys(names, 0.0)
    found = {}
    for module in sorted(seconds, key=lambda m: (-seconds[m], m)):
        name = min(names, key=lambda n: (load[n], names.index(n)))
        found[module] = name
        load[name] += seconds[module]
    return found


def group_of(item: pytest.Item, spark_modules: dict[str, str]) -> str | None:
    """The group of ``item``: its module's Spark group, its module's own group, an
    explicit xdist_group, a pinned fixture's name, its module's path, or None (any
    worker)."""
    module = _module(item)
    if module in spark_modules:
        return spark_modules[module]
    if module in MODULE_GROUPS:
        return MODULE_GROUPS[module]
    marks = sorted(
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    )
    if marks:
        return "_".join(marks)
    pinned = sorted(PINNED_SESSION_FIXTURES & set(getattr(item, "fixturenames", ())))
    if pinned:
        return pinned[0]
    if _own_scoped_fixture(item):
        return module
    return None


def groups_of(items: list[pytest.Item], spark_groups: int = 1) -> dict[str, str]:
    """Node id -> group of the grouped tests among ``items``, the Spark modules
    spread over ``spark_groups`` groups."""
    spark_modules = spread_spark_modules(items, spark_modules_of(items), spark_groups)
    found = {}
    for item in items:
        name = group_of(item, spark_modules)
        if name is not None:
            found[item.nodeid] = name
    return found


GROUPS_KEY = pytest.StashKey[dict[str, str]]()


@pytest.hookimpl(trylast=True)  # after -m / -k deselected: the ids xdist sees
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is None or GROUPS_DIR not in workerinput:
        return
    workers = int(workerinput.get("workercount", 1))
    groups = groups_of(items, min(workers, MAX_SPARK_GROUPS))
    config.stash[GROUPS_KEY] = groups
    path = Path(workerinput[GROUPS_DIR]) / f"groups-{workerinput['workerid']}.json"
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps(groups))
    os.replace(partial, path)  # written before the worker reports its collection


def _spark_running() -> bool:
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


SPARK_BEFORE = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if GROUPS_KEY in item.config.stash:
        item.stash[SPARK_BEFORE] = _spark_running()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Under xdist, a test outside the Spark groups that starts a SparkSession in
    its worker (a job called in-process without the ``spark`` fixture) fails: it
    would start a JVM on a worker that may hold a Spark group's already. It needs
    the fixture (or its module in ``SPARK_MODULES``)."""
    result = yield
    groups = item.config.stash.get(GROUPS_KEY, None)
    if (
        groups is not None
        and not is_spark_group(groups.get(item.nodeid))
        and not item.stash.get(SPARK_BEFORE, True)
        and _spark_running()
    ):
        raise AssertionError(
            "this test started a SparkSession outside the spark xdist groups: "
            "request the `spark` fixture (tests/support/groups.py)"
        )
    return result


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Controller: tell each worker where to write its groups."""
    if node.config.getvalue("dist") == "loadgroup":
        node.workerinput[GROUPS_DIR] = str(_groups_dir(node.config))


def _groups_dir(config: pytest.Config) -> Path:
    path = config._tmp_path_factory.getbasetemp() / "xdist-groups"  # type: ignore[attr-defined]
    path.mkdir(exist_ok=True)
    return Path(path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Controller: ``--dist loadgroup`` with the groups the workers computed."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    directory = _groups_dir(config)

    class FileGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
        groups: dict[str, str] | None = None
        ordered = False

        def _assign_work_unit(self, node: Any) -> None:
            # Before the first unit goes out: the Spark groups first (each worker
            # is handed one: a worker takes its next unit only when at most two of
            # its tests are left, so two groups of many tests cannot both go to
            # one), then the longest other groups, then xdist's order.
            if not self.ordered:
                self.ordered = True
                first = sorted(s for s in self.workqueue if is_spark_group(s))
                first += [s for s in EARLY_GROUPS if s in self.workqueue]
                for scope in reversed(first):
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

        def _split_scope(self, nodeid: str) -> str:
            # Called once every worker has reported its collection, so after
            # every worker wrote its file (they are identical: xdist checks that
            # the workers collected the same tests).
            if self.groups is None:
                self.groups = {}
                for path in sorted(directory.glob("groups-*.json")):
                    self.groups.update(json.loads(path.read_text()))
            group = self.groups.get(nodeid)
            return group if group is not None else super()._split_scope(nodeid)

    return FileGroupScheduling(config, log)
