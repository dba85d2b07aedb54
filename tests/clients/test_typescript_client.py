"""The TypeScript/Node client (clients/typescript) under Node's own test runner,
against the shared client stack (``lb up``, seed events and a generation).

``node`` is optional for a bare pytest run (skipped, with the reason); ``make test``
sets LB_REQUIRE_OPS_TOOLS=1, and then a missing ``node`` fails the test."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.client_stack import (
    BOARD,
    KEY_ID,
    PLAYER_TOKEN_KEY,
    SECRET,
    ClientStack,
)

pytestmark = pytest.mark.e2e

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"
NODE_TIMEOUT = 600
STACK_FREE_TESTS = 8


def node() -> str:
    path = shutil.which("node")
    if path is None:
        reason = "node not installed: the TypeScript client needs Node 18+"
        if os.environ.get("LB_REQUIRE_OPS_TOOLS"):
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def test_typescript_client_passes_node_test(client_stack: ClientStack) -> None:
    binary = node()
    env = dict(
        os.environ,
        LB_URL=client_stack.url,
        LB_KEY_ID=KEY_ID,
        LB_SECRET=SECRET,
        LB_PLAYER_TOKEN_KEY=PLAYER_TOKEN_KEY,
        LB_BOARD=BOARD,
        LB_GENERATION=client_stack.generation,
        LB_EXPECTED=json.dumps(client_stack.expected_snapshot()),
    )
    ran = subprocess.run(
        [binary, "--test", "--test-reporter=spec", "test/client.test.js"],
        cwd=PACKAGE,
        env=env,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT,
        check=False,
    )
    report = ran.stdout + ran.stderr
    assert ran.returncode == 0, report
    # The stack's tests ran too (a suite skipped for a missing LB_URL would leave
    # only the stack-free ones: 8 of them).
    passed = re.search(r"^ℹ pass (\d+)$", report, re.M)
    assert passed and int(passed.group(1)) >= STACK_FREE_TESTS + 10, report
    assert re.search(r"^ℹ fail 0$", report, re.M), report
