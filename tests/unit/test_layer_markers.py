"""The layer-marker check (tests/support/markers.py) stops a run whose tests lack
a unit, integration or e2e marker, and lets a marked module through."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit

INI = """
[pytest]
markers =
    unit: u
    integration: i
    e2e: e
    slow: s
addopts = -p tests.support.markers -p no:cacheprovider
"""


def test_a_module_without_a_layer_marker_fails_collection(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(
        test_marked="import pytest\npytestmark = pytest.mark.unit\n"
        "def test_a():\n    assert True\n",
        test_bare="import pytest\n@pytest.mark.slow\ndef test_b():\n    assert True\n",
    )
    result = pytester.runpytest("-m", "not slow")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*without a layer marker*test_bare.py*"])
    assert "test_marked.py" not in result.stderr.str()


def test_marked_modules_and_tests_pass(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(
        test_module="import pytest\npytestmark = pytest.mark.integration\n"
        "def test_a():\n    assert True\n",
        test_function="import pytest\n@pytest.mark.e2e\ndef test_b():\n"
        "    assert True\n",
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=2)
