"""The leaderboard web page at ``/`` and its static assets (shipped in the package)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, FastAPI
from starlette.responses import FileResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

# api/web/ is package data: the page works from an installed wheel, offline.
WEB_DIR = Path(str(resources.files("api") / "web"))

# The page loads only its own script and stylesheet and reads only this API: no
# inline script or style, no framing (clickjacking), no MIME sniffing.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

router = APIRouter(include_in_schema=False)


@router.get("/")
async def read_page() -> FileResponse:
    """The leaderboard page (plain HTML, CSS and JavaScript; no CDN)."""
    return FileResponse(
        WEB_DIR / "index.html", media_type="text/html", headers=PAGE_HEADERS
    )


class PageAssets(StaticFiles):
    """The page's assets, with the page's security headers."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(PAGE_HEADERS)
        return response


def install(app: FastAPI) -> None:
    """Serve the page at ``/`` and its assets under ``/web/``."""
    app.include_router(router)
    app.mount("/web", PageAssets(directory=WEB_DIR), name="web")
