"""The leaderboard service's client: signed writes with safe redelivery, typed reads.

Writes are signed (``X-Key-Id``, ``X-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret,
"<t>.<raw body>")>``). A 503, a timeout or a lost connection means the outcome is
unknown: the client sends the *same bytes* again (same eventId and content, a fresh
signature) after a jittered exponential back-off, a bounded number of times. The
service answers a redelivery with the saved result of the first acceptance
(``duplicate``), so an event is never counted twice.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from leaderboard_client.errors import (
    LeaderboardError,
    OutcomeUnknown,
    Unavailable,
    error_for,
)
from leaderboard_client.models import (
    Awards,
    BatchItem,
    Board,
    Entry,
    EventError,
    EventResult,
    Friends,
    Page,
    PlayerRank,
    Top,
)

MAX_BATCH = 1000
# Errors after which the request may or may not have reached the service.
RETRYABLE_TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)


def sign(secret: bytes | str, body: bytes, timestamp: int | None = None) -> str:
    """The ``X-Signature`` value for ``body`` at ``timestamp`` (default: now)."""
    key = secret.encode() if isinstance(secret, str) else secret
    t = int(time.time()) if timestamp is None else int(timestamp)
    mac = hmac.new(key, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def encode(payload: Any) -> bytes:
    """Compact JSON, as sent (and signed)."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


class Backoff:
    """Full-jitter exponential back-off: attempt ``n`` (0-based) waits a uniform
    time in ``[0, min(cap, base * 2**n)]``, and at least a ``Retry-After``."""

    def __init__(
        self,
        base: float = 0.1,
        cap: float = 5.0,
        rng: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.base = base
        self.cap = cap
        self.rng = rng

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        ceiling = min(self.cap, self.base * (2**attempt))
        wait = self.rng(0.0, ceiling)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.cap))
        return wait


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _segment(value: str) -> str:
    return quote(value, safe=":-_.@+")


def batch_items(
    chunk: Sequence[Mapping[str, Any]], results: Sequence[dict[str, Any]]
) -> list[BatchItem]:
    """One item per event of a batch answer, in order."""
    items: list[BatchItem] = []
    for sent, result in zip(chunk, results, strict=True):
        if "error" in result:
            event_id = sent.get("eventId")
            items.append(
                EventError(
                    event_id=str(event_id) if event_id is not None else None,
                    code=str(result["error"]),
                    detail=str(result.get("detail", "")),
                    raw=result,
                )
            )
        else:
            items.append(EventResult.of(result))
    return items


def error_of(response: httpx.Response) -> LeaderboardError:
    """The exception of an error answer (a 503 is always :class:`Unavailable`)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"error": "http_error", "detail": response.text[:200]}
    error = error_for(response.status_code, body, _retry_after(response))
    if response.status_code == 503 and not isinstance(error, Unavailable):
        error = Unavailable(
            error.detail, code=error.code, body=body, retry_after=error.retry_after
        )
    return error


def lost(exc: Exception, attempt: int) -> OutcomeUnknown:
    unknown = OutcomeUnknown(
        f"{type(exc).__name__}: {exc} (after {attempt + 1} attempts)"
    )
    unknown.__cause__ = exc
    return unknown


class Paths:
    """What the sync and the async client share: paths and signed headers."""

    game: str | None
    key_id: str | None
    secret: bytes | None
    reader_token: str | None

    def _path(self, tail: str) -> str:
        """``/v1/<tail>``, or ``/v1/games/<game>/<tail>`` for a game's paths."""
        if self.game is None:
            return f"/v1/{tail}"
        return f"/v1/games/{_segment(self.game)}/{tail}"

    def _board_path(self, board: str, tail: str = "") -> str:
        return self._path(f"boards/{_segment(board)}{tail}")

    def _headers(
        self, body: bytes | None, headers: Mapping[str, str] | None
    ) -> dict[str, str]:
        """One attempt's headers: a write signed afresh (the timestamp moves), a
        read with the reader token unless the call brings its own."""
        sent = dict(headers or {})
        if body is not None:
            if self.key_id is None or self.secret is None:
                raise ValueError("writes need key_id and secret")
            sent |= {
                "Content-Type": "application/json",
                "X-Key-Id": self.key_id,
                "X-Signature": sign(self.secret, body),
            }
        elif self.reader_token and "Authorization" not in sent:
            sent["Authorization"] = f"Bearer {self.reader_token}"
        return sent


