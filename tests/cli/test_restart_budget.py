"""The supervisor's restart limit (LB_RESTART_LIMIT, issue 23): N restarts within M
seconds per process, a growing pause between restarts that follow each other."""

from __future__ import annotations

import pytest

from cli.supervisor import RestartBudget, describe_exit
from conf.settings import Settings

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_restarts_within_the_window_are_limited_and_old_ones_expire() -> None:
    clock = Clock()
    budget = RestartBudget(3, 60, clock)
    pauses = []
    for _ in range(3):
        assert budget.allow()
        pauses.append(budget.delay())
        clock.now += 1
    assert pauses == [0.0, 0.25, 0.5]
    assert not budget.allow()  # a fourth within 60 s stops the stack
    clock.now += 57.5  # the first restart leaves the window, the others stay
    assert budget.allow()
    assert not budget.allow()


def test_a_zero_limit_never_restarts() -> None:
    assert not RestartBudget(0, 60, Clock()).allow()


def test_the_limit_is_validated_and_parsed() -> None:
    assert Settings(restart_limit="7/120").restart_window == (7, 120.0)
    assert Settings().restart_window == (5, 60.0)
    for bad in ("5", "x/60", "5/0", "-1/60"):
        with pytest.raises(ValueError, match="LB_RESTART_LIMIT"):
            Settings(restart_limit=bad)


def test_exit_reasons_name_the_signal() -> None:
    assert describe_exit("redis-server", -9) == "redis-server was killed by SIGKILL"
    assert describe_exit("the API", 1) == "the API exited with 1"
