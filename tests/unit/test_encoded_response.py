"""EncodedResponse builds a plain answer's headers itself (api/responses.py): the
same status, headers (names, values, order) and body as Starlette's Response."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.responses import Response

from api.responses import EncodedResponse

pytestmark = pytest.mark.unit

BODY = b'{"board":"season:S4:global","entries":[]}'
CASES: list[dict[str, Any]] = [
    {},
    {"headers": {"X-Live-Layer": "unavailable"}},
    {"headers": {"X-Live-Layer": "unavailable", "Retry-After": "3"}},
    {"headers": {}},
    {"headers": {"Content-Type": "application/problem+json"}},
    {"headers": {"content-length": "2"}},
    {"status_code": 204},
    {"status_code": 404, "headers": {"X-A": "b"}},
    {"media_type": "text/plain"},
]


@pytest.mark.parametrize("kwargs", CASES)
@pytest.mark.parametrize("body", [BODY, b"", memoryview(b"{}"), None])
def test_the_same_answer_as_starlettes_response(
    kwargs: dict[str, Any], body: Any
) -> None:
    ours = EncodedResponse(body, **kwargs)
    reference = Response(body, **{"media_type": "application/json", **kwargs})
    assert ours.status_code == reference.status_code
    assert ours.raw_headers == reference.raw_headers
    assert ours.body == reference.body
