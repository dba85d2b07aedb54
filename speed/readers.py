"""The read side's rate limit (LB_READ_RATE_LIMIT): one token bucket per token
subject in Redis, shared by every API worker.

The bucket is the write side's (``lib/token_bucket.lua``, also behind LB_RATE_LIMIT
and LB_KEY_RATE_LIMIT), spent by ``take_token.lua``. Its keys live outside the speed
layer's namespace ("lb:"): they are not state a rebuild restores or compares.

Each read spends with one EVALSHA, sent as the speed layer's own commands are
(:func:`speed.connection.send_commands`, hiredis packing, not redis-py's ``Script``
call), and in the API it rides along with the read's own round trip when the read
makes one (:meth:`ReadLimiter.rider`, api/readers.py). A refused subject is
refused again locally until the time its bucket refills (``take_token.lua``'s
``refilled_at``), with the ``Retry-After`` Redis would answer: a bucket only
refills at its fixed rate (other workers only spend from it), so no take before
that time could succeed, and a client that keeps reading past its limit costs no
round trip per read.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import NoScriptError

from speed.connection import Rider, send_commands
from speed.scripts import TAKE_TOKEN, register

READ_RATE_PREFIX = "lb-reads:rate:"


def read_rate_key(subject: str) -> str:
    """The bucket of one token subject."""
    return READ_RATE_PREFIX + subject


class ReadLimiter:
    """Spends one token of a subject's bucket per read."""

    # Subjects remembered as refused (oldest out): forgetting one only costs its
    # next read a round trip.
    REFUSED = 10_000

    def __init__(
        self,
        client: Any,
        limit: tuple[int, float],
        clock: Callable[[], float] = time.time,
    ) -> None:
        capacity, refill_seconds = limit
        self.capacity = capacity
        # Milliseconds per token (a fraction is fine).
        self.refill_ms = refill_seconds * 1000
        # Wall clock, seconds; tests replace it to step time.
        self.clock = clock
        self.client = client
        self._take = register(client, TAKE_TOKEN)
        # subject -> ms time its bucket holds a token again (it was refused)
        self._refused: dict[str, float] = {}
        self.round_trips = 0

    def refused(self, subject: str) -> int:
        """The Retry-After of a subject refused before and still empty (no round
        trip), else 0: then :meth:`take` or a :meth:`rider` asks Redis."""
        refilled_at = self._refused.get(subject)
        if refilled_at is None:
            return 0
        now_ms = int(self.clock() * 1000)  # as the script is told
        if now_ms < refilled_at:
            return math.ceil((refilled_at - now_ms) / 1000)
        del self._refused[subject]
        return 0

    def _command(self, subject: str) -> tuple[Any, ...]:
        return (
            "EVALSHA",
            self._take.sha,
            1,
            *TAKE_TOKEN.keys_of({"bucket": read_rate_key(subject)}),
            *TAKE_TOKEN.args_of(
                {
                    "now_ms": int(self.clock() * 1000),
                    "capacity": self.capacity,
                    "refill_ms": self.refill_ms,
                }
            ),
        )

    def _outcome(self, subject: str, reply: Any) -> int:
        wait = int(TAKE_TOKEN.field(reply, "retry_after"))
        if wait > 0:
            if len(self._refused) >= self.REFUSED:
                del self._refused[next(iter(self._refused))]
            self._refused[subject] = float(TAKE_TOKEN.field(reply, "refilled_at"))
        return wait

    async def take(self, subject: str) -> int:
        """0 when the read may go ahead (a token was spent), else the whole
        seconds until the subject's bucket holds a token again."""
        wait = self.refused(subject)
        if wait > 0:
            return wait
        return self._outcome(subject, await self._run(self._command(subject)))

    def rider(self, subject: str) -> Rider:
        """The take of one token as a :class:`~speed.connection.Rider`: in
        :data:`~speed.connection.GATE_RIDER` it rides along with the read's own
        first round trip; :meth:`settle` then tells its outcome."""
        return Rider((self._command(subject),))

    async def settle(self, subject: str, rider: Rider) -> int:
        """What :meth:`take` answers, for a :meth:`rider`: its reply when it rode
        along (it ran, once), else a take of its own now (the read made no round
        trip, or it failed: the take did not run)."""
        if rider.read and rider.replies is not None:
            return self._outcome(subject, rider.replies[0])
        # Not riding along with the take of its own (it would spend twice).
        rider.taken = True
        return await self.take(subject)

    async def _run(self, command: tuple[Any, ...]) -> Any:
        """One EVALSHA; the script loaded again if Redis lost it (a NOSCRIPT
        reply: it did not run)."""
        self.round_trips += 1
        (reply,) = await send_commands(self.client, [command])
        if isinstance(reply, NoScriptError):
            await self.client.script_load(self._take.script)
            (reply,) = await send_commands(self.client, [command])
        if isinstance(reply, Exception):
            raise reply
        return reply
