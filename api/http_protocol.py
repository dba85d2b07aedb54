"""uvicorn's HTTP protocol with a deadline for a request's headers, and each
response's head and body written to the socket at once.

uvicorn closes an idle keep-alive connection after ``--timeout-keep-alive``, but a
connection that never sends a complete request head -- nothing at all, or half a
request line (slowloris) -- is held as long as the client likes: 2,000 such
connections stayed open for 20 s (issue 23). Here a connection must finish each
request's headers within :data:`HEADER_TIMEOUT_SECONDS` of being opened or of its
previous response, else it is closed. ``lb up`` starts uvicorn with
``--http api.http_protocol:HeaderTimeoutProtocol``.

uvicorn writes a response's status line and headers as soon as the app sends
``http.response.start`` and its body on ``http.response.body``: two ``send`` calls
to the kernel, two segments to the client and two wake-ups of its reader for every
answer, though an app like ours sends both messages in one go. Here the head waits
for the body (:class:`CoalescingTransport`): one write per plain response. It waits
at most until the event loop's next turn, so a head whose body comes later (a
streamed response, a HEAD request, which has none) still goes out at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

try:  # httptools is uvicorn's fast parser (what --http auto picks when present)
    from uvicorn.protocols.http.httptools_impl import (
        HttpToolsProtocol as _Protocol,
    )
except ImportError:  # pragma: no cover - uvicorn without httptools
    from uvicorn.protocols.http.h11_impl import (  # type: ignore[assignment]
        H11Protocol as _Protocol,
    )

HEADER_TIMEOUT_SECONDS = 5.0
# uvicorn's status lines (``STATUS_LINE``) all start so; a head ends with an
# empty line.
_HEAD_START = b"HTTP/"
_HEAD_END = b"\r\n\r\n"


class CoalescingTransport:
    """The connection's transport as uvicorn's protocol and request cycles see it:
    a write that is a response head is held and joined to the next write, or
    written on the event loop's next turn, or before a close; writes keep their
    order whatever they are. Everything else is the transport's own."""

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(
        self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif data.startswith(_HEAD_START) and data.endswith(_HEAD_END):
            self._held = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HeaderTimeoutProtocol(_Protocol):  # type: ignore[misc, valid-type]
    header_timeout = HEADER_TIMEOUT_SECONDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        # A request whose headers complete replaces ``self.cycle``: the timer only
        # closes the connection when none has since.
        self._header_timer = self.loop.call_later(
            self.header_timeout, self._header_deadline, self.cycle
        )

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_deadline(self, waiting_after: Any) -> None:
        self._header_timer = None
        if self.transport is None or self.transport.is_closing():
            return
        started = self.cycle is not waiting_after
        in_flight = self.cycle is not None and not self.cycle.response_complete
        if not started and not in_flight:
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # After uvicorn read the addresses and built its flow control on the
        # transport itself: the request cycles it starts write through this.
        self.transport = CoalescingTransport(transport, self.loop)  # type: ignore[assignment]
        self._arm_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # The next request's headers have the same deadline, unless they already
        # arrived (a pipelined request waits in ``self.pipeline``).
        if not self.transport.is_closing() and not getattr(self, "pipeline", None):
            self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)
