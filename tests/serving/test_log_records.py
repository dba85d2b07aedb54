"""A log record's result reads the same in both of its forms: the items arrays
apply_event.lua writes and the objects of records written before them."""

from __future__ import annotations

import pytest

from serving.log_records import board_items, logged_result

pytestmark = pytest.mark.unit

EVENT = {"eventId": "E1", "playerId": "P1", "matchId": "M1"}
OBJECTS = [
    {"board": "daily:2026-12-05:global", "total": 30, "version": 2},
    {"board": "season:S3:eu", "total": 0, "version": 0, "status": "late-review"},
]


def test_items_arrays_read_as_the_objects_they_replace() -> None:
    arrays = {
        "status": "accepted",
        "items": [
            ["daily:2026-12-05:global", 30, 2],
            ["season:S3:eu", 0, 0, "late-review"],
        ],
    }
    older = {"status": "accepted", "boards": OBJECTS}
    assert board_items(arrays) == OBJECTS
    assert board_items(older) == OBJECTS


def test_logged_result_is_the_reply_from_the_record_and_its_result() -> None:
    record = {
        "partition": 3,
        "position": 41,
        "status": "released",
        "event": EVENT,
        "result": {"status": "accepted", "items": [["alltime:all:eu", 7, 1]]},
    }
    assert logged_result(record) == {
        "eventId": "E1",
        "playerId": "P1",
        "status": "accepted",
        "boards": [{"board": "alltime:all:eu", "total": 7, "version": 1}],
        "partition": 3,
        "position": 41,
    }


@pytest.mark.parametrize("result", [{"status": "quarantined", "items": {}}, {}])
def test_a_record_that_names_no_board_has_no_items(result: dict[str, object]) -> None:
    # Lua's cjson writes an empty table as an object; a result may be missing.
    record = {"partition": 0, "position": 1, "status": "quarantined", "event": EVENT}
    assert logged_result({**record, "result": result})["boards"] == []
    assert logged_result({**record, "result": result})["status"] == "quarantined"
