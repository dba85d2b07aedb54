"""A connection must send complete request headers within a few seconds (issue 23:
2,000 half-open connections were held for 20 s): api/http_protocol.py, which
`lb up` gives uvicorn (that `lb up`'s API closes them: tests/e2e/test_stack.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from api.http_protocol import HeaderTimeoutProtocol
from api.main import create_app
from conf.settings import Settings
from speed.server import free_port
from tests.support.clients import closed_within

TIMEOUT = 1.0


class ShortTimeout(HeaderTimeoutProtocol):
    header_timeout = TIMEOUT


@pytest.fixture
def served(settings: Settings) -> Iterator[int]:
    port = free_port()
    config = uvicorn.Config(
        create_app(settings),
        host="127.0.0.1",
        port=port,
        http=ShortTimeout,
        log_level="warning",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.05)
    yield port
    server.should_exit = True
    thread.join(timeout=30)


def _request(sock: socket.socket) -> bytes:
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
    reply = b""
    while b"\r\n\r\n" not in reply or not reply.endswith(b"}"):
        chunk = sock.recv(4096)
        assert chunk, reply
        reply += chunk
    return reply


@pytest.mark.integration
@pytest.mark.parametrize(
    "partial", [b"", b"GET /heal", b"GET /healthz HTTP/1.1\r\nHost: t\r\n"]
)
def test_a_connection_without_complete_headers_is_closed(
    served: int, partial: bytes
) -> None:
    with socket.create_connection(("127.0.0.1", served)) as sock:
        if partial:
            sock.sendall(partial)
        took = closed_within(sock, TIMEOUT + 5)
    assert took is not None, "the server held the half-open connection"
    assert took < TIMEOUT + 2


@pytest.mark.integration
def test_complete_requests_and_keep_alive_are_unaffected(served: int) -> None:
    with socket.create_connection(("127.0.0.1", served)) as sock:
        sock.settimeout(10)
        assert _request(sock).startswith(b"HTTP/1.1 200")
        # The next request on the same connection, within the deadline, answers.
        time.sleep(TIMEOUT / 2)
        assert _request(sock).startswith(b"HTTP/1.1 200")
        # Half of a next request after that is closed at the deadline.
        sock.sendall(b"GET /heal")
        assert closed_within(sock, TIMEOUT + 5) is not None


@pytest.mark.integration
def test_every_answer_arrives_whole_with_heads_written_with_their_bodies(
    served: int,
) -> None:
    """The head of each answer waits for its body (one write); a HEAD request's
    head, which has no body, still arrives; pipelined requests answer in order."""
    with socket.create_connection(("127.0.0.1", served)) as sock:
        sock.settimeout(10)
        sock.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            chunk = sock.recv(4096)
            assert chunk, head
            head += chunk
        assert head.startswith(b"HTTP/1.1 ") and b"content-length" in head.lower()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n" * 2)
        replies = b""
        while replies.count(b"HTTP/1.1 200") < 2 or not replies.endswith(b"}"):
            chunk = sock.recv(4096)
            assert chunk, replies
            replies += chunk
        for answer in replies.split(b"HTTP/1.1 200")[1:]:
            head, _, body = answer.partition(b"\r\n\r\n")
            assert body.startswith(b"{") and body.endswith(b"}"), answer
