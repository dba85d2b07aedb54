"""api/http_protocol.py's CoalescingTransport: a response head waits for its body
(one write), never longer than the event loop's next turn, and writes keep their
order. Its transport records what reaches it; the served app's answers through
the real uvicorn protocol are tests/api/test_header_timeout.py's."""

from __future__ import annotations

import asyncio

import pytest

from api.http_protocol import CoalescingTransport

pytestmark = pytest.mark.unit

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


class Recorded:
    """What a transport was asked to write, and whether it was closed."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def run(body: object) -> Recorded:
    async def main() -> Recorded:
        recorded = Recorded()
        transport = CoalescingTransport(recorded, asyncio.get_running_loop())  # type: ignore[arg-type]
        await body(transport, recorded)  # type: ignore[operator]
        return recorded

    return asyncio.run(main())


def test_a_head_and_its_body_go_out_in_one_write() -> None:
    async def body(transport: CoalescingTransport, recorded: Recorded) -> None:
        transport.write(HEAD)
        assert recorded.writes == []
        transport.write(b"{}")
        assert recorded.writes == [HEAD + b"{}"]
        await asyncio.sleep(0)  # the pending flush finds nothing left
        assert recorded.writes == [HEAD + b"{}"]

    run(body)


def test_a_head_alone_goes_out_on_the_next_turn() -> None:
    """A HEAD request's answer, or a streamed body that comes later."""

    async def body(transport: CoalescingTransport, recorded: Recorded) -> None:
        transport.write(HEAD)
        await asyncio.sleep(0)
        assert recorded.writes == [HEAD]
        transport.write(b"{}")
        assert recorded.writes == [HEAD, b"{}"]

    run(body)


def test_other_writes_are_not_held_and_keep_their_order() -> None:
    async def body(transport: CoalescingTransport, recorded: Recorded) -> None:
        transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # a head: held
        transport.write(b"chunk")
        transport.write(b"HTTP/1.1 400 Bad Request\r\n\r\nbad")  # not a head alone
        assert recorded.writes == [
            b"HTTP/1.1 100 Continue\r\n\r\nchunk",
            b"HTTP/1.1 400 Bad Request\r\n\r\nbad",
        ]

    run(body)


def test_close_writes_a_held_head_first_and_a_closed_transport_gets_nothing() -> None:
    async def body(transport: CoalescingTransport, recorded: Recorded) -> None:
        transport.write(HEAD)
        transport.close()
        assert recorded.writes == [HEAD] and recorded.closed
        transport.write(HEAD)  # after the peer went away: dropped on the turn
        await asyncio.sleep(0)
        assert recorded.writes == [HEAD]

    run(body)


def test_everything_else_is_the_transports() -> None:
    async def body(transport: CoalescingTransport, recorded: Recorded) -> None:
        assert transport.get_extra_info("peername") == "info:peername"
        assert not transport.is_closing()

    run(body)
