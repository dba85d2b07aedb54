"""Rebuild the speed layer from the newest generation and the log (``lb rebuild``).

The log's landed part is handed in (:data:`LandedRecords`; ``jobs/rebuild.py`` reads
it from Delta bronze with Spark), so this module never loads the batch layer.

What Redis holds for a partition is a function of that partition's log records in
position order (landed ones are in Delta bronze, the rest still in the Redis log):

* ``totals`` (``total|version`` per board and player): the ``result`` item of the last
  record that touched the pair; every record carries the total and version it left, so
  no scoring is re-done here (the whole log is read, not only the tail after the
  boundary); only deltas stay: a pair on the generation's segment (which carries its
  version) unchanged after the boundary and not shadowed gets none, as
  :mod:`speed.rebase` leaves it;
* the changed-sets and the Fenwick tree: relative to the newest generation G, exactly
  as :mod:`speed.rebase` leaves them: players touched after G's boundary, their live
  total (``chz``) and their rows in G (bits of ``chb``), and G's per-bucket counts
  of the partition moved by those players;
* the contribution records (``ct``, revision and per-board points), best-of sets
  (``mx``) and dedupe records (``ev``, fingerprint and saved result) with what is left
  of their retention; ``pos`` and ``landed`` from the last position seen.

Everything is built aside (``<partition>:rb:*`` keys), compared with the live keys
(the diff ``--dry-run`` prints) and switched in by ``rebuild_partition.lua``, atomically
per partition; the script refuses the switch when events arrived after the build read
the log, and the partition is built again.
"""

from __future__ import annotations

import secrets
import struct
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import redis

from conf.boards import (
    DEFAULT_GAME,
    GAME_SEP,
    BoardRules,
    BoardsConfig,
    board_rules,
    boards_for_event,
    load_boards,
    qualify,
    split_board,
)
from conf.rule_state import effective_boards, load_rule_state
from conf.rules import (
    RECORD_FIELDS,
    Implausible,
    RuleInputError,
    RuleRegistry,
    default_registry,
)
from conf.settings import Settings
from serving.log_records import logged_result
from serving.registry import Generation, GenerationRegistry
from serving.segments import BoardSegment
from speed.baserows import base_row, partition_rows
from speed.closed import final_boards
from speed.connection import sync_client
from speed.events import fingerprint_of_logged, parse_rfc3339
from speed.partitions import (
    CHANGED_BLOCK_ROWS,
    EPOCH_KEY,
    KEY_PREFIX,
    Keys,
    encode_entry,
    tag,
)
from speed.rebase import bucket_lowers, partition_counts
from speed.records import (
    EPOCHS_FIELD,
    bucket_expire_at,
    compact_result,
    decode_contribution,
    dedupe_value,
    encode_contribution,
    event_periods,
    identity_hash,
    identity_key,
    live_epochs,
    record_lookups,
    slice_of,
)
from speed.scripts import REBUILD_PARTITION, register
from speed.server import resolve_redis_url

MAX_ATTEMPTS = 10
# Per-board structures that are built aside and switched in by renaming.
BOARD_STRUCTURES = ("tot", "chz", "chb", "chc", "fw", "bk")
# Item statuses of a log record whose board was recorded but not applied.
NOT_APPLIED = frozenset({"late-review", "quarantined"})
PIPELINE_CHUNK = 2000


class RebuildGap(RuntimeError):
    """The log records of a partition are not consecutive: events are missing."""

    exit_code = 1
    hint = "a position is neither in Delta bronze nor in the Redis log: see the gap"


class RebuildRaced(RuntimeError):
    """A partition kept receiving events while it was being rebuilt."""

    exit_code = 1
    hint = "run `lb rebuild` again at a quieter moment (or stop the writers)"


# ----------------------------------------------------------------------- the fold


