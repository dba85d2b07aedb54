"""The speed layer's write path: one atomic Lua transaction per event.

Events are grouped into one pipelined round trip per call; Redis runs the scripts one
after another in order, so a batch's results come back in the order it was sent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis.asyncio as aioredis

from conf.boards import BoardsConfig, BoardSpec, boards_for_event, season_cutoffs_ms
from speed.events import NormalizedEvent
from speed.lua import load
from speed.partitions import Keys, partition_of


class EventConflict(Exception):
    """Same (playerId, eventId) with different content."""


class RateLimited(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"rate limited; retry after {retry_after} s")
        self.retry_after = retry_after


@dataclass(slots=True)
class Outcome:
    """What happened to one event: a 200 body, or an error to map to HTTP."""

    body: dict[str, Any] | None = None
    error: Exception | None = None


@dataclass(slots=True)
class _Call:
    event: NormalizedEvent
    partition: int
    specs: list[BoardSpec]
    extra_boards: list[str] = field(default_factory=list)


def _decode_result(raw: bytes | str) -> dict[str, Any]:
    raw_body: dict[str, Any] = orjson.loads(raw)
    # cjson encodes an empty Lua table as {} and orders keys by hash; rebuild the
    # body in the contract's order with a list of boards.
    boards = raw_body.get("boards") or []
    return {
        "eventId": raw_body["eventId"],
        "playerId": raw_body["playerId"],
        "status": raw_body["status"],
        "boards": [
            {
                "board": b["board"],
                "total": int(b["total"]),
                "version": int(b["version"]),
                **({"status": b["status"]} if "status" in b else {}),
            }
            for b in boards
        ],
        "partition": int(raw_body["partition"]),
        "position": int(raw_body["position"]),
    }


class SpeedLayer:
    """Applies events to Redis; reads live per-partition state for the API."""

    def __init__(
        self,
        client: aioredis.Redis,
        boards: BoardsConfig,
        partitions: int,
        retention_seconds: int,
        rate_limit: tuple[int, float] | None,
    ) -> None:
        self.client = client
        self.boards = boards
        self.partitions = partitions
        self.retention_seconds = retention_seconds
        self.rate_limit = rate_limit
        self._apply = client.register_script(load("apply_event"))
        self._cutoffs = season_cutoffs_ms(boards)

    def keys(self, partition: int) -> Keys:
        return Keys(partition)

    def _spec_for(self, board: str) -> BoardSpec:
        aggregation = "sum"
        if board.startswith("season:"):
            season = self.boards.season(board.split(":")[1])
            aggregation = season.aggregation if season else "sum"
        return BoardSpec(board, aggregation, self._cutoffs.get(board, 0))

    def _script_args(self, call: _Call, now_ms: int) -> tuple[list[str], list[Any]]:
        event = call.event.event
        keys = Keys(call.partition)
        feeding = [(spec, True) for spec in call.specs]
        fed = {spec.board for spec in call.specs}
        feeding += [(self._spec_for(b), False) for b in call.extra_boards if b not in fed]
        script_keys = [
            keys.dedupe(event.playerId, event.eventId),
            keys.contribution(event.playerId, event.matchId),
            keys.log,
            keys.position,
            keys.rate(event.playerId),
        ]
        capacity, refill_ms = 0, 1
        if self.rate_limit is not None:
            capacity, refill_ms = self.rate_limit[0], int(self.rate_limit[1] * 1000)
        args: list[Any] = [
            event.playerId,
            event.eventId,
            event.matchId,
            event.sourceRevision,
            event.result.points,
            call.event.fingerprint,
            now_ms,
            self.retention_seconds,
            capacity,
            refill_ms,
            call.partition,
            call.event.canonical,
            1 if event.kind == "correction" else 0,
            len(feeding),
        ]
        for spec, feeds in feeding:
            script_keys += [
                keys.totals(spec.board),
                keys.changed_live(spec.board),
                keys.changed_snapshot(spec.board),
                keys.fenwick(spec.board),
                keys.buckets(spec.board),
                keys.best(spec.board, event.playerId),
            ]
            args += [spec.board, spec.aggregation, spec.cutoff_ms, 1 if feeds else 0]
        return script_keys, args

    async def apply(self, events: list[NormalizedEvent]) -> list[Outcome]:
        """Apply events in order; one pipelined round trip (plus rare retries)."""
        calls = [
            _Call(
                e,
                partition_of(e.event.playerId, self.partitions),
                boards_for_event(self.boards, e.occurred_at, e.event.region),
            )
            for e in events
        ]
        outcomes: list[Outcome | None] = [None] * len(calls)
        pending = list(range(len(calls)))
        # Each retry adds one board the stored contribution touched; a match can only
        # have touched a bounded number of boards, so this loop ends.
        for _ in range(64):
            if not pending:
                break
            now_ms = int(time.time() * 1000)
            pipe = self.client.pipeline(transaction=False)
            for i in pending:
                script_keys, args = self._script_args(calls[i], now_ms)
                await self._apply(keys=script_keys, args=args, client=pipe)
            replies = await pipe.execute()
            retry: list[int] = []
            for i, reply in zip(pending, replies, strict=True):
                kind = reply[0].decode() if isinstance(reply[0], bytes) else reply[0]
                payload = reply[1]
                if kind in ("ok", "duplicate"):
                    body = _decode_result(payload)
                    if kind == "duplicate":
                        body["status"] = "duplicate"
                    outcomes[i] = Outcome(body=body)
                elif kind == "conflict":
                    outcomes[i] = Outcome(error=EventConflict(
                        "eventId already used for this player with different content"))
                elif kind == "rate_limited":
                    outcomes[i] = Outcome(error=RateLimited(int(payload)))
                elif kind == "retry":
                    calls[i].extra_boards.append(
                        payload.decode() if isinstance(payload, bytes) else payload
                    )
                    retry.append(i)
                else:  # pragma: no cover - the script returns only the kinds above
                    raise RuntimeError(f"unexpected script reply {kind!r}")
            # A retried event had no side effect; running it after the rest of the
            # batch is the same as receiving it a moment later, and its log position
            # records that order for the batch layer.
            pending = retry
        if pending:
            raise RuntimeError("contribution touched more boards than retries allow")
        return [o for o in outcomes if o is not None]