class LeaderboardClient(Paths):
    """A client of one deployment (``base_url``, e.g. ``http://127.0.0.1:8080``).

    ``key_id`` and ``secret`` sign writes (a game-server key of ``LB_HMAC_KEYS``);
    reads need neither. ``game`` addresses a game's own paths
    (``/v1/games/{game}/...``); None uses the unprefixed paths (the game
    ``default``). ``max_attempts`` bounds every request's attempts (503s, timeouts,
    connection errors); ``sleep`` and ``backoff`` are injectable for tests.
    ``reader_token`` is sent as ``Authorization: Bearer`` on reads (deployments with
    ``LB_READ_AUTH=token``).
    """

    def __init__(
        self,
        base_url: str,
        key_id: str | None = None,
        secret: bytes | str | None = None,
        *,
        game: str | None = None,
        timeout: float = 10.0,
        max_attempts: int = 5,
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
        reader_token: str | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.base_url = base_url.rstrip("/")
        self.key_id = key_id
        self.secret = secret.encode() if isinstance(secret, str) else secret
        self.game = game
        self.max_attempts = max_attempts
        self.backoff = backoff or Backoff()
        self.sleep = sleep
        self.reader_token = reader_token
        self._own_http = http is None
        self.http = http or httpx.Client(
            base_url=self.base_url, timeout=timeout, transport=transport
        )

    # -- plumbing ---------------------------------------------------------------

    def close(self) -> None:
        if self._own_http:
            self.http.close()

    def __enter__(self) -> LeaderboardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """One request, redelivered on 503, timeouts and connection errors with the
        same body (signed afresh each attempt); the JSON of the 2xx answer."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        last: LeaderboardError | None = None
        for attempt in range(self.max_attempts):
            sent = self._headers(body, headers)
            retry_after: float | None = None
            try:
                response = self.http.request(
                    method, path, content=body, params=query, headers=sent
                )
            except RETRYABLE_TRANSPORT_ERRORS as exc:
                last = lost(exc, attempt)
            else:
                if response.status_code < 400:
                    return response.json()
                error = error_of(response)
                if response.status_code != 503:
                    raise error
                last, retry_after = error, error.retry_after
            if attempt + 1 < self.max_attempts:
                self.sleep(self.backoff.delay(attempt, retry_after))
        assert last is not None
        raise last

    # -- writes -----------------------------------------------------------------

    def submit(self, event: Mapping[str, Any]) -> EventResult:
        """Submit one score event; redelivered (same bytes) until it has an answer.

        :raises EventConflict: the eventId was accepted with other content (409).
        :raises RateLimited: ``retry_after`` seconds (429); not retried here.
        :raises Invalid: invalid_request, too_old or implausible (422).
        :raises OutcomeUnknown: no answer after ``max_attempts``: redeliver later.
        """
        body = self._send("POST", self._path("score-events"), body=encode(event))
        return EventResult.of(body)

    def submit_batch(
        self, events: Iterable[Mapping[str, Any]], batch_size: int = MAX_BATCH
    ) -> list[BatchItem]:
        """Submit events in requests of at most ``batch_size`` (1,000, the service's
        limit); one item per event, in order: an :class:`EventResult` or, for an
        event the service refused, an :class:`EventError` (``.exception()``).

        A request without an answer after ``max_attempts`` raises
        :class:`OutcomeUnknown` with ``completed`` (the items of the requests that
        were answered); redelivering the whole list is safe.
        """
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be 1..{MAX_BATCH}")
        pending = list(events)
        items: list[BatchItem] = []
        for start in range(0, len(pending), batch_size):
            chunk = pending[start : start + batch_size]
            try:
                answer = self._send(
                    "POST",
                    self._path("score-events:batch"),
                    body=encode({"events": list(chunk)}),
                )
            except OutcomeUnknown as exc:
                exc.completed = list(items)
                raise
            items += batch_items(chunk, answer["results"])
        return items

    def set_friends(self, player_id: str, friends: Sequence[str]) -> list[str]:
        """Replace the player's friend list; the stored list (without the player)."""
        path = f"/v1/players/{_segment(player_id)}/friends"
        body = self._send("PUT", path, body=encode({"friends": list(friends)}))
        return [str(f) for f in body["friends"]]

    def set_profile(
        self,
        player_id: str,
        display_name: str | None = None,
        country: str | None = None,
    ) -> dict[str, Any]:
        """Set the player's display name and country (ranked entries carry them)."""
        payload = {"displayName": display_name, "country": country}
        path = f"/v1/players/{_segment(player_id)}/profile"
        body = {k: v for k, v in payload.items() if v is not None}
        return dict(self._send("PUT", path, body=encode(body)))

    # -- reads ------------------------------------------------------------------

    def games(self) -> list[dict[str, Any]]:
        return list(self._send("GET", "/v1/games")["games"])

    def boards(self) -> list[Board]:
        return [Board.of(b) for b in self._send("GET", self._path("boards"))["boards"]]

    def top(
        self,
        board: str,
        limit: int = 100,
        *,
        mode: str | None = None,
        generation: str | None = None,
        ranking: str | None = None,
    ) -> Top:
        params = {
            "limit": limit,
            "mode": mode,
            "generation": generation,
            "ranking": ranking,
        }
        return Top.of(self._send("GET", self._board_path(board, "/top"), params=params))

    def rank(
        self,
        board: str,
        player_id: str,
        *,
        mode: str | None = None,
        generation: str | None = None,
        ranking: str | None = None,
    ) -> PlayerRank:
        path = self._board_path(board, f"/players/{_segment(player_id)}")
        params = {"mode": mode, "generation": generation, "ranking": ranking}
        return PlayerRank.of(self._send("GET", path, params=params))

    def nearby(
        self,
        board: str,
        player_id: str,
        radius: int = 5,
        *,
        mode: str | None = None,
        generation: str | None = None,
        ranking: str | None = None,
    ) -> Page:
        path = self._board_path(board, f"/players/{_segment(player_id)}/nearby")
        params = {
            "radius": radius,
            "mode": mode,
            "generation": generation,
            "ranking": ranking,
        }
        return Page.of(self._send("GET", path, params=params))

    def entries(
        self,
        board: str,
        *,
        cursor: str | None = None,
        limit: int = 50,
        generation: str | None = None,
        ranking: str | None = None,
    ) -> Page:
        """One page of a generation (the latest unless pinned) in display order;
        its ``cursors.after`` reads the next page of the same generation."""
        params = {
            "cursor": cursor,
            "limit": limit,
            "generation": generation,
            "ranking": ranking,
        }
        return Page.of(
            self._send("GET", self._board_path(board, "/entries"), params=params)
        )

    def iter_entries(
        self, board: str, *, limit: int = 50, generation: str | None = None
    ) -> Iterator[Entry]:
        """Every entry of one generation, page by page (the first page's cursor
        pins its generation, so the walk sees one consistent ranking)."""
        page = self.entries(board, limit=limit, generation=generation)
        while True:
            yield from page.entries
            if page.cursors.after is None:
                return
            page = self.entries(board, cursor=page.cursors.after, limit=limit)

    def friends(
        self,
        board: str,
        player_id: str,
        player_token: str,
        *,
        mode: str | None = None,
        generation: str | None = None,
        ranking: str | None = None,
    ) -> Friends:
        """The player and friends ranked among themselves (the player's token)."""
        path = self._board_path(board, f"/players/{_segment(player_id)}/friends")
        params = {"mode": mode, "generation": generation, "ranking": ranking}
        headers = {"Authorization": f"Bearer {player_token}"}
        return Friends.of(self._send("GET", path, params=params, headers=headers))

    def awards(
        self,
        board: str,
        *,
        version: int | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> Awards:
        """A page of a closed season's award snapshot (404 NotFound
        ``awards_not_found`` before the close)."""
        params = {"version": version, "cursor": cursor, "limit": limit}
        return Awards.of(
            self._send("GET", self._board_path(board, "/awards"), params=params)
        )

    def iter_awards(
        self, board: str, *, version: int | None = None, limit: int = 50
    ) -> Iterator[Entry]:
        page = self.awards(board, version=version, limit=limit)
        while True:
            yield from page.entries
            if page.cursors.after is None:
                return
            page = self.awards(board, version=page.version, cursor=page.cursors.after)
