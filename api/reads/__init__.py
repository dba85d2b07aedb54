"""The read service: top / rank / nearby / entries / friends for a mode.

One place decides how a read is answered, so the routes only validate input:

* **snapshot** (``mode=snapshot``, a pinned ``generation``, or a closed board whose
  final state is in the latest generation): the mapped segment; the answer is fixed
  for the generation, so its encoded bytes are cached per generation;
* **live**: the base generation merged with the speed layer (:mod:`speed.live`); live
  top lists are cached per board (:class:`LiveTopCache`);
* **approx**: the Fenwick histogram, one Redis round trip (:mod:`api.reads.approx`);
* **fallbacks**: exactness impossible live (a rebase in progress) -> the latest
  generation, labelled snapshot; Redis unreachable -> the latest generation with
  ``liveLayer: unavailable`` (:mod:`api.degraded`); :mod:`api.reads.policy` says
  which, once for every read.

Shadow removal (issue 10): a shadowed player is hidden from every public answer, but
a read about the player by the player (a valid player token for it) answers as if the
player were present, in every mode; without a token (or with an invalid one) or with
another player's token it is hidden, as for any other reader (issue 23).

Answers are dicts in the contract's key order, encoded once with orjson
(:class:`Answer`); :mod:`api.models` documents their shapes.

The package, one module per concern:

* :mod:`~api.reads.service`: :class:`ReadService`, the facade the routes call;
* :mod:`~api.reads.policy`: the one fallback policy (snapshot, fallback, degraded);
* :mod:`~api.reads.snapshot`, :mod:`~api.reads.live`, :mod:`~api.reads.approx`,
  :mod:`~api.reads.friends`, :mod:`~api.reads.awards`: the reads of each mode;
* :mod:`~api.reads.ranking`: rankings other than the board's own;
* :mod:`~api.reads.answers`, :mod:`~api.reads.caches`, :mod:`~api.reads.cursors`,
  :mod:`~api.reads.labels`: encoded answers, the caches, cursors, labels.
"""

from api.reads.answers import (
    Answer,
    degraded,
    echo_ranking,
    encode,
    players_of,
    with_profiles,
)
from api.reads.approx import (
    APPROX_HITS,
    APPROX_MISSES,
    HISTOGRAM_BACKOFF,
    ApproxCounts,
)
from api.reads.awards import award_page
from api.reads.caches import (
    ENTRY_OVERHEAD,
    LIVE_HITS,
    LIVE_MISSES,
    SNAPSHOT_HITS,
    SNAPSHOT_MISSES,
    LiveTopCache,
    SnapshotCache,
    key_bytes,
)
from api.reads.cursors import (
    AWARD_CURSOR_FIELDS,
    CURSOR_FIELDS,
    award_cursor,
    decode_award_cursor,
    decode_cursor,
    encode_cursor,
    live_cursors,
    segment_cursors,
)
from api.reads.labels import (
    Mode,
    check_board,
    is_own_read,
    live_header,
    pin,
    public,
    snapshot_header,
    top_percent,
)
from api.reads.service import ReadService
from api.reads.snapshot import Standing, standing_in, window_entries

__all__ = [
    "APPROX_HITS",
    "APPROX_MISSES",
    "AWARD_CURSOR_FIELDS",
    "CURSOR_FIELDS",
    "ENTRY_OVERHEAD",
    "HISTOGRAM_BACKOFF",
    "LIVE_HITS",
    "LIVE_MISSES",
    "SNAPSHOT_HITS",
    "SNAPSHOT_MISSES",
    "Answer",
    "ApproxCounts",
    "LiveTopCache",
    "Mode",
    "ReadService",
    "SnapshotCache",
    "Standing",
    "award_cursor",
    "award_page",
    "check_board",
    "decode_award_cursor",
    "decode_cursor",
    "degraded",
    "echo_ranking",
    "encode",
    "encode_cursor",
    "is_own_read",
    "key_bytes",
    "live_cursors",
    "live_header",
    "pin",
    "players_of",
    "public",
    "segment_cursors",
    "snapshot_header",
    "standing_in",
    "top_percent",
    "window_entries",
    "with_profiles",
]
