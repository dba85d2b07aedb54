"""The API served over real TCP by uvicorn in a background thread (for tests that
drive it like a client would: a browser, an example script)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from api.main import create_app
from conf.settings import Settings
from speed.server import free_port


@contextmanager
def serve(settings: Settings) -> Iterator[str]:
    """Yield the base URL of a running API for ``settings``; stop it afterwards."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
