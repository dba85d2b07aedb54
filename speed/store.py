"""The speed layer's write path: one atomic Lua transaction per event.

Events are grouped into one pipelined round trip per call; Redis runs the scripts one
after another in order, so a batch's results come back in the order it was sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, ResponseError

from conf.boards import BoardsConfig, BoardSpec, board_cutoff_ms, boards_for_event
from conf.rules import Implausible, RuleRegistry, default_registry
from speed.events import NormalizedEvent
from speed.lua import load
from speed.partitions import Keys, partition_of
from speed.scoring import score_event


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
    # "apply", or "release" (a quarantined event, as of its acceptance time).
    mode: str = "apply"


def decode_result(raw: bytes | str, event_id: str, player_id: str) -> dict[str, Any]:
    """The 200 body from the script's compact result
    ``status|partition|position|board,total,version[,status];...``."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    status, partition, position, items = text.split("|", 3)
    boards: list[dict[str, Any]] = []
    for part in items.split(";") if items else ():
        fields = part.split(",")
        item: dict[str, Any] = {
            "board": fields[0],
            "total": int(fields[1]),
            "version": int(fields[2]),
        }
        if len(fields) > 3:
            item["status"] = fields[3]
        boards.append(item)
    return {
        "eventId": event_id,
        "playerId": player_id,
        "status": status,
        "boards": boards,
        "partition": int(partition),
        "position": int(position),
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
        rules: RuleRegistry | None = None,
    ) -> None:
        self.client = client
        self.boards = boards
        self.rules = rules or default_registry()
        self.partitions = partitions
        self.retention_seconds = retention_seconds
        self.rate_limit = rate_limit
        self._apply = client.register_script(load("apply_event"))
        # boards_for_event depends only on the UTC date, the region and which seasons
        # hold the moment; a batch repeats few of those, so compute each once.
        self._boards_cache: dict[
            tuple[date, str, tuple[bool, ...]], list[BoardSpec]
        ] = {}
        self._season_bounds = [(s.start, s.end) for s in boards.seasons]
        # Key names and constant script arguments per (partition, board).
        self._board_cache: dict[tuple[int, str], tuple[str, ...]] = {}
        self._keys_cache: dict[int, Keys] = {}
        # Wall clock of the owner transaction (seconds); tests replace it to step time.
        self.clock = time.time
        # Quarantine thresholds of the latest generation: board -> cohort (region) ->
        # points; the API points this at its generation registry.
        self.thresholds: Callable[[], Mapping[str, Mapping[str, int]]] = dict
        self._thresholds_now: Mapping[str, Mapping[str, int]] = {}
        # first_achieved boards get the event's time with their aggregation.
        self._first_achieved = {
            f"season:{s.id}:{scope}"
            for s in boards.seasons
            if s.tie_break == "first_achieved"
            for scope in boards.scopes
        }
        if rate_limit is not None:
            self._rate_args = (rate_limit[0], int(rate_limit[1] * 1000))
        else:
            self._rate_args = (0, 1)

    def keys(self, partition: int) -> Keys:
        return Keys(partition)

    def _boards_for(self, occurred_at: datetime, region: str) -> list[BoardSpec]:
        moment = occurred_at
        if moment.tzinfo is not UTC:
            moment = moment.astimezone(UTC)
        key = (
            moment.date(),
            region,
            tuple([start <= moment < end for start, end in self._season_bounds]),
        )
        specs = self._boards_cache.get(key)
        if specs is None:
            if len(self._boards_cache) > 4096:
                self._boards_cache.clear()
            specs = boards_for_event(self.boards, moment, region)
            self._boards_cache[key] = specs
        return specs

    def _spec_for(self, board: str) -> BoardSpec:
        aggregation = "sum"
        rule = self.boards.rule
        if board.startswith("season:"):
            season = self.boards.season(board.split(":")[1])
            aggregation = season.aggregation if season else "sum"
            rule = season.rule if season else rule
        return BoardSpec(board, aggregation, board_cutoff_ms(self.boards, board), rule)

    def _script_args(self, call: _Call, now_ms: int) -> list[Any]:
        """The EVALSHA command for one event: sha, numkeys, keys, then arguments."""
        event = call.event.event
        player = event.playerId
        partition = call.partition
        keys = self._keys_cache.get(partition)
        if keys is None:
            keys = self._keys_cache[partition] = Keys(partition)
        if call.extra_boards:
            feeding = [(spec, True) for spec in call.specs]
            fed = {spec.board for spec in call.specs}
            feeding += [
                (self._spec_for(b), False) for b in call.extra_boards if b not in fed
            ]
        else:
            feeding = [(spec, True) for spec in call.specs]
        script_keys = [
            keys.dedupe(player, event.eventId),
            keys.contribution(player, event.matchId),
            keys.log,
            keys.position,
            keys.rate(player),
            keys.recent_matches(player),
            keys.flags,
            keys.quarantine,
        ]
        capacity, refill_ms = self._rate_args
        args: list[Any] = [
            player,
            event.eventId,
            event.matchId,
            event.sourceRevision,
            call.event.points,
            call.event.fingerprint,
            now_ms,
            self.retention_seconds,
            capacity,
            refill_ms,
            partition,
            call.event.log_json(),
            1 if event.kind == "correction" else 0,
            len(feeding),
            int(call.event.occurred_at.timestamp() * 1000),
            *call.event.limits,
            call.mode,
        ]
        scores = call.event.scores
        thresholds = self._thresholds_now
        board_cache = self._board_cache
        first_achieved = self._first_achieved
        for spec, feeds in feeding:
            board = spec.board
            cached = board_cache.get((partition, board))
            if cached is None:
                cached = board_cache[(partition, board)] = (
                    keys.totals(board),
                    keys.changed_live(board),
                    keys.changed_snapshot(board),
                    keys.fenwick(board),
                    keys.buckets(board),
                    keys.best(board, ""),
                )
            script_keys += [*cached[:5], cached[5] + player]
            aggregation = spec.aggregation
            if first_achieved and board in first_achieved:
                occurred_ms = int(call.event.occurred_at.timestamp() * 1000)
                aggregation = f"{aggregation}:fa:{occurred_ms}"
            args += [
                board,
                aggregation,
                spec.cutoff_ms,
                1 if feeds else 0,
                scores[spec.rule] if feeds else 0,
                spec.rule,
                thresholds.get(board, {}).get(event.region, 0),
            ]
        return ["EVALSHA", self._apply.sha, len(script_keys), *script_keys, *args]

    async def _evalsha_all(self, commands: list[list[Any]]) -> list[Any]:
        """Send every EVALSHA in one write and read the replies in order.

        What redis-py's non-transactional pipeline does, without its per-call SCRIPT
        EXISTS round trip and its pure-Python command packing (hiredis packs here).
        A reply that is an error is returned as the exception, like the pipeline's.
        """
        pool = self.client.connection_pool
        conn = await pool.get_connection()
        packed = b"".join([hiredis.pack_command(tuple(c)) for c in commands])

        async def send_and_read() -> list[Any]:
            await conn.send_packed_command(packed)
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(await conn.read_response())
                except ResponseError as exc:
                    replies.append(exc)
            return replies

        async def on_failure(error: BaseException) -> None:
            await conn.disconnect()

        try:
            return await conn.retry.call_with_retry(send_and_read, on_failure)  # type: ignore[no-any-return]
        finally:
            await pool.release(conn)

    async def run_script(
        self, script: Any, calls: list[tuple[list[Any], list[Any]]]
    ) -> list[Any]:
        """Run a read-only script once per (keys, args) in one round trip; reloads the
        script and runs again if Redis lost it (safe: nothing was changed)."""
        commands = [
            ["EVALSHA", script.sha, len(keys), *keys, *args] for keys, args in calls
        ]
        replies = await self._evalsha_all(commands)
        if any(isinstance(r, NoScriptError) for r in replies):
            await self.client.script_load(script.script)
            replies = await self._evalsha_all(commands)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    async def apply(
        self, events: list[NormalizedEvent], *, release_at_ms: int | None = None
    ) -> list[Outcome]:
        """Apply events in order; one pipelined round trip (plus rare retries).

        Events not scored yet (:func:`speed.scoring.score_event`) are scored here.
        """
        for e in events:
            if not e.scores:
                score_event(e, self.boards, self.rules)
        self._thresholds_now = self.thresholds() if release_at_ms is None else {}
        calls = [
            _Call(
                e,
                partition_of(e.event.playerId, self.partitions),
                self._boards_for(e.occurred_at, e.event.region),
                mode="apply" if release_at_ms is None else "release",
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
            now_ms = release_at_ms
            if now_ms is None:
                now_ms = int(self.clock() * 1000)
            replies = await self._evalsha_all(
                [self._script_args(calls[i], now_ms) for i in pending]
            )
            retry: list[int] = []
            script_missing = False
            for i, reply in zip(pending, replies, strict=True):
                if isinstance(reply, NoScriptError):
                    # The server lost its script cache (restart, SCRIPT FLUSH): nothing
                    # ran for this event; load the script and run it again.
                    script_missing = True
                    retry.append(i)
                    continue
                if isinstance(reply, Exception):
                    raise reply
                kind = reply[0].decode() if isinstance(reply[0], bytes) else reply[0]
                payload = reply[1]
                if kind in ("ok", "duplicate"):
                    event = calls[i].event.event
                    body = decode_result(payload, event.eventId, event.playerId)
                    if kind == "duplicate":
                        body["status"] = "duplicate"
                    outcomes[i] = Outcome(body=body)
                elif kind == "conflict":
                    outcomes[i] = Outcome(
                        error=EventConflict(
                            "eventId already used for this player "
                            "with different content"
                        )
                    )
                elif kind in ("superseded", "noop"):
                    # Release outcomes: nothing was applied.
                    event = calls[i].event.event
                    detail = payload.decode() if isinstance(payload, bytes) else payload
                    outcomes[i] = Outcome(
                        body={
                            "eventId": event.eventId,
                            "playerId": event.playerId,
                            "status": kind,
                            "detail": detail,
                        }
                    )
                elif kind == "rate_limited":
                    outcomes[i] = Outcome(error=RateLimited(int(payload)))
                elif kind == "implausible":
                    detail = payload.decode() if isinstance(payload, bytes) else payload
                    outcomes[i] = Outcome(
                        error=Implausible(detail.split(":", 1)[0], detail)
                    )
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
            if script_missing:
                await self.client.script_load(self._apply.script)
            pending = retry
        if pending:
            raise RuntimeError("contribution touched more boards than retries allow")
        return [o for o in outcomes if o is not None]
