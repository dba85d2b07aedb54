"""The leaderboard web page at ``/`` and its static assets (shipped in the package)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, FastAPI
from starlette.responses import FileResponse
from starlette.staticfiles import StaticFiles

# api/web/ is package data: the page works from an installed wheel, offline.
WEB_DIR = Path(str(resources.files("api") / "web"))

router = APIRouter(include_in_schema=False)


@router.get("/")
async def read_page() -> FileResponse:
    """The leaderboard page (plain HTML, CSS and JavaScript; no CDN)."""
    return FileResponse(WEB_DIR / "index.html", media_type="text/html")


def install(app: FastAPI) -> None:
    """Serve the page at ``/`` and its assets under ``/web/``."""
    app.include_router(router)
    app.mount("/web", StaticFiles(directory=WEB_DIR), name="web")
