"""The read bench's layered generations (``python -m bench.reads --layers K``, issue
24: read p99 with a chain of layers vs a compacted generation): the direct path
publishes a chain of layers the serving side reads as layered boards, whose answers
equal the bench's offline truth, and a compacted generation of the same totals and
boundary answers the same. Real Redis, no Spark, a few hundred players."""

from __future__ import annotations

import asyncio
import json
from argparse import Namespace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
import redis

from bench import reads
from bench.harness import bench_boards_file
from serving.layers import LayeredSegment, load_board
from serving.manifest import MANIFEST_FILE
from speed.partitions import Keys, partition_of

pytestmark = pytest.mark.integration

PLAYERS = 300


def _manifest(directory: Path) -> dict:
    return json.loads((directory / MANIFEST_FILE).read_text())


def _check_board(directory: Path, board: str, truth: reads.Truth) -> None:
    """Every player's row, score and rank on ``board``, and its top 20, against
    the offline sort of the totals (the board's players: all, or a region's)."""
    meta = _manifest(directory)["boards"][board]
    segment = load_board(directory, board, meta)
    held = [i for i in range(truth.n) if reads.board_holds(board, i)]
    sub = reads.Truth(truth.totals[held])
    assert segment.population == len(held)
    for k, i in enumerate(held):
        row = segment.row_of(reads.player_id(i))
        assert row is not None
        score = int(segment.scores[row])
        assert score == int(truth.totals[i])
        assert segment.count_above(score) + 1 == sub.rank(k)
    # sub's ids are positions in ``held`` (player_id(k)): map them back.
    want = [(r, reads.player_id(held[int(p[1:])]), s) for r, p, s in sub.top(20)]
    got = [(e["rank"], e["playerId"], e["score"]) for e in segment.entries(0, 20)]
    assert got == want


def test_layered_direct_publish_reads_equal_the_truth(
    redis_url: str,
    redis_client: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LB_REDIS_URL", redis_url)
    monkeypatch.setenv("LB_DATA_DIR", str(tmp_path / "lb"))
    monkeypatch.setenv("LB_PARTITIONS", "4")
    monkeypatch.setenv("LB_RATE_LIMIT", "off")
    monkeypatch.setenv(
        "LB_BOARDS_FILE", str(bench_boards_file(tmp_path, datetime.now(UTC)))
    )
    rng = np.random.default_rng(5)
    points = rng.integers(0, 20, PLAYERS).astype(np.int64) * 10  # many ties
    asyncio.run(
        reads.apply_events(
            redis_url, [(i, int(points[i])) for i in range(PLAYERS)], "bulk"
        )
    )
    chain = reads.DirectChain()
    assert reads.publish_direct(redis_url, points, chain=chain)["generation"] == "g1"
    args = Namespace(layers=3, layer_events=25, seed=3, points_step=10)
    served, steps = reads.build_layers(args, redis_url, points, chain, 20)
    assert [s["generation"] for s in steps] == ["g2", "g3", "g4"]
    assert int((served != points).sum()) == 75  # 3 x 25 distinct players changed
    segments = tmp_path / "lb" / "segments"
    truth = reads.Truth(served)

    layered = segments / "g4"
    boards = _manifest(layered)["boards"]
    meta = boards[reads.BOARD]
    assert meta["base"] == "g1"
    assert [layer["generation"] for layer in meta["layers"]] == ["g2", "g3", "g4"]
    assert meta["basePopulation"] == PLAYERS
    assert isinstance(
        load_board(layered, reads.BOARD, meta), LayeredSegment
    )  # the served board merges the chain
    for board in boards:
        _check_board(layered, board, truth)
    # The rebase kept no total of an unchanged pair: the layers' versions are the
    # speed layer's (else every changed player would keep a total in Redis).
    for i in range(PLAYERS):
        pid = reads.player_id(i)
        key = Keys(partition_of(pid, 4)).totals(reads.BOARD)
        assert redis_client.hget(key, pid) is None

    # The layers carry the speed layer's versions: the next event of a player
    # changed in the last layer (and of one never changed) counts on from the
    # version the served generation holds for it.
    assert chain.versions is not None
    last = int(np.flatnonzero(served != points)[-1])
    never = int(np.flatnonzero(served == points)[0])
    segment = load_board(layered, reads.BOARD, meta)
    held = {
        i: segment.version_at(segment.row_of(reads.player_id(i)) or 0)
        for i in (last, never)
    }
    assert held[last] == chain.versions[last] > chain.versions[never] == held[never]
    asyncio.run(reads.apply_events(redis_url, [(last, 10), (never, 10)], "probe"))
    for i in (last, never):
        pid = reads.player_id(i)
        raw = redis_client.hget(Keys(partition_of(pid, 4)).totals(reads.BOARD), pid)
        assert raw is not None
        assert raw.split(b"|")[:2] == [b"%d" % (served[i] + 10), b"%d" % (held[i] + 1)]
    # (Live changes after the boundary: g5, at g4's boundary, does not hold them.)

    # --compare-compacted: the same totals and boundary as one full generation.
    boundary = {int(p): v for p, v in _manifest(layered)["boundary"].items()}
    compacted = reads.publish_direct(
        redis_url, served, 5, boundary=boundary, chain=chain
    )
    full = segments / compacted["generation"]
    assert _manifest(full)["boundary"] == _manifest(layered)["boundary"]
    for board, entry in _manifest(full)["boards"].items():
        assert "layers" not in entry
        _check_board(full, board, truth)
