"""Client of the leaderboard service (depends on httpx only).

from leaderboard_client import LeaderboardClient

with LeaderboardClient("http://127.0.0.1:8080", "dev", "dev-secret") as lb:
    result = lb.submit({"eventId": "E77", "playerId": "P2", "matchId": "M91",
                        "sourceRevision": 1, "occurredAt": "2026-11-20T10:00:00Z",
                        "region": "eu", "result": {"points": 30}})
    print(result.status, lb.rank("alltime:all:global", "P2").rank)
"""

from leaderboard_client.aio import AsyncLeaderboardClient
from leaderboard_client.client import MAX_BATCH, Backoff, LeaderboardClient, sign
from leaderboard_client.errors import (
    Conflict,
    EventConflict,
    Forbidden,
    GenerationExpired,
    Implausible,
    Invalid,
    LeaderboardError,
    NotFound,
    OutcomeUnknown,
    PayloadTooLarge,
    RateLimited,
    TooOld,
    Unauthorized,
    Unavailable,
    error_for,
)
from leaderboard_client.models import (
    STATUSES,
    Awards,
    BatchItem,
    Board,
    BoardOutcome,
    Cursors,
    Entry,
    EventError,
    EventResult,
    Friends,
    Generation,
    Labels,
    Page,
    PlayerRank,
    Top,
)

__all__ = [
    "MAX_BATCH",
    "STATUSES",
    "AsyncLeaderboardClient",
    "Awards",
    "Backoff",
    "BatchItem",
    "Board",
    "BoardOutcome",
    "Conflict",
    "Cursors",
    "Entry",
    "EventConflict",
    "EventError",
    "EventResult",
    "Forbidden",
    "Friends",
    "Generation",
    "GenerationExpired",
    "Implausible",
    "Invalid",
    "Labels",
    "LeaderboardClient",
    "LeaderboardError",
    "NotFound",
    "OutcomeUnknown",
    "Page",
    "PayloadTooLarge",
    "PlayerRank",
    "RateLimited",
    "TooOld",
    "Top",
    "Unauthorized",
    "Unavailable",
    "error_for",
    "sign",
]
