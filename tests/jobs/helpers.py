"""Compatibility shim: bronze rows and the oracles live in ``tests/support/jobs.py``."""

from tests.support.jobs import (
    BRONZE_SCHEMA,
    NOW_MS,
    Ev,
    bronze,
    log_records,
    oracle_first_achieved,
    oracle_order,
    oracle_ranking,
    oracle_totals,
    ts,
)

__all__ = [
    "BRONZE_SCHEMA",
    "NOW_MS",
    "Ev",
    "bronze",
    "log_records",
    "oracle_first_achieved",
    "oracle_order",
    "oracle_ranking",
    "oracle_totals",
    "ts",
]
