"""The read side's rate limit (LB_READ_RATE_LIMIT): one token bucket per token
subject in Redis, shared by every API worker.

The bucket is the write side's (``lib/token_bucket.lua``, also behind LB_RATE_LIMIT
and LB_KEY_RATE_LIMIT), spent by ``take_token.lua``. Its keys live outside the speed
layer's namespace ("lb:"): they are not state a rebuild restores or compares.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from speed.scripts import TAKE_TOKEN, register

READ_RATE_PREFIX = "lb-reads:rate:"


def read_rate_key(subject: str) -> str:
    """The bucket of one token subject."""
    return READ_RATE_PREFIX + subject


class ReadLimiter:
    """Spends one token of a subject's bucket per read."""

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
        self._take = register(client, TAKE_TOKEN)

    async def take(self, subject: str) -> int:
        """0 when the read may go ahead (a token was spent), else the whole
        seconds until the subject's bucket holds a token again."""
        reply = await self._take(
            keys=TAKE_TOKEN.keys_of({"bucket": read_rate_key(subject)}),
            args=TAKE_TOKEN.args_of(
                {
                    "now_ms": int(self.clock() * 1000),
                    "capacity": self.capacity,
                    "refill_ms": self.refill_ms,
                }
            ),
        )
        return int(TAKE_TOKEN.field(reply, "retry_after"))
