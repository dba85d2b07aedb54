"""The asyncio client: the same surface as :class:`LeaderboardClient`, awaited.

async with AsyncLeaderboardClient(url, "dev", "dev-secret") as lb:
    result = await lb.submit(event)
    async for entry in lb.iter_entries("alltime:all:global"):
        ...
"""

from __future__ import annotations

import asyncio
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from typing import Any

import httpx

from leaderboard_client.client import (
    MAX_BATCH,
    RETRYABLE_TRANSPORT_ERRORS,
    Backoff,
    Paths,
    _segment,
    batch_items,
    encode,
    error_of,
    lost,
)
from leaderboard_client.errors import LeaderboardError, OutcomeUnknown
from leaderboard_client.models import (
    Awards,
    BatchItem,
    Board,
    Entry,
    EventResult,
    Friends,
    Page,
    PlayerRank,
    Top,
)


class AsyncLeaderboardClient(Paths):
    """:class:`leaderboard_client.LeaderboardClient` for asyncio (httpx's
    ``AsyncClient``): the same arguments, redelivery and errors."""

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
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        transport: httpx.AsyncBaseTransport | None = None,
        reader_token: str | None = None,
        http: httpx.AsyncClient | None = None,
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
        self.http = http or httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout, transport=transport
        )

    async def aclose(self) -> None:
        if self._own_http:
            await self.http.aclose()

    async def __aenter__(self) -> AsyncLeaderboardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        last: LeaderboardError | None = None
        for attempt in range(self.max_attempts):
            sent = self._headers(body, headers)
            retry_after: float | None = None
            try:
                response = await self.http.request(
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
                await self.sleep(self.backoff.delay(attempt, retry_after))
        assert last is not None
        raise last

    # -- writes -----------------------------------------------------------------

    async def submit(self, event: Mapping[str, Any]) -> EventResult:
        body = await self._send("POST", self._path("score-events"), body=encode(event))
        return EventResult.of(body)

    async def submit_batch(
        self, events: Iterable[Mapping[str, Any]], batch_size: int = MAX_BATCH
    ) -> list[BatchItem]:
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be 1..{MAX_BATCH}")
        pending = list(events)
        items: list[BatchItem] = []
        for start in range(0, len(pending), batch_size):
            chunk = pending[start : start + batch_size]
            try:
                answer = await self._send(
                    "POST",
                    self._path("score-events:batch"),
                    body=encode({"events": list(chunk)}),
                )
            except OutcomeUnknown as exc:
                exc.completed = list(items)
                raise
            items += batch_items(chunk, answer["results"])
        return items

    async def set_friends(self, player_id: str, friends: Sequence[str]) -> list[str]:
        path = f"/v1/players/{_segment(player_id)}/friends"
        body = await self._send("PUT", path, body=encode({"friends": list(friends)}))
        return [str(f) for f in body["friends"]]

    async def set_profile(
        self,
        player_id: str,
        display_name: str | None = None,
        country: str | None = None,
    ) -> dict[str, Any]:
        payload = {"displayName": display_name, "country": country}
        path = f"/v1/players/{_segment(player_id)}/profile"
        body = {k: v for k, v in payload.items() if v is not None}
        return dict(await self._send("PUT", path, body=encode(body)))

    # -- reads ------------------------------------------------------------------

    async def games(self) -> list[dict[str, Any]]:
        return list((await self._send("GET", "/v1/games"))["games"])

    async def boards(self) -> list[Board]:
        answer = await self._send("GET", self._path("boards"))
        return [Board.of(b) for b in answer["boards"]]

    async def top(
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
        path = self._board_path(board, "/top")
        return Top.of(await self._send("GET", path, params=params))

    async def rank(
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
        return PlayerRank.of(await self._send("GET", path, params=params))

    async def nearby(
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
        return Page.of(await self._send("GET", path, params=params))

    async def entries(
        self,
        board: str,
        *,
        cursor: str | None = None,
        limit: int = 50,
        generation: str | None = None,
        ranking: str | None = None,
    ) -> Page:
        params = {
            "cursor": cursor,
            "limit": limit,
            "generation": generation,
            "ranking": ranking,
        }
        path = self._board_path(board, "/entries")
        return Page.of(await self._send("GET", path, params=params))

    async def iter_entries(
        self, board: str, *, limit: int = 50, generation: str | None = None
    ) -> AsyncIterator[Entry]:
        page = await self.entries(board, limit=limit, generation=generation)
        while True:
            for entry in page.entries:
                yield entry
            if page.cursors.after is None:
                return
            page = await self.entries(board, cursor=page.cursors.after, limit=limit)

    async def friends(
        self,
        board: str,
        player_id: str,
        player_token: str,
        *,
        mode: str | None = None,
        generation: str | None = None,
        ranking: str | None = None,
    ) -> Friends:
        path = self._board_path(board, f"/players/{_segment(player_id)}/friends")
        params = {"mode": mode, "generation": generation, "ranking": ranking}
        headers = {"Authorization": f"Bearer {player_token}"}
        answer = await self._send("GET", path, params=params, headers=headers)
        return Friends.of(answer)

    async def awards(
        self,
        board: str,
        *,
        version: int | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> Awards:
        params = {"version": version, "cursor": cursor, "limit": limit}
        path = self._board_path(board, "/awards")
        return Awards.of(await self._send("GET", path, params=params))

    async def iter_awards(
        self, board: str, *, version: int | None = None, limit: int = 50
    ) -> AsyncIterator[Entry]:
        page = await self.awards(board, version=version, limit=limit)
        while True:
            for entry in page.entries:
                yield entry
            if page.cursors.after is None:
                return
            page = await self.awards(
                board, version=page.version, cursor=page.cursors.after
            )