@dataclass
class PartitionState:
    """The speed-layer state of one partition, as the log records imply it."""

    partition: int
    boundary: int
    position: int = 0
    totals: dict[str, dict[str, tuple[int, int]]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    changed: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    # first_achieved boards: board -> player -> when the total was reached (ms).
    achieved: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    # (player, match) -> contribution record fields; last touch in epoch ms.
    contributions: dict[tuple[str, str], dict[str, int | str]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    contribution_ms: dict[tuple[str, str], int] = field(default_factory=dict)
    # (player, match) -> (periods, region) of the event that touched it last: what
    # its encoded board names are short against (speed/records.py).
    contribution_ctx: dict[tuple[str, str], tuple[dict[str, str], str]] = field(
        default_factory=dict
    )
    # (board, player) -> matchId -> points, for aggregation "max"; last touch in ms.
    best: dict[tuple[str, str], dict[str, int]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    best_ms: dict[tuple[str, str], int] = field(default_factory=dict)
    # (player, eventId) -> (dedupe record value, acceptance in ms)
    dedupe: dict[tuple[str, str], tuple[bytes, int]] = field(default_factory=dict)
    # Position of the last write of each record: one at or before the boundary is
    # landed (in the generation's landed records index, when it has one).
    dedupe_pos: dict[tuple[str, str], int] = field(default_factory=dict)
    contribution_pos: dict[tuple[str, str], int] = field(default_factory=dict)
    # Shadowed players of the partition (flags are not rebuilt: they are read).
    shadowed: set[str] = field(default_factory=set)
    # Plausibility history (``Keys.recent_matches``): player -> matchId -> occurredAt
    # ms of the accepted new matches of the last day of event time, as
    # apply_event.lua keeps it; the last addition in epoch ms (its TTL runs from it).
    recent: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    recent_ms: dict[str, int] = field(default_factory=dict)
    # Boards rescored under their season's promoted rule: board -> player -> matchId
    # -> (points, removed); the totals of these boards are summed from it.
    rescored: dict[str, dict[str, dict[str, tuple[int, bool]]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(dict))
    )


def fingerprint(event: dict[str, Any]) -> str:
    """The content fingerprint of a logged event (the log embeds the canonical JSON
    plus derived fields; speed/events.py owns the format)."""
    return fingerprint_of_logged(event)


# apply_event.lua keeps a day of event time of a player's matches, for two days.
RECENT_SPAN_MS = 24 * 3600 * 1000
RECENT_TTL_SECONDS = 2 * 24 * 3600


class Folder:
    """Applies log records of one partition, in position order, to a state.

    ``rescore`` names seasons switched to another rule (``lb replay --promote``):
    their boards' totals are not the ones the log records carry (scored under the old
    rule) but summed again from each match's points under the season's rule now, like
    the batch layer computes them (a match the rule cannot score contributes nothing).
    """

    def __init__(
        self,
        config: BoardsConfig,
        state: PartitionState,
        rules: RuleRegistry | None = None,
        rescore: Collection[str] = (),
    ) -> None:
        self.config = config
        self.state = state
        self.rules = rules or default_registry()
        self.rescore = frozenset(rescore)
        self._rules: dict[str, BoardRules] = {}

    def rules_of(self, board: str) -> BoardRules:
        found = self._rules.get(board)
        if found is None:
            found = self._rules[board] = board_rules(self.config, board)
        return found

    def rule(self, board: str) -> str:
        """The scoring rule of a board (conf/rules.py)."""
        if GAME_SEP in board or self.config.games:
            # A game's board (the game default's too in a file with games:): its
            # game's rules.
            return self.rules_of(board).rule
        if board.startswith("season:") and self.config.season(board.split(":")[1]):
            return self.rules_of(board).rule
        return self.config.rule

    def aggregation(self, board: str) -> str:
        return self.rules_of(board).aggregation

    def sign(self, board: str) -> int:
        """Totals and best-of values are oriented (conf/boards.py BoardRules); the
        log's results and contribution records hold real scores and points."""
        return self.rules_of(board).sign

    def first_achieved(self, board: str) -> bool:
        return self.rules_of(board).first_achieved

    def rescored(self, board: str) -> bool:
        # ``rescore`` holds internal season ids (``S4``, ``arena~S4``).
        game, bare = split_board(board)
        return bare.startswith("season:") and (
            qualify(game, bare.split(":")[1]) in self.rescore
        )

    def points(self, rule: str, event: dict[str, Any]) -> int | None:
        """Points of a logged event under ``rule``: what the speed layer recorded,
        else computed from the match record; None when the rule cannot score it."""
        scores = event.get("scores") or {}
        if rule in scores:
            return int(scores[rule])
        if not scores and rule == "v1":
            return int(event["points"])  # records from before rules were versioned
        record = {name: event.get(name) for name in RECORD_FIELDS}
        try:
            return self.rules.get(rule).score(record)
        except (RuleInputError, Implausible):
            return None

    def _rescore(
        self,
        board: str,
        player: str,
        match: str,
        points: int | None,
        fed: bool,
        version: int,
        received_ms: int,
    ) -> None:
        """One match's contribution to a rescored board; its total summed again."""
        state = self.state
        matches = state.rescored[board][player]
        if points is None:
            matches.pop(match, None)
        else:
            matches[match] = (self.sign(board) * points if fed else 0, not fed)
        before = state.totals[board].get(player)
        if not matches:
            state.totals[board].pop(player, None)
            state.achieved[board].pop(player, None)
            return
        if self.aggregation(board) == "max":
            kept = (p for p, removed in matches.values() if not removed)
            total = max(kept, default=0)
        else:
            total = sum(p for p, _ in matches.values())
        state.totals[board][player] = (total, version)
        if self.first_achieved(board) and (before is None or before[0] != total):
            state.achieved[board][player] = received_ms
        if state.position > state.boundary:
            state.changed[board].add(player)

    def apply(self, record: dict[str, Any]) -> None:
        state = self.state
        position = int(record["position"])
        if position != state.position + 1:
            raise RebuildGap(
                f"partition {state.partition}: expected position "
                f"{state.position + 1}, found {position}"
            )
        state.position = position
        event = record["event"]
        scores = event.get("scores") or {}
        result = logged_result(record)
        status = record["status"]
        player = event["playerId"]
        game = event.get("game") or DEFAULT_GAME
        # Dedupe, match and recent records are the player's within its game
        # (speed/events.py NormalizedEvent.identity); totals are per (board, player).
        who = player if game == DEFAULT_GAME else qualify(game, player)
        received = int(record["receivedAtMs"])
        periods = event_periods(parse_rfc3339(event["occurredAt"]))
        state.dedupe[(who, event["eventId"])] = (
            dedupe_value(
                fingerprint(event),
                compact_result(result, periods, event.get("region", "")),
            ),
            received,
        )
        state.dedupe_pos[(who, event["eventId"])] = position
        items = result["boards"]
        for item in items:
            board = item["board"]
            # apply_event.lua writes no total for a board that held the event for
            # review (a closed board may have no total left in Redis at all).
            if item.get("status", status) == "late-review":
                continue
            if self.rescored(board):
                continue  # summed again below, under the season's rule now
            total = self.sign(board) * int(item["total"])
            before = state.totals[board].get(player)
            state.totals[board][player] = (total, int(item["version"]))
            if self.first_achieved(board) and (before is None or before[0] != total):
                # When the service accepted the event (apply_event.lua: now_ms).
                state.achieved[board][player] = received
            if position > state.boundary:
                state.changed[board].add(player)
        match = (who, event["matchId"])
        state.contribution_ms[match] = received
        state.contribution_pos[match] = position
        # apply_event.lua rewrites the record, short against this event's periods.
        state.contribution_ctx[match] = (
            event_periods(parse_rfc3339(event["occurredAt"])),
            event["region"],
        )
        if status == "superseded":
            return
        # apply_event.lua: a match is new when it has no contribution record yet.
        is_new_match = match not in state.contributions
        fields = state.contributions[match]
        if status == "quarantined":
            # Held: the match's revision is taken, its contributions stay those of
            # the revision before (apply_event.lua), remembered for a release.
            fields["qr"] = fields.get("r", 0)
            fields["q"] = event["eventId"]
            fields["r"] = int(event["sourceRevision"])
            return
        # Points per board under the board's rule, as the speed layer applied them
        # (records from before rules were versioned carry only points; a promoted
        # season's rule may need computing from the match record).
        occurred = parse_rfc3339(event["occurredAt"])
        feeds = {
            spec.board: self.points(spec.rule, event)
            for spec in boards_for_event(self.config, occurred, event["region"], game)
        }
        any_applied = False
        for item in items:
            if item.get("status", status) in NOT_APPLIED:
                continue
            any_applied = True
            board = item["board"]
            if self.rescored(board):
                scored = feeds.get(board, 0)
                self._rescore(
                    board,
                    player,
                    event["matchId"],
                    scored,
                    board in feeds,
                    int(item["version"]),
                    int(record["receivedAtMs"]),
                )
                if scored is None:
                    # The rule cannot score this match: it contributes nothing.
                    fields.pop(f"b:{board}", None)
                    fields.pop(f"u:{board}", None)
                    continue
            points = feeds.get(board, 0) or 0
            fields[f"b:{board}"] = points
            # apply_event.lua: "u" is the default rule, u:<board> only differs.
            if self.rule(board) != self.config.rule:
                fields[f"u:{board}"] = self.rule(board)
            if self.aggregation(board) == "max":
                best = state.best[(board, player)]
                if board in feeds:
                    best[event["matchId"]] = self.sign(board) * points
                else:
                    best.pop(event["matchId"], None)
                state.best_ms[(board, player)] = received
        fields["u"] = self.config.rule
        fields["r"] = int(event["sourceRevision"])
        # An applied revision (or the release of the held one) ends any hold.
        fields.pop("q", None)
        fields.pop("qr", None)
        # Plausibility history: apply_event.lua remembers an accepted new match when
        # the rules in use have bounds that need it (a release is not a new match).
        if is_new_match and any_applied and any(self.rules.limits(scores)):
            occurred_ms = int(occurred.timestamp() * 1000)
            recent = state.recent[who]
            recent[event["matchId"]] = occurred_ms
            oldest = occurred_ms - RECENT_SPAN_MS
            for old in [m for m, t in recent.items() if t < oldest]:
                del recent[old]
            state.recent_ms[who] = received


# ------------------------------------------------------------ structures of a state


def fenwick_bytes(counts: np.ndarray) -> bytes:
    """A Fenwick tree over ``counts`` as big-endian i32 slots (BITFIELD layout)."""
    tree = [int(c) for c in counts]
    size = len(tree)
    for j in range(1, size + 1):
        parent = j + (j & -j)
        if parent <= size:
            tree[parent - 1] += tree[j - 1]
    return b"".join(struct.pack(">i", v) for v in tree)


def fenwick_counts(raw: bytes | None, size: int) -> list[int]:
    """Per-bucket counts of a stored Fenwick tree of ``size`` slots."""
    raw = (raw or b"").ljust(size * 4, b"\0")
    tree = [struct.unpack_from(">i", raw, 4 * i)[0] for i in range(size)]
    counts = list(tree)
    for j in range(size, 0, -1):
        parent = j + (j & -j)
        if parent <= size:
            counts[parent - 1] -= counts[j - 1]
    return counts


@dataclass
class BoardBuild:
    """The five per-board structures of one partition, ready to write."""

    totals: dict[str, bytes]
    changed_live: list[bytes]
    # Local rows in G of the changed players (speed/baserows.py), ascending.
    changed_snapshot: list[int]
    fenwick: bytes
    buckets: dict[str, float]
    counts: list[int]


def rows_bitmap(rows: Iterable[int]) -> bytes:
    """The bitmap SETBIT would leave with these bits set (bit 0 = the top bit of
    byte 0), as the changed-set's snapshot side holds it."""
    listed = list(rows)
    if not listed:
        return b""
    bits = np.zeros(max(listed) + 1, dtype=np.uint8)
    bits[listed] = 1
    return np.packbits(bits).tobytes()


def rows_block_counts(rows: Iterable[int]) -> bytes:
    """The per-block counts of :func:`rows_bitmap`'s bits as the changed-set's
    counts key holds them (speed/partitions.py ``Keys.changed_counts``): a
    big-endian u32 per block of CHANGED_BLOCK_ROWS rows, up to the last block with
    a bit."""
    listed = list(rows)
    if not listed:
        return b""
    blocks = np.bincount(np.array(listed, dtype=np.int64) // CHANGED_BLOCK_ROWS)
    return blocks.astype(">u4").tobytes()


def block_counts(raw: bytes) -> list[int]:
    """The counters of a per-block counts string (:func:`rows_block_counts`'s
    format), without the trailing zero ones."""
    counts = np.frombuffer(raw[: len(raw) // 4 * 4], dtype=">u4").astype(int).tolist()
    while counts and counts[-1] == 0:
        counts.pop()
    return counts  # type: ignore[no-any-return]


def bitmap_rows(bitmap: bytes) -> list[int]:
    """The set bits of a SETBIT bitmap, ascending."""
    if not bitmap:
        return []
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8))
    return [int(i) for i in np.flatnonzero(bits)]


def _bucket_of(lowers: np.ndarray, score: int) -> int:
    """0-based bucket of a score: the largest lower <= score, else the first."""
    if len(lowers) == 0:
        return 0
    return max(0, int(np.searchsorted(lowers, score, side="right")) - 1)


def _kept_totals(
    totals: dict[str, tuple[int, int]],
    generation: Generation | None,
    segment: BoardSegment | None,
    partitions: int,
    changed: Collection[str],
    shadowed: Collection[str],
    board: str,
) -> set[str]:
    """The players whose totals stay in Redis, as speed/rebase.py leaves them: all
    but those on a segment with versions that did not change after its boundary
    and are not shadowed (the generation holds their score and version)."""
    if generation is None or segment is None or segment.versions is None:
        return set(totals)
    rows = partition_rows(generation, board, partitions)
    assert rows is not None
    names = list(totals)
    found = rows.rows_of(names)
    return {
        name
        for name, row in zip(names, found, strict=True)
        if row < 0 or name in changed or name in shadowed
    }


def build_boards(
    state: PartitionState,
    generation: Generation | None,
    base_counts: dict[str, np.ndarray],
    final: Collection[str] = frozenset(),
    partitions: int = 1,
) -> dict[str, BoardBuild]:
    """Totals, changed-sets, Fenwick tree and bucket bounds of every board; boards in
    ``final`` (closed, final in the generation) have left Redis and get nothing."""
    boards = set(state.totals)
    if generation is not None:
        boards |= set(generation.board_names())
    boards -= set(final)
    built: dict[str, BoardBuild] = {}
    for board in sorted(boards):
        segment: BoardSegment | None = (
            generation.board(board) if generation is not None else None
        )
        totals = state.totals.get(board, {})
        lowers = bucket_lowers(segment) if segment is not None else np.empty(0)
        size = max(1, len(lowers))
        if segment is not None:
            counts = base_counts[board][state.partition].astype(np.int64).copy()
        else:
            counts = np.zeros(size, dtype=np.int64)
        live: list[bytes] = []
        snap: list[int] = []
        # Without a generation every player on the board is "changed since g0".
        changed = state.changed.get(board, set()) if generation else set(totals)
        times = state.achieved.get(board)
        for player in changed:
            if player not in totals:
                continue
            total = totals[player][0]
            # A shadowed player is in no public structure (flag_player.lua).
            if player not in state.shadowed:
                live.append(
                    encode_entry(total, player, times.get(player) if times else None)
                )
                counts[_bucket_of(lowers, total)] += 1
            found = base_row(generation, board, partitions, player)
            if found is not None:
                local, old, _ = found
                snap.append(local)
                counts[_bucket_of(lowers, old)] -= 1
        buckets = {
            f"{i + 1}/{size}": float(lower) for i, lower in enumerate(lowers.tolist())
        }
        kept = _kept_totals(
            totals, generation, segment, partitions, changed, state.shadowed, board
        )
        built[board] = BoardBuild(
            totals={
                p: (
                    f"{t}|{v}|{times[p]}" if times and p in times else f"{t}|{v}"
                ).encode()
                for p, (t, v) in totals.items()
                if p in kept
            },
            changed_live=sorted(live),
            changed_snapshot=sorted(snap),
            fenwick=fenwick_bytes(counts),
            buckets=buckets,
            counts=[int(c) for c in counts],
        )
    return built


# --------------------------------------------------------------------- key names


def staged_key(keys: Keys, structure: str, board: str) -> str:
    return f"{keys.base}:rb:{structure}:{board}"


def live_key(keys: Keys, structure: str, board: str) -> str:
    return {
        "tot": keys.totals,
        "chz": keys.changed_live,
        "chb": keys.changed_snapshot,
        "chc": keys.changed_counts,
        "fw": keys.fenwick,
        "bk": keys.buckets,
    }[structure](board)


def live_boards(client: redis.Redis, partition: int) -> set[str]:
    """Boards with any per-board structure in Redis on this partition."""
    found: set[str] = set()
    for structure in BOARD_STRUCTURES:
        prefix = f"{KEY_PREFIX}:{tag(partition)}:{structure}:"
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            found.add(key.decode()[len(prefix) :])
    return found


# -------------------------------------------------------------------------- diff


@dataclass
class Difference:
    partition: int
    board: str | None
    what: str
    player: str | None = None
    live: Any = None
    rebuilt: Any = None

    def __str__(self) -> str:
        where = f"p{self.partition}"
        if self.board:
            where += f" {self.board}"
        if self.player is not None:
            where += f" player {self.player}"
        return f"{where}: {self.what}: live {self.live!r} -> rebuilt {self.rebuilt!r}"


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def diff_partition(
    client: redis.Redis,
    state: PartitionState,
    built: dict[str, BoardBuild],
    generation: Generation | None,
) -> list[Difference]:
    """What differs between the live keys of a partition and the rebuilt state."""
    keys = Keys(state.partition)
    p = state.partition
    out: list[Difference] = []
    base = client.hgetall(keys.base_generation)
    want_base = (
        {"g": str(generation.number), "pos": str(state.boundary)} if generation else {}
    )
    # The record epochs' fields are not a function of the log (speed/records.py).
    have_base = {
        _text(k): _text(v) for k, v in base.items() if _text(k) in ("g", "pos")
    }
    if have_base != want_base:
        out.append(Difference(p, None, "base", live=have_base, rebuilt=want_base))
    have_pos = int(client.get(keys.position) or 0)
    if have_pos != state.position:
        out.append(
            Difference(p, None, "position", live=have_pos, rebuilt=state.position)
        )
    for board in sorted(set(built) | live_boards(client, p)):
        want = built.get(board)
        totals = {
            _text(k): _text(v) for k, v in client.hgetall(keys.totals(board)).items()
        }
        want_totals = {k: v.decode() for k, v in want.totals.items()} if want else {}
        for player in sorted(set(totals) | set(want_totals)):
            if totals.get(player) != want_totals.get(player):
                out.append(
                    Difference(
                        p,
                        board,
                        "total|version",
                        player,
                        totals.get(player),
                        want_totals.get(player),
                    )
                )
        wanted = want.changed_live if want else []
        have: set[bytes] = set(
            client.zrange(keys.changed_live(board), 0, -1)  # type: ignore[arg-type]
        )
        for member in sorted(have ^ set(wanted)):
            out.append(
                Difference(
                    p,
                    board,
                    "changed-set live",
                    member[8:].decode(errors="replace"),
                    member in have,
                    member in wanted,
                )
            )
        bitmap: bytes | None = client.get(  # type: ignore[assignment]
            keys.changed_snapshot(board)
        )
        have_rows = set(bitmap_rows(bitmap or b""))
        want_rows = set(want.changed_snapshot if want else [])
        for row in sorted(have_rows ^ want_rows):
            out.append(
                Difference(
                    p,
                    board,
                    "changed-set snapshot (base row)",
                    str(row),
                    row in have_rows,
                    row in want_rows,
                )
            )
        # The bitmap's per-block counts (lib/changed_counts.lua): absent they are
        # derived from the bitmap by its next writer, so only stored ones differ.
        stored_counts: bytes | None = client.get(  # type: ignore[assignment]
            keys.changed_counts(board)
        )
        if stored_counts is not None:
            have_blocks = block_counts(stored_counts)
            want_blocks = block_counts(rows_block_counts(want_rows))
            if have_blocks != want_blocks:
                out.append(
                    Difference(
                        p,
                        board,
                        "changed-set snapshot counts per block",
                        live=have_blocks,
                        rebuilt=want_blocks,
                    )
                )
        want_counts = want.counts if want else []
        raw: bytes | None = client.get(keys.fenwick(board))  # type: ignore[assignment]
        have_counts = fenwick_counts(raw, len(raw) // 4) if raw else []
        if have_counts != want_counts:
            out.append(
                Difference(
                    p, board, "histogram counts", live=have_counts, rebuilt=want_counts
                )
            )
        stored: list[tuple[bytes, float]] = client.zrange(  # type: ignore[assignment]
            keys.buckets(board), 0, -1, withscores=True
        )
        have_bk = {_text(m): s for m, s in stored}
        if have_bk != (want.buckets if want else {}):
            out.append(
                Difference(
                    p,
                    board,
                    "bucket bounds",
                    live=len(have_bk),
                    rebuilt=len(want.buckets) if want else 0,
                )
            )
    return out


def _locate_records(
    client: redis.Redis,
    bucket_key: Callable[[int, int], str],
    idents: list[tuple[str, str]],
    epochs: list[int],
) -> list[tuple[str, bytes, bytes] | None]:
    """(bucket key, field, value) of each (player, other id) record in the newest
    live epoch holding it; None where none does (speed/records.py)."""
    out: list[tuple[str, bytes, bytes] | None] = []
    for first in range(0, len(idents), PIPELINE_CHUNK):
        chunk = idents[first : first + PIPELINE_CHUNK]
        places = [
            record_lookups(bucket_key, player, other, epochs) for player, other in chunk
        ]
        pipe = client.pipeline(transaction=False)
        for lookups in places:
            for key, record_field in lookups:
                pipe.hget(key, record_field)
        found = iter(pipe.execute())
        for lookups in places:
            values = [next(found) for _ in lookups]
            out.append(
                next(
                    (
                        (key, f, v)
                        for (key, f), v in zip(lookups, values, strict=True)
                        if v is not None
                    ),
                    None,
                )
            )
    return out


def _find_records(
    client: redis.Redis,
    bucket_key: Callable[[int, int], str],
    idents: list[tuple[str, str]],
    epochs: list[int],
) -> list[bytes | None]:
    """The live value of each (player, other id) record; None where none is."""
    return [
        place[2] if place else None
        for place in _locate_records(client, bucket_key, idents, epochs)
    ]


def _landed_values(
    generation: Generation | None, kind: int, idents: list[tuple[str, str]]
) -> list[bytes | None]:
    """Each record's value in the generation's landed records index (None: none,
    or no index)."""
    index = generation.landed() if generation is not None else None
    if index is None:
        return [None] * len(idents)
    found = [identity_key(player, other) for player, other in idents]
    return index.lookup(kind, [k for k, _ in found], [c for _, c in found])


def _answered(
    state: PartitionState,
    generation: Generation | None,
    positions: dict[tuple[str, str], int],
    ident: tuple[str, str],
) -> bool:
    """Whether Redis need not hold the record: its last write is landed and the
    generation has a landed records index, which answers for it."""
    return (
        generation is not None
        and generation.landed() is not None
        and positions[ident] <= state.boundary
    )


def diff_records(
    client: redis.Redis,
    state: PartitionState,
    lifetime_seconds: int,
    generation: Generation | None = None,
) -> list[Difference]:
    """Contribution and dedupe records: missing or different live. A landed record
    (its last write at or before the boundary of a generation with a landed records
    index) is compared with what Redis holds, else with the index."""
    from serving.landed import CONTRIBUTION, DEDUPE

    keys = Keys(state.partition)
    p = state.partition
    out: list[Difference] = []
    now_ms = int(time.time() * 1000)
    epochs = live_epochs(client, keys.base_generation)
    contribution_keys = list(state.contributions)
    contributions_found = _find_records(
        client, keys.contribution_bucket, contribution_keys, epochs
    )
    contributions_landed = _landed_values(generation, CONTRIBUTION, contribution_keys)
    dedupe_keys = list(state.dedupe)
    dedupe_found = _find_records(client, keys.dedupe_bucket, dedupe_keys, epochs)
    dedupe_landed = _landed_values(generation, DEDUPE, dedupe_keys)
    for (player, match), have, landed in zip(
        contribution_keys, contributions_found, contributions_landed, strict=True
    ):
        if have is None and _answered(
            state, generation, state.contribution_pos, (player, match)
        ):
            have = landed
        want = {k: str(v) for k, v in state.contributions[(player, match)].items()}
        have_text = decode_contribution(have) if have is not None else {}
        if have_text != want:
            out.append(
                Difference(p, None, f"contribution {match}", player, have_text, want)
            )
    for (player, event_id), have, landed in zip(
        dedupe_keys, dedupe_found, dedupe_landed, strict=True
    ):
        if have is None and _answered(
            state, generation, state.dedupe_pos, (player, event_id)
        ):
            have = landed
        value, received = state.dedupe[(player, event_id)]
        if have != value and _ttl_left(received, now_ms, lifetime_seconds) is not None:
            out.append(Difference(p, None, f"dedupe {event_id}", player, have, value))
    return out


def _ttl_left(received_ms: int, now_ms: int, retention_seconds: int) -> int | None:
    """Seconds of retention left for a record written at ``received_ms``."""
    if retention_seconds <= 0:
        return 1
    left = retention_seconds - (now_ms - received_ms) // 1000
    return int(left) if left > 0 else None


# ------------------------------------------------------------------------ switch


def stage_partition(
    client: redis.Redis, state: PartitionState, built: dict[str, BoardBuild]
) -> None:
    """Write the rebuilt per-board structures beside the live keys."""
    keys = Keys(state.partition)
    pipe = client.pipeline(transaction=False)
    for board, b in built.items():
        staged = {s: staged_key(keys, s, board) for s in BOARD_STRUCTURES}
        # One key per DEL: redis-py's cluster pipeline refuses a multi-key DEL.
        for name in staged.values():
            pipe.delete(name)
        items = list(b.totals.items())
        for first in range(0, len(items), PIPELINE_CHUNK):
            pipe.hset(
                staged["tot"], mapping=dict(items[first : first + PIPELINE_CHUNK])
            )
        members = b.changed_live
        for first in range(0, len(members), PIPELINE_CHUNK):
            pipe.zadd(
                staged["chz"],
                dict.fromkeys(members[first : first + PIPELINE_CHUNK], 0),
            )
        if b.changed_snapshot:
            pipe.set(staged["chb"], rows_bitmap(b.changed_snapshot))
            pipe.set(staged["chc"], rows_block_counts(b.changed_snapshot))
        pipe.set(staged["fw"], b.fenwick)
        if b.buckets:
            pipe.zadd(staged["bk"], b.buckets)
    pipe.execute()


def ensure_epoch(client: redis.Redis, keys: Keys, lifetime_seconds: int) -> int:
    """The partition's current record epoch, started when it has none (a Redis that
    lost its keys): what restored records are written into."""
    epochs = live_epochs(client, keys.base_generation)
    if epochs:
        return epochs[0]
    if client.hsetnx(keys.base_generation, EPOCHS_FIELD, "1"):
        # As apply_event.lua's roll would start it (speed/records.py).
        client.hset(
            keys.base_generation,
            mapping={"n": 1, "s": slice_of(time.time(), lifetime_seconds)},
        )
    return live_epochs(client, keys.base_generation)[0]


def restore_records(
    client: redis.Redis,
    state: PartitionState,
    retention_seconds: int,
    generation: Generation | None = None,
) -> int:
    """Write contribution, best-of and dedupe records that are missing live (an
    existing record is newer or equal: never overwritten) into the current record
    epoch; a landed record of a generation with a landed records index is not
    written (the index answers for it). Returns records written."""
    keys = Keys(state.partition)
    now_ms = int(time.time() * 1000)
    writes: list[tuple[str, Callable[[Any], None]]] = []
    epoch = ensure_epoch(client, keys, retention_seconds)
    epochs = live_epochs(client, keys.base_generation)
    contribution_keys = [
        ident
        for ident in state.contributions
        if not _answered(state, generation, state.contribution_pos, ident)
    ]
    contributions_live = _find_records(
        client, keys.contribution_bucket, contribution_keys, epochs
    )
    for (player, match), live in zip(
        contribution_keys, contributions_live, strict=True
    ):
        touched = state.contribution_ms[(player, match)]
        if live is not None or _ttl_left(touched, now_ms, retention_seconds) is None:
            continue
        # Encoded as its last touch wrote it.
        encoded = encode_contribution(
            state.contributions[(player, match)],
            *state.contribution_ctx[(player, match)],
        )
        writes.append(
            (
                "",
                _bucket_write(
                    keys.contribution_bucket,
                    epoch,
                    player,
                    match,
                    encoded,
                    retention_seconds,
                ),
            )
        )
    for (board, player), matches in state.best.items():
        ttl = _ttl_left(state.best_ms[(board, player)], now_ms, retention_seconds)
        if ttl is None or not matches:
            continue
        key = keys.best(board, player)

        def write_mx(
            pipe: Any, key: str = key, m: dict = matches, t: int = ttl
        ) -> None:
            pipe.zadd(key, m)
            pipe.expire(key, t)

        writes.append((key, write_mx))
    dedupe_keys = [
        ident
        for ident in state.dedupe
        if not _answered(state, generation, state.dedupe_pos, ident)
    ]
    dedupe_live = _find_records(client, keys.dedupe_bucket, dedupe_keys, epochs)
    for (player, event_id), live in zip(dedupe_keys, dedupe_live, strict=True):
        value, received = state.dedupe[(player, event_id)]
        if live is not None or _ttl_left(received, now_ms, retention_seconds) is None:
            continue
        writes.append(
            (
                "",
                _bucket_write(
                    keys.dedupe_bucket,
                    epoch,
                    player,
                    event_id,
                    value,
                    retention_seconds,
                ),
            )
        )
    for player, recent in state.recent.items():
        ttl = _ttl_left(state.recent_ms[player], now_ms, RECENT_TTL_SECONDS)
        if ttl is None or not recent:
            continue
        key = keys.recent_matches(player)

        def write_pm(pipe: Any, key: str = key, m: dict = recent, t: int = ttl) -> None:
            pipe.zadd(key, m)
            pipe.expire(key, t)

        writes.append((key, write_pm))
    written = 0
    for first in range(0, len(writes), PIPELINE_CHUNK):
        chunk = writes[first : first + PIPELINE_CHUNK]
        pipe = client.pipeline(transaction=False)
        # "": a dedupe record found missing above (its bucket holds others).
        named = [key for key, _ in chunk if key]
        for key in named:
            pipe.exists(key)
        found_keys = dict(zip(named, pipe.execute(), strict=True)) if named else {}
        present = [bool(found_keys.get(key, 0)) for key, _ in chunk]
        pipe = client.pipeline(transaction=False)
        for (_, write), exists in zip(chunk, present, strict=True):
            if not exists:
                write(pipe)
                written += 1
        pipe.execute()
    return written


def _bucket_write(
    bucket_key: Callable[[int, int], str],
    epoch: int,
    player: str,
    other: str,
    value: str | bytes,
    lifetime_seconds: int,
) -> Callable[[Any], None]:
    """Writes a record missing live into the bucket of the current epoch, with the
    expiry a live write gives it now (speed/records.py); a record written meanwhile
    (same field) is newer: HSETNX keeps it."""
    bucket, record_field = identity_hash(player, other)
    key = bucket_key(epoch, bucket)
    expire_at = bucket_expire_at(time.time(), lifetime_seconds)

    def write(pipe: Any) -> None:
        pipe.hsetnx(key, record_field, value)
        pipe.expireat(key, expire_at)

    return write


def rewrite_rescored(
    client: redis.Redis, state: PartitionState, lifetime_seconds: int
) -> int:
    """Contribution records of rescored boards (seasons promoted to another rule):
    their per-board points were written under the old rule, and a later correction
    subtracts what the record says, so the rescored boards' fields are rewritten
    (and dropped where the new rule cannot score the match). A record whose revision
    moved on meanwhile is newer: left alone. Returns records rewritten."""
    boards = sorted(state.rescored)
    if not boards:
        return 0
    keys = Keys(state.partition)
    matches = list(state.contributions)
    rewritten = 0
    for first in range(0, len(matches), PIPELINE_CHUNK):
        chunk = matches[first : first + PIPELINE_CHUNK]
        places = _locate_records(
            client,
            keys.contribution_bucket,
            chunk,
            live_epochs(client, keys.base_generation),
        )
        pipe = client.pipeline(transaction=False)
        for (player, match), place in zip(chunk, places, strict=True):
            fields = state.contributions[(player, match)]
            if place is None:
                continue
            key, record_field, value = place
            live: dict[str, Any] = decode_contribution(value)
            if int(live.get("r", -1)) != int(fields.get("r", -1)):
                continue
            keep: dict = {
                f"{kind}:{board}": fields[f"{kind}:{board}"]
                for board in boards
                for kind in ("b", "u")
                if f"{kind}:{board}" in fields
            }
            drop = [
                f"{kind}:{board}"
                for board in boards
                for kind in ("b", "u")
                if f"{kind}:{board}" not in fields
            ]
            live.update(keep)
            for name in drop:
                live.pop(name, None)
            periods, region = state.contribution_ctx[(player, match)]
            pipe.hset(key, record_field, encode_contribution(live, periods, region))
            rewritten += 1
        pipe.execute()
    return rewritten


def switch_partition(
    client: redis.Redis,
    state: PartitionState,
    built: dict[str, BoardBuild],
    generation: Generation | None,
    landed: int,
) -> str:
    """Rename the staged keys over the live ones in one script call."""
    keys = Keys(state.partition)
    boards = sorted(set(built) | live_boards(client, state.partition))
    script_keys = REBUILD_PARTITION.keys_of(
        {
            "base": keys.base_generation,
            "position": keys.position,
            "landed": keys.landed,
        },
        [
            {
                "staged": staged_key(keys, structure, board),
                "live": live_key(keys, structure, board),
            }
            for board in boards
            for structure in BOARD_STRUCTURES
        ],
    )
    script = register(client, REBUILD_PARTITION)
    kind, payload = script(
        keys=script_keys,
        args=REBUILD_PARTITION.args_of(
            {
                "built_through": state.position,
                "generation": generation.number if generation else 0,
                "boundary": state.boundary,
                "landed": landed,
            }
        ),
    )
    return f"{_text(kind)}: {_text(payload)}" if _text(kind) != "ok" else "ok"


def renew_read_epoch(client: redis.Redis) -> None:
    """A new dataset epoch: the API's cached live answers (top lists, the approximate
    rank's histogram) are exact for a stamp of base generations, log positions, the
    flags version and this epoch. A repair changes keys while the positions stay, so
    only a new epoch stops an answer computed from the damaged keys being served as
    current. Set after the switch: an answer computed before it carries the old
    epoch and never matches again."""
    old = client.get(EPOCH_KEY)
    epoch = secrets.randbits(62) + 1
    while old is not None and int(old) == epoch:  # pragma: no cover - 2**-62
        epoch = secrets.randbits(62) + 1
    client.set(EPOCH_KEY, epoch)


# ------------------------------------------------------------------------ the job


@dataclass
class RebuildReport:
    generation: str | None
    partitions: dict[int, str]
    differences: list[Difference]
    records_restored: int = 0

    @property
    def identical(self) -> bool:
        return not self.differences


def log_records(
    client: redis.Redis, partition: int, after: int
) -> Iterator[dict[str, Any]]:
    """Records of the partition's Redis log after position ``after``."""
    entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
        Keys(partition).log, min=f"({after}-0" if after else "-", max="+"
    )
    for _, fields in entries:
        yield orjson.loads(fields[b"r"])


# A partition's landed log records (those moved out of the Redis log), in position
# order: the batch layer reads them from Delta bronze (jobs/rebuild.py).
LandedRecords = Callable[[int], Iterable[dict[str, Any]]]


def rebuild(
    settings: Settings,
    landed_records: LandedRecords,
    *,
    dry_run: bool = False,
    progress: Callable[[str], None] | None = None,
    before_switch: Callable[[int], None] | None = None,
) -> RebuildReport:
    """Rebuild every partition's speed layer; with ``dry_run`` only diff.

    :param landed_records: a partition's landed records in position order (the
        records before the Redis log's first); the rest are read from the log.
    :param before_switch: test hook called with the partition number between the
        build and the switch (to race an event against the switch).
    """
    say = progress or (lambda _: None)
    # Promoted seasons score under their new rule (conf/rule_state.py).
    rule_state = load_rule_state(settings.data_dir)
    config = effective_boards(load_boards(settings.boards_file), rule_state)
    # Their totals in the log were scored under the rule before the promotion.
    promoted = set(rule_state.promoted)
    # Under a promoted rule every record within its lifetime goes back into Redis, so
    # that rewrite_rescored can rewrite the rescored boards' points in it: the landed
    # records index keeps the points the log wrote, under the old rule
    # (speed.rebase.records_stay_in_redis keeps them there afterwards).
    registry = GenerationRegistry(settings.segments_dir, settings.retained_generations)
    registry.refresh(force=True)
    generation = registry.latest()
    boundary = generation.boundary if generation else {}
    index_generation = None if promoted else generation
    say(
        f"rebuilding from {generation.id if generation else 'no generation'}"
        f" and the log after its boundary"
    )
    base_counts: dict[str, np.ndarray] = {}
    if generation is not None:
        for board in generation.board_names():
            segment = generation.board(board)
            if segment is not None:
                base_counts[board] = partition_counts(segment, settings.partitions)
    # Closed windows final in the generation stay out of Redis (speed/closed.py).
    final = final_boards(config, generation.manifest) if generation else set()
    client = sync_client(resolve_redis_url(settings))
    report = RebuildReport(generation.id if generation else None, {}, [])
    try:
        for partition in range(settings.partitions):
            outcome = "unresolved"
            for _ in range(MAX_ATTEMPTS):
                state = PartitionState(partition, int(boundary.get(str(partition), 0)))
                state.shadowed = {
                    _text(p)
                    for p, f in client.hgetall(Keys(partition).flags).items()
                    if _text(f) == "shadow"
                }
                folder = Folder(
                    config,
                    state,
                    default_registry(settings.points_min, settings.points_max),
                    rescore=promoted,
                )
                for record in landed_records(partition):
                    folder.apply(record)
                landed_through = state.position
                for record in log_records(client, partition, landed_through):
                    folder.apply(record)
                built = build_boards(
                    state, generation, base_counts, final, settings.partitions
                )
                differences = diff_partition(client, state, built, generation)
                differences += diff_records(
                    client, state, settings.record_ttl_seconds, index_generation
                )
                if dry_run:
                    report.differences += differences
                    outcome = "dry-run"
                    break
                # Records first: an event arriving meanwhile writes its own (newer)
                # record, which restore never overwrites, and forces a retry below.
                # The lifetime the API gives records (speed/records.py slices by it).
                restored = restore_records(
                    client, state, settings.record_ttl_seconds, index_generation
                )
                restored += rewrite_rescored(client, state, settings.record_ttl_seconds)
                stage_partition(client, state, built)
                if before_switch is not None:
                    before_switch(partition)
                outcome = switch_partition(
                    client, state, built, generation, max(landed_through, 0)
                )
                if outcome.startswith("retry"):
                    continue  # events arrived after the build read the log
                renew_read_epoch(client)
                report.differences += differences
                report.records_restored += restored
                break
            report.partitions[partition] = outcome
            say(
                f"partition {partition + 1}/{settings.partitions}: "
                f"{state.position} positions, {len(built)} boards, "
                f"{len(differences)} differences, {outcome}"
            )
            if outcome not in ("ok", "dry-run"):
                raise RebuildRaced(f"partition {partition}: {outcome}")
    finally:
        client.close()
    return report


def describe(differences: Iterable[Difference], limit: int = 200) -> list[str]:
    lines = [str(d) for d in differences]
    if len(lines) > limit:
        lines = [*lines[:limit], f"... and {len(lines) - limit} more"]
    return lines
