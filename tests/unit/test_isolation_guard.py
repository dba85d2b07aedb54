"""The guard around every test (tests/support/isolation.py): what a test leaves
changed of the worker's shared state is named and undone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.isolation import SharedState

pytestmark = pytest.mark.unit


def test_a_changed_cwd_and_lb_variables_are_named_and_undone(tmp_path: Path) -> None:
    cwd = os.getcwd()
    os.environ["LB_GUARD_GONE"] = "x"
    try:
        before = SharedState.capture()
        os.chdir(tmp_path)
        os.environ["LB_GUARD_NEW"] = "1"
        del os.environ["LB_GUARD_GONE"]
        os.environ["NOT_LB_GUARD"] = "ignored"
        left = before.restore()
        assert os.getcwd() == cwd
        assert "LB_GUARD_NEW" not in os.environ
        assert os.environ["LB_GUARD_GONE"] == "x"
        assert left == [
            f"cwd {cwd} -> {tmp_path}",
            "LB_GUARD_GONE: 'x' -> None",
            "LB_GUARD_NEW: None -> '1'",
        ]
        assert before.restore() == []
    finally:
        os.chdir(cwd)
        for key in ("LB_GUARD_GONE", "LB_GUARD_NEW", "NOT_LB_GUARD"):
            os.environ.pop(key, None)
