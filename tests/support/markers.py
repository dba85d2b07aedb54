"""Every test carries a layer marker (unit, integration or e2e), through its
module's ``pytestmark`` or its own decorator: a test without one stops the run at
collection, naming the modules (a pytest plugin, loaded by ``tests/conftest.py``)."""

from __future__ import annotations

import pytest

LAYERS = ("unit", "integration", "e2e")


def unlayered(items: list[pytest.Item]) -> list[str]:
    """The modules (paths) holding a test without a layer marker."""
    return sorted(
        {
            str(item.path)
            for item in items
            if not any(item.get_closest_marker(layer) for layer in LAYERS)
        }
    )


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects anything
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    missing = unlayered(items)
    if missing:
        raise pytest.UsageError(
            "tests without a layer marker (add `pytestmark = pytest.mark.unit`, "
            "`integration` or `e2e` to the module): " + ", ".join(missing)
        )
