"""JSON responses rendered with orjson (fast, and exact for large integers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse, Response

_JSON = (b"content-type", b"application/json")
_OWN = frozenset({"content-length", "content-type"})


class FastJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class EncodedResponse(Response):
    """JSON already encoded (the read service's answers, cached as bytes).

    The headers of a plain answer (bytes, 200, no content-length or content-type of
    its own) are built here, as ``Response.init_headers`` orders them -- the
    answer's own, then content-length and content-type -- without its general
    case's checks; anything else is Starlette's.
    """

    media_type = "application/json"

    def __init__(
        self,
        content: Any = None,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        if (
            type(content) is not bytes
            or status_code != 200
            or media_type is not None
            or background is not None
            or (headers and not _OWN.isdisjoint(k.lower() for k in headers))
        ):
            super().__init__(content, status_code, headers, media_type, background)
            return
        self.status_code = 200
        self.background = None
        self.body = content
        raw = [(b"content-length", str(len(content)).encode("latin-1")), _JSON]
        if headers:
            raw[:0] = [
                (k.lower().encode("latin-1"), v.encode("latin-1"))
                for k, v in headers.items()
            ]
        self.raw_headers = raw
