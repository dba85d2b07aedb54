"""The speed layer's write path: one atomic Lua transaction per event.

Events are grouped into one pipelined round trip per call; Redis runs the scripts one
after another in order, so a batch's results come back in the order it was sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import redis.asyncio as aioredis
from prometheus_client import Histogram
from redis.exceptions import NoScriptError

from conf.boards import (
    DEFAULT_GAME,
    BoardsConfig,
    BoardSpec,
    board_cutoff_ms,
    board_rules,
    boards_for_event,
    qualify,
)
from conf.rules import Implausible, RuleRegistry, default_registry
from serving.landed import CONTRIBUTION, DEDUPE
from serving.registry import Generation
from speed.baserows import base_entries, derive_partition_rows
from speed.connection import ReplicaWait, send_commands
from speed.events import NormalizedEvent
from speed.partitions import Keys, partition_of
from speed.records import (
    EPOCHS_FIELD,
    bucket_expire_at,
    decode_compact,
    event_periods,
    fingerprint_prefix,
    identity_parts,
    parse_epochs,
    record_context,
    short_board,
    slice_of,
)
from speed.scoring import score_event
from speed.scripts import APPLY_EVENT, pack_strings, register

# Events of one partition per script call at most: bounds the time Redis spends in
# one script (other clients wait meanwhile) and the size of its unpack() calls.
MAX_CHUNK = 256
# Boards a stored contribution may name beyond the ones the event feeds.
MAX_RETRIES = 64
# Calls with at most this many events are grouped with concurrent ones (a batch
# request already is a group).
GROUP_MAX_EVENTS = 16
GROUP_SIZE = Histogram(
    "lb_speed_group_commit_calls",
    "Concurrent apply() calls sent together in one group commit",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128),
)


# (bucket, field, key, check) of a record identity (speed/records.py identity_parts).
_Identity = tuple[int, bytes, int, int]
# (local row, base) of a player not in the base segment (speed/baserows.py).
NOT_IN_BASE = (-1, "")
# The owner transaction's packed per-event records (speed/scripts.py declares them).
_EV = APPLY_EVENT.packer("EV")
_EV_BOARD = APPLY_EVENT.packer("EV_BOARD")
# Rounds a chunk may be refused because its partition was rebased meanwhile.
MAX_REBASED = 20


class BaseUnavailable(RuntimeError):
    """The partition's base generation is not readable here: the base rows of a
    write cannot be named (the API maps every generation a partition is based on)."""


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


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def decode_result(
    raw: bytes | str,
    event_id: str,
    player_id: str,
    partition: int,
    periods: dict[str, str] | None = None,
    region: str = "",
) -> dict[str, Any]:
    """The 200 body from the script's compact result (speed/records.py);
    ``periods`` (:func:`speed.records.event_periods` of the event) and the event's
    ``region`` expand short board names."""
    status, position, boards = decode_compact(raw, periods, region)
    return {
        "eventId": event_id,
        "playerId": player_id,
        "status": status,
        "boards": boards,
        "partition": partition,
        "position": position,
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
        self.rules = rules or default_registry()
        self.partitions = partitions
        self.retention_seconds = retention_seconds
        self.rate_limit = rate_limit
        self._apply = register(client, APPLY_EVENT)
        self._keys_cache: dict[int, Keys] = {}
        self.use_boards(boards)
        self._periods_cache: dict[date, dict[str, str]] = {}
        self._texts_cache: dict[tuple[str, str, str], bytes] = {}
        # Wall clock of the owner transaction (seconds); tests replace it to step time.
        self.clock = time.time
        # Quarantine thresholds of the latest generation: board -> cohort (region) ->
        # points; the API points this at its generation registry.
        self.thresholds: Callable[[], Mapping[str, Mapping[str, int]]] = dict
        self._thresholds_now: Mapping[str, Mapping[str, int]] = {}
        # Generation number -> mapped generation (the API points this at its
        # registry, speed/baserows.py registry_lookup); the owner transaction needs
        # each player's row in its partition's base generation.
        self.base_generations: Callable[[int], Generation | None] = lambda n: None
        # Base generation per partition as last seen (-1: ask the script), and
        # its live record epochs (the base hash's "ep", speed/records.py).
        self._bases: dict[int, int] = {}
        self._epochs: dict[int, str] = {}
        # Group commit of concurrent small calls (see apply()).
        self.group_window_us = 0
        # (replicas, timeout ms) each master must count with WAIT after the owner
        # transactions before they are acknowledged (LB_REPLICA_ACKS); None: no WAIT.
        self.replica_wait: ReplicaWait | None = None
        self._group: list[tuple[list[NormalizedEvent], asyncio.Future[Any]]] = []
        self._group_task: asyncio.Task[None] | None = None
        if rate_limit is not None:
            self._rate_args = (rate_limit[0], int(rate_limit[1] * 1000))
        else:
            self._rate_args = (0, 1)
        self.key_rate_limit = None

    @property
    def key_rate_limit(self) -> tuple[int, float] | None:
        """(capacity, refillSeconds) of each signing key's bucket (None: off), split
        evenly over the partitions: each owner transaction keeps its share, a
        ``1/partitions`` part of the capacity refilled ``partitions`` times slower,
        since a key's new matches spread evenly over them."""
        return self._key_rate_limit

    @key_rate_limit.setter
    def key_rate_limit(self, limit: tuple[int, float] | None) -> None:
        self._key_rate_limit = limit
        self._key_rate_args: tuple[int, float] | None = None
        if limit is not None:
            capacity, refill = limit
            share = max(1, -(-capacity // self.partitions))
            # Milliseconds per token of a partition's share (a fraction is fine).
            self._key_rate_args = (share, refill * 1000 * self.partitions)

    def use_boards(self, boards: BoardsConfig) -> None:
        """Score from now on under ``boards`` (at start, and when a running API sees
        a season promoted to another rule): everything derived from it is rebuilt."""
        self.boards = boards
        # boards_for_event depends only on the UTC date, the region and which seasons
        # hold the moment; a batch repeats few of those, so compute each once.
        self._boards_cache: dict[
            tuple[date, str, tuple[bool, ...], str], list[BoardSpec]
        ] = {}
        self._season_bounds = {
            game: [(s.start, s.end) for s in own.seasons]
            for game, own in boards.each_game()
        }
        # Key names and constant script arguments per (partition, board).
        self._board_cache: dict[tuple[int, str], tuple[list[Any], ...]] = {}
        # first_achieved boards get the event's time with their aggregation.
        self._first_achieved = {
            qualify(game, f"season:{s.id}:{scope}")
            for game, own in boards.each_game()
            for s in own.seasons
            if s.tie_break == "first_achieved"
            for scope in own.scopes
        }

    def keys(self, partition: int) -> Keys:
        return Keys(partition)

    def _boards_for(
        self, occurred_at: datetime, region: str, game: str = DEFAULT_GAME
    ) -> list[BoardSpec]:
        moment = occurred_at
        if moment.tzinfo is not UTC:
            moment = moment.astimezone(UTC)
        key = (
            moment.date(),
            region,
            tuple(
                [
                    start <= moment < end
                    for start, end in self._season_bounds.get(game, ())
                ]
            ),
            game,
        )
        specs = self._boards_cache.get(key)
        if specs is None:
            if len(self._boards_cache) > 4096:
                self._boards_cache.clear()
            specs = boards_for_event(self.boards, moment, region, game)
            self._boards_cache[key] = specs
        return specs

    def _periods_of(self, normalized: NormalizedEvent) -> dict[str, str]:
        """The rolling periods of the event's occurredAt (cached per UTC day)."""
        moment = normalized.occurred_at.astimezone(UTC)
        periods = self._periods_cache.get(moment.date())
        if periods is None:
            if len(self._periods_cache) > 4096:
                self._periods_cache.clear()
            periods = self._periods_cache[moment.date()] = event_periods(moment)
        return periods

    def _spec_for(self, board: str) -> BoardSpec:
        rules = board_rules(self.boards, board)
        return BoardSpec(
            board,
            rules.aggregation,
            board_cutoff_ms(self.boards, board),
            rules.rule,
            rules.order,
        )

    def _board_entry(self, partition: int, spec: BoardSpec) -> tuple[list[Any], ...]:
        """KEY_GROUP and ARG_GROUP of one board of a chunk's board table, plus the
        prefix of its players' best-of keys (cached per partition and board)."""
        cached = self._board_cache.get((partition, spec.board))
        if cached is None:
            keys = self._keys_cache.get(partition)
            if keys is None:
                keys = self._keys_cache[partition] = Keys(partition)
            board = spec.board
            cached = self._board_cache[(partition, board)] = (
                [
                    keys.totals(board),
                    keys.changed_live(board),
                    keys.changed_snapshot(board),
                    keys.changed_counts(board),
                    keys.fenwick(board),
                    keys.buckets(board),
                ],
                [
                    board,
                    spec.aggregation,
                    1 if board in self._first_achieved else 0,
                    spec.cutoff_ms,
                    spec.rule,
                    spec.sign,
                ],
                [keys.best(board, "")],
            )
        return cached

    def _chunk_command(
        self, partition: int, calls: list[_Call], mode: str, now_ms: int
    ) -> list[Any]:
        """The EVALSHA of one chunk of one partition's events (speed/scripts.py
        declares the layout; the order of each list below is checked against it)."""
        keys = self._keys_cache.get(partition)
        if keys is None:
            keys = self._keys_cache[partition] = Keys(partition)
        capacity, refill_ms = self._rate_args
        thresholds = self._thresholds_now
        base_number = self._bases.get(partition, -1)
        generation: Generation | None = None
        if base_number > 0:
            generation = self.base_generations(base_number)
            if generation is None:
                # Not readable (any more): ask the script for the partition's base.
                base_number = -1
        rows: dict[tuple[str, str], tuple[int, str]] = {}
        board_index: dict[str, int] = {}
        best_prefix: list[str] = []
        script_keys: list[Any] = [
            keys.log,
            keys.position,
            keys.flags,
            keys.quarantine,
            keys.base_generation,
        ]
        board_args: list[Any] = []
        event_keys: list[Any] = []
        event_args: list[Any] = []
        per_event: list[tuple[_Call, list[tuple[BoardSpec, bool]]]] = []
        for call in calls:
            feeding = [(spec, True) for spec in call.specs]
            if call.extra_boards:
                fed = {spec.board for spec in call.specs}
                feeding += [
                    (self._spec_for(b), False)
                    for b in call.extra_boards
                    if b not in fed
                ]
            for spec, _ in feeding:
                if spec.board not in board_index:
                    board_index[spec.board] = len(board_index) + 1
                    group_keys, group_args, prefix = self._board_entry(partition, spec)
                    script_keys += group_keys
                    board_args += group_args
                    best_prefix += prefix
            per_event.append((call, feeding))
        if generation is not None:
            # Base rows per board, each board's players looked up in one batch.
            wanted: dict[str, dict[str, None]] = {}
            for call, feeding in per_event:
                for spec, _ in feeding:
                    wanted.setdefault(spec.board, {})[call.event.event.playerId] = None
            for board, players in wanted.items():
                names = list(players)
                found = base_entries(generation, board, self.partitions, names)
                rows.update(
                    ((board, name), row) for name, row in zip(names, found, strict=True)
                )
        # KEYS of the events follow the board table's (1-based, as in Lua).
        key_at = len(script_keys) + 1
        # Dedupe and contribution records are in the buckets of the live record
        # epochs, newest first, or landed in the base generation's index.
        # None known yet: the script starts epoch 1 if none is (apply_event.lua).
        epochs = parse_epochs(self._epochs.get(partition)) or [1]
        epochs_text = ",".join(map(str, epochs))
        # Each event's record identities, hashed once: (bucket, field) in Redis,
        # (key, check) in the landed records index (speed/records.py).
        hashes = [
            (
                identity_parts(c.event.identity, c.event.event.eventId),
                identity_parts(c.event.identity, c.event.event.matchId),
            )
            for c in calls
        ]
        landed_dedupe, landed_contribution = self._landed(generation, hashes)
        wall = self.clock()
        for n_call, (call, feeding) in enumerate(per_event):
            normalized = call.event
            event = normalized.event
            player = event.playerId
            occurred_ms = int(normalized.occurred_at.timestamp() * 1000)
            # Records of the player within its game (NormalizedEvent.identity).
            identity = normalized.identity
            (bucket, dedupe_field, _, _), (match_bucket, contribution_field, _, _) = (
                hashes[n_call]
            )
            event_keys += [
                keys.rate(identity),
                keys.recent_matches(identity),
                *(keys.dedupe_bucket(e, bucket) for e in epochs),
                *(keys.contribution_bucket(e, match_bucket) for e in epochs),
            ]
            first_key = key_at
            key_at += 2 + 2 * len(epochs)
            periods = self._periods_of(normalized)
            # One packed argument per event: its EV record, then its EV_BOARD ones.
            parts = [
                _EV.numbers.pack(
                    event.sourceRevision,
                    occurred_ms,
                    *normalized.limits,
                    first_key,
                    len(feeding),
                ),
                pack_strings(
                    (
                        player.encode(),
                        event.eventId.encode(),
                        event.matchId.encode(),
                        fingerprint_prefix(normalized.fingerprint),
                        normalized.log_json(),
                        dedupe_field,
                        contribution_field,
                        record_context(periods, event.region).encode(),
                        Keys.held_field(identity, event.eventId).encode(),
                        landed_dedupe[n_call],
                        landed_contribution[n_call],
                    )
                ),
            ]
            scores = normalized.scores
            for spec, feeds in feeding:
                index = board_index[spec.board]
                best = 0
                if spec.aggregation == "max":
                    event_keys.append(best_prefix[index - 1] + player)
                    best = key_at
                    key_at += 1
                row, base = rows.get((spec.board, player), NOT_IN_BASE)
                parts.append(
                    _EV_BOARD.numbers.pack(
                        index,
                        1 if feeds else 0,
                        scores[spec.rule] if feeds else 0,
                        # Quarantine thresholds bound high points: not on
                        # order: asc boards, where lower is better.
                        thresholds.get(spec.board, {}).get(event.region, 0)
                        if feeds and spec.sign == 1
                        else 0,
                        best,
                        row,
                    )
                )
                parts.append(self._ref_texts(spec.board, periods, event.region, base))
            event_args.append(b"".join(parts))
        args = [
            now_ms,
            self.retention_seconds,
            capacity,
            refill_ms,
            partition,
            mode,
            len(board_index),
            len(calls),
            self.boards.rule,
            base_number,
            bucket_expire_at(wall, self.retention_seconds),
            epochs_text,
            len(epochs),
            slice_of(wall, self.retention_seconds),
            int(wall),
            *board_args,
            *event_args,
        ]
        if self._key_rate_args is not None and mode == "apply":
            # The per-key buckets: after everything else (apply_event.lua).
            args += self._key_rate_args
            event_keys += [keys.key_rate(call.event.key_id) for call in calls]
        all_keys = script_keys + event_keys
        return ["EVALSHA", self._apply.sha, len(all_keys), *all_keys, *args]

    @staticmethod
    def _landed(
        generation: Generation | None, hashes: list[tuple[_Identity, _Identity]]
    ) -> tuple[list[bytes], list[bytes]]:
        """Each event's dedupe record and its match's contribution record in the
        landed records index of the base generation (serving/landed.py), b"" when
        none: one vectorised lookup per kind and layer for the chunk. ``hashes``:
        per event, :func:`speed.records.identity_parts` of (identity, eventId) and
        of (identity, matchId)."""
        index = generation.landed() if generation is not None else None
        if index is None or index.entries == 0:
            empty = [b""] * len(hashes)
            return empty, list(empty)
        found_dedupe = index.lookup(
            DEDUPE, [d[2] for d, _ in hashes], [d[3] for d, _ in hashes]
        )
        found_matches = index.lookup(
            CONTRIBUTION, [m[2] for _, m in hashes], [m[3] for _, m in hashes]
        )
        return (
            [v or b"" for v in found_dedupe],
            [v or b"" for v in found_matches],
        )

    def _ref_texts(
        self, board: str, periods: dict[str, str], region: str, base: str
    ) -> bytes:
        """The strings of an EV_BOARD record, packed: the board's name in the saved
        result (short against the event's periods and region) and its base. Cached
        when the player is not in the base (the common case); the periods follow
        from the UTC day, their "daily" id."""
        if base:
            saved_as = short_board(board, periods, region)
            return pack_strings((saved_as.encode(), base.encode()))
        key = (board, periods["daily"], region)
        packed = self._texts_cache.get(key)
        if packed is None:
            if len(self._texts_cache) > 4096:
                self._texts_cache.clear()
            saved_as = short_board(board, periods, region)
            packed = self._texts_cache[key] = pack_strings((saved_as.encode(), b""))
        return packed

    async def _evalsha_all(
        self, commands: list[list[Any]], *, wait: ReplicaWait | None = None
    ) -> list[Any]:
        """Send every EVALSHA in one write (per server) and read the replies in
        order; a reply that is an error is returned as the exception
        (:func:`speed.connection.send_commands`, one server or a cluster; ``wait``:
        its WAIT per server)."""
        return await send_commands(self.client, commands, wait=wait)

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
        """Apply events in order; results in the same order.

        Small calls made concurrently (single POSTs) are grouped: while one group's
        round trip is in flight the next calls queue, and go together in the next
        one (group commit: one script call per partition for the whole group, and
        one fsync). ``group_window_us`` > 0 also waits that long before sending a
        group; < 0 turns grouping off.
        """
        if (
            release_at_ms is not None
            or self.group_window_us < 0
            or len(events) > GROUP_MAX_EVENTS
        ):
            return await self._apply_now(events, release_at_ms=release_at_ms)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Outcome]] = loop.create_future()
        self._group.append((events, future))
        if self._group_task is None:
            self._group_task = loop.create_task(self._drain_group())
        return await future

    async def _drain_group(self) -> None:
        try:
            while self._group:
                if self.group_window_us > 0:
                    await asyncio.sleep(self.group_window_us / 1e6)
                group, self._group = self._group, []
                events = [e for evs, _ in group for e in evs]
                GROUP_SIZE.observe(len(group))
                try:
                    outcomes = await self._apply_now(events)
                except Exception as exc:  # every caller of the group gets the error
                    for _, future in group:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                at = 0
                for evs, future in group:
                    if not future.done():
                        future.set_result(outcomes[at : at + len(evs)])
                    at += len(evs)
        finally:
            self._group_task = None
            for _, future in self._group:  # only when cancelled (shutdown)
                if not future.done():
                    future.set_exception(RuntimeError("speed layer stopped"))
            self._group = []

    async def _apply_now(
        self, events: list[NormalizedEvent], *, release_at_ms: int | None = None
    ) -> list[Outcome]:
        """Apply events in order; one pipelined round trip (plus rare retries).

        The events of each partition go in chunks of at most ``MAX_CHUNK``, one
        script call per chunk; partitions share no keys, so only the order within a
        partition matters. Events not scored yet (:func:`speed.scoring.score_event`)
        are scored here.
        """
        for e in events:
            if not e.scores:
                own = self.boards.game(e.game) if self.boards.games else self.boards
                score_event(e, own or self.boards, self.rules)
        self._thresholds_now = self.thresholds() if release_at_ms is None else {}
        mode = "apply" if release_at_ms is None else "release"
        calls = [
            _Call(
                e,
                partition_of(e.event.playerId, self.partitions),
                self._boards_for(e.occurred_at, e.event.region, e.game),
                mode=mode,
            )
            for e in events
        ]
        outcomes: list[Outcome | None] = [None] * len(calls)
        # Per partition, the events still to run, in order. One chunk per partition
        # per round trip: a chunk that stops at a "retry" leaves the events after it
        # for the next round, so a partition's events always apply in the order sent.
        queues: dict[int, list[int]] = {}
        for i, call in enumerate(calls):
            queues.setdefault(call.partition, []).append(i)
        unknown = [p for p in queues if p not in self._bases]
        if unknown:
            # Once per partition and process: which generation its base is, and
            # its live record epochs.
            replies = await send_commands(
                self.client,
                [
                    ("HMGET", Keys(p).base_generation, "g", EPOCHS_FIELD)
                    for p in unknown
                ],
            )
            for p, raw in zip(unknown, replies, strict=True):
                if isinstance(raw, Exception):
                    raise raw
                number, epochs = raw
                self._bases.setdefault(p, int(number) if number else 0)
                self._epochs.setdefault(p, _text(epochs) if epochs else "")
        rebased = 0
        while queues:
            now_ms = release_at_ms
            if now_ms is None:
                now_ms = int(self.clock() * 1000)
            chunks = [(p, queue[:MAX_CHUNK]) for p, queue in queues.items()]
            await self._base_rows_ready(chunks, calls)
            # With replica_wait, one WAIT per master per round trip, on the
            # connection that ran the chunks (raises ReplicasNotAcknowledged: 503).
            replies = await self._evalsha_all(
                [
                    self._chunk_command(p, [calls[i] for i in chunk], mode, now_ms)
                    for p, chunk in chunks
                ],
                wait=self.replica_wait,
            )
            script_missing = False
            for (p, chunk), reply in zip(chunks, replies, strict=True):
                if isinstance(reply, NoScriptError):
                    # The server lost its script cache (restart, SCRIPT FLUSH): nothing
                    # ran for this chunk; load the script and run it again.
                    script_missing = True
                    continue
                if isinstance(reply, Exception):
                    raise reply
                first = reply[0].decode() if isinstance(reply[0], bytes) else reply[0]
                if first == "rebased":
                    # Nothing ran: name the rows of the partition's real base and
                    # the buckets of its live record epochs.
                    rebased += 1
                    if rebased > MAX_REBASED:
                        raise BaseUnavailable("the base generation kept moving")
                    number_text, _, epochs_text = _text(reply[1]).partition("|")
                    number = int(number_text)
                    self._epochs[p] = epochs_text
                    if number > 0 and self.base_generations(number) is None:
                        raise BaseUnavailable(
                            f"partition {p}'s base generation g{number} is not "
                            "readable here"
                        )
                    self._bases[p] = number
                    continue
                done = 0
                for n in range(len(reply) // 2):
                    kind = reply[2 * n]
                    kind = kind.decode() if isinstance(kind, bytes) else kind
                    outcome = self._outcome(calls[chunk[n]], kind, reply[2 * n + 1])
                    if outcome is None:
                        break
                    outcomes[chunk[n]] = outcome
                    done += 1
                queue = queues[p][done:]
                if queue:
                    queues[p] = queue
                else:
                    del queues[p]
            if script_missing:
                await self.client.script_load(self._apply.script)
        return [o for o in outcomes if o is not None]

    async def _base_rows_ready(
        self, chunks: list[tuple[int, list[int]]], calls: list[_Call]
    ) -> None:
        """The partition rows of the boards these chunks' events feed, in their
        partitions' base generations, derived off the event loop when not yet
        (speed/baserows.py derive_partition_rows): the chunks' commands look their
        players' base rows up in them."""
        numbers = {self._bases.get(p, -1) for p, _ in chunks}
        generations = [
            g
            for g in (self.base_generations(n) for n in numbers if n > 0)
            if g is not None
        ]
        if not generations:
            return
        boards: set[str] = set()
        for _, chunk in chunks:
            for i in chunk:
                call = calls[i]
                boards.update(spec.board for spec in call.specs)
                boards.update(call.extra_boards)
        for generation in generations:
            await derive_partition_rows(generation, boards, self.partitions)

    def _outcome(self, call: _Call, kind: str, payload: Any) -> Outcome | None:
        """The outcome of one event from its (kind, payload); None when it must be
        sent again (``retry``: the board it names is added to the call)."""
        event = call.event.event
        if kind in ("ok", "duplicate"):
            body = decode_result(
                payload,
                event.eventId,
                event.playerId,
                call.partition,
                self._periods_of(call.event),
                event.region,
            )
            if kind == "duplicate":
                body["status"] = "duplicate"
            return Outcome(body=body)
        text = payload.decode() if isinstance(payload, bytes) else payload
        if kind == "conflict":
            return Outcome(
                error=EventConflict(
                    "eventId already used for this player with different content"
                )
            )
        if kind in ("superseded", "noop"):
            # Release outcomes: nothing was applied.
            return Outcome(
                body={
                    "eventId": event.eventId,
                    "playerId": event.playerId,
                    "status": kind,
                    "detail": text,
                }
            )
        if kind == "rate_limited":
            return Outcome(error=RateLimited(int(text)))
        if kind == "implausible":
            return Outcome(error=Implausible(text.split(":", 1)[0], text))
        if kind == "retry":
            # Each retry adds one board the stored contribution touched; a match can
            # only have touched a bounded number of boards.
            if len(call.extra_boards) >= MAX_RETRIES:
                raise RuntimeError("contribution touched more boards than allowed")
            call.extra_boards.append(text)
            return None
        raise RuntimeError(f"unexpected script reply {kind!r}")  # pragma: no cover
