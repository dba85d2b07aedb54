"""JSON responses rendered with orjson (fast, and exact for large integers)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse, Response


class FastJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class EncodedResponse(Response):
    """JSON already encoded (the read service's answers, cached as bytes)."""

    media_type = "application/json"
