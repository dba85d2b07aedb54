"""The one fallback policy: when a read is answered from a generation instead of
the live layer, and from which.

* **snapshot**: the read asks for it (``mode=snapshot``), pins a ``generation``, or
  its board is closed and the latest generation holds its final state
  (:meth:`FallbackPolicy.pinned`);
* **not exact live** (a rebase in progress, ``NotExact``): the latest generation,
  labelled snapshot (:meth:`FallbackPolicy.fallback`), unless the read names
  another fallback (a player's rank: the approximate rank);
* **Redis unreachable**: the latest generation with ``liveLayer: unavailable``
  (:mod:`api.degraded`).

Each read states its variants once (:class:`Fallbacks`); :meth:`FallbackPolicy.read`
picks one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from api.degraded import REDIS_DOWN, degraded_snapshot
from api.errors import GenerationNotFound, LiveUnavailable, NotReady
from api.reads.answers import Answer, degraded, resolve
from api.reads.labels import Mode, check_board, pin
from conf.boards import BoardsConfig, board_order
from serving.orientation import has_asc_boards
from serving.ranking import Ranking, native_ranking
from serving.registry import Generation, GenerationRegistry
from serving.segments import BoardSegment
from speed.closed import final_boards
from speed.live import NotExact

LiveRead = Callable[[], Awaitable[Answer]]
# Boards remembered per config (valid ids only; ids come from URLs, so bounded).
MEMO_BOARDS = 4096
Guard = Callable[[LiveRead], Awaitable[Answer]]


@dataclass(slots=True)
class Fallbacks:
    """How one read is answered without the live layer: ``snapshot`` reads a
    generation; ``unavailable`` builds the body from the latest generation's board
    when Redis is unreachable; ``not_exact`` answers when the live read cannot be
    exact (None: ``snapshot`` of the latest generation). ``endpoint`` labels the
    degraded read's metric. Not frozen: one is made per read, and a frozen
    dataclass's ``__init__`` costs several times a plain one's."""

    board: str
    endpoint: str
    snapshot: Callable[[Generation], Answer]
    unavailable: Callable[[Generation, BoardSegment | None], dict[str, Any]]
    not_exact: Callable[[], Answer | Awaitable[Answer]] | None = None


def unavailable_player(player_id: str, generation: Generation) -> LiveUnavailable:
    """A player read while Redis is unreachable, the player not in the generation."""
    return LiveUnavailable(
        f"the live layer is unavailable and player {player_id!r} is "
        f"not in {generation.id}"
    )


class FallbackPolicy:
    """Chooses the generation (or the live layer) for every read of one app."""

    def __init__(self, config: BoardsConfig, registry: GenerationRegistry) -> None:
        self.registry = registry
        self._final: dict[str, frozenset[str]] = {}
        # Per board, what its id and the boards config say, worked out once per
        # config: a read asks several times, and each time parsed the id again.
        self._described: dict[str, dict[str, str]] = {}
        self._native: dict[str, Ranking] = {}
        self.use_boards(config)

    def use_boards(self, config: BoardsConfig) -> None:
        self.config = config
        self.has_asc_boards = has_asc_boards(config)
        self._final.clear()
        self._described.clear()
        self._native.clear()

    def check(self, board: str) -> dict[str, str]:
        """The board's description; BoardNotFound for a board that cannot exist."""
        described = self._described.get(board)
        if described is None:
            described = check_board(self.config, board)
            if len(self._described) >= MEMO_BOARDS:
                self._described.clear()
            self._described[board] = described
        return described

    def native_ranking(self, board: str) -> Ranking:
        """The board's own ranking (API.md "Ranking per query")."""
        native = self._native.get(board)
        if native is None:
            native = native_ranking(board_order(self.config, board)[1])
            if len(self._native) >= MEMO_BOARDS:
                self._native.clear()
            self._native[board] = native
        return native

    def final_in_latest(self, board: str) -> bool:
        """True when the latest generation holds the board's final state: its
        speed-layer keys are gone (speed/closed.py) and the generation answers."""
        latest = self.registry.latest()
        if latest is None:
            return False
        key = str(latest.directory)
        final = self._final.get(key)
        if final is None:
            if len(self._final) > 16:
                self._final.clear()
            final = self._final[key] = frozenset(
                final_boards(self.config, latest.manifest)
            )
        return board in final

    def pinned(
        self, board: str, mode: Mode, generation: str | None, closed: bool = True
    ) -> Generation | None:
        """The generation that answers (None: read live): asked for, pinned, or
        (with ``closed``) the board is closed and final in the latest generation.
        Friends reads pass ``closed=False``: they never looked at a closed board's
        final state (kept as it was)."""
        if (
            mode == "snapshot"
            or generation is not None
            or (closed and self.final_in_latest(board))
        ):
            return pin(self.registry, generation)
        return None

    def fallback(self, why: str) -> Generation:
        """When exactness is impossible live (``why``: the live read's reason): the
        latest generation.

        The registry rescans the segments directory at most every
        ``REFRESH_SECONDS``; during the first publish's rebase (partitions on
        different bases, so no live read is exact) the new generation is on disk
        before that rescan, and a read then answered 503 with a generation at hand
        (`make drills` of session 20: a killed-publish drill's reader, whose only
        generation came from the last publish). So look again, once, before
        saying not ready."""
        try:
            return pin(self.registry, None)
        except GenerationNotFound:
            self.registry.refresh(force=True)
        try:
            return pin(self.registry, None)
        except GenerationNotFound:
            raise NotReady(
                f"no exact live answer ({why}) and no generation published to "
                "answer from; retry shortly"
            ) from None

    def read(
        self,
        mode: Mode,
        generation: str | None,
        fallbacks: Fallbacks,
        live: LiveRead,
    ) -> Answer | Awaitable[Answer]:
        """The read from its generation when :meth:`pinned` (answered at once, no
        coroutine), else ``live`` under :meth:`guard` (to be awaited)."""
        pinned = self.pinned(fallbacks.board, mode, generation)
        if pinned is not None:
            return fallbacks.snapshot(pinned)
        return self.guard(fallbacks, live)

    async def guard(self, fallbacks: Fallbacks, live: LiveRead) -> Answer:
        """``live()``, or its fallback when it cannot be exact or Redis is down."""
        try:
            return await live()
        except NotExact as why:
            if fallbacks.not_exact is not None:
                return await resolve(fallbacks.not_exact())
            return fallbacks.snapshot(self.fallback(str(why)))
        except REDIS_DOWN:
            latest, segment = degraded_snapshot(
                self.config, self.registry, fallbacks.board, fallbacks.endpoint
            )
            return degraded(fallbacks.unavailable(latest, segment))
