"""The landed records index format (serving/landed.py): layers, newest wins,
compaction, the dedupe window's drop."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serving.landed import (
    CONTRIBUTION,
    DEDUPE,
    Entry,
    LandedIndex,
    compact_layers,
    layer_file,
    write_layer,
)

pytestmark = pytest.mark.unit


def test_round_trip_one_layer(tmp_path: Path) -> None:
    entries = [
        Entry(DEDUPE, 5, 1, 1000, b"fp-a|a|1|dg,1,1"),
        Entry(CONTRIBUTION, 5, 1, 1000, b"2026-11-20|2026-W47|eu|r=1;dg=3"),
        Entry(DEDUPE, 2**64 - 1, 65535, 2000, b"top"),
    ]
    _, count = write_layer(tmp_path / layer_file("g1"), entries)
    assert count == 3
    index = LandedIndex(tmp_path, [layer_file("g1")])
    assert index.get(DEDUPE, 5, 1) == b"fp-a|a|1|dg,1,1"
    assert index.get(CONTRIBUTION, 5, 1) == b"2026-11-20|2026-W47|eu|r=1;dg=3"
    assert index.get(DEDUPE, 2**64 - 1, 65535) == b"top"
    # Same key, other check or other kind: absent.
    assert index.get(DEDUPE, 5, 2) is None
    assert index.get(CONTRIBUTION, 2**64 - 1, 65535) is None
    assert index.get(DEDUPE, 6, 1) is None


def test_within_a_layer_the_last_write_wins(tmp_path: Path) -> None:
    entries = [
        Entry(CONTRIBUTION, 9, 3, 1, b"r=1"),
        Entry(CONTRIBUTION, 9, 3, 2, b"r=2"),
    ]
    _, count = write_layer(tmp_path / "l.arrow", entries)
    assert count == 1
    assert LandedIndex(tmp_path, ["l.arrow"]).get(CONTRIBUTION, 9, 3) == b"r=2"


def test_newer_layer_wins_and_compaction_keeps_it(tmp_path: Path) -> None:
    write_layer(
        tmp_path / "a",
        [Entry(CONTRIBUTION, 1, 0, 10, b"old"), Entry(DEDUPE, 1, 0, 10, b"d")],
    )
    write_layer(tmp_path / "b", [Entry(CONTRIBUTION, 1, 0, 20, b"new")])
    index = LandedIndex(tmp_path, ["a", "b"])
    assert index.get(CONTRIBUTION, 1, 0) == b"new"
    assert index.get(DEDUPE, 1, 0) == b"d"
    compact_layers(tmp_path, ["a", "b"], tmp_path / "c", cutoff_ms=None)
    merged = LandedIndex(tmp_path, ["c"])
    assert merged.entries == 2
    assert merged.get(CONTRIBUTION, 1, 0) == b"new"


def test_compaction_drops_records_older_than_the_window(tmp_path: Path) -> None:
    write_layer(
        tmp_path / "a",
        [Entry(DEDUPE, 1, 0, 10, b"gone"), Entry(CONTRIBUTION, 2, 0, 10, b"old")],
    )
    # The match touched again later: its record lives on from that touch.
    write_layer(tmp_path / "b", [Entry(CONTRIBUTION, 2, 0, 50, b"touched")])
    compact_layers(tmp_path, ["a", "b"], tmp_path / "c", cutoff_ms=40)
    merged = LandedIndex(tmp_path, ["c"])
    assert merged.get(DEDUPE, 1, 0) is None
    assert merged.get(CONTRIBUTION, 2, 0) == b"touched"
    # An expired newest entry does not bring back an older one.
    compact_layers(tmp_path, ["a", "b"], tmp_path / "d", cutoff_ms=60)
    assert LandedIndex(tmp_path, ["d"]).entries == 0


entry = st.builds(
    Entry,
    st.sampled_from([DEDUPE, CONTRIBUTION]),
    # Few keys, so identities repeat across layers; checks 0/1 share keys.
    st.integers(0, 40) | st.integers(2**64 - 3, 2**64 - 1),
    st.integers(0, 1),
    st.integers(0, 100),
    st.binary(max_size=12),
)


@settings(max_examples=60, deadline=None)
@given(
    layers=st.lists(st.lists(entry, max_size=20), min_size=1, max_size=4),
    cutoff=st.none() | st.integers(0, 100),
)
def test_chain_answers_as_a_dict_of_the_writes_in_order(
    tmp_path_factory: pytest.TempPathFactory,
    layers: list[list[Entry]],
    cutoff: int | None,
) -> None:
    directory = tmp_path_factory.mktemp("landed")
    names = []
    expected: dict[tuple[int, int, int], Entry] = {}
    for i, entries in enumerate(layers):
        name = f"l{i}"
        write_layer(directory / name, entries)
        names.append(name)
        for e in entries:
            expected[(e.kind, e.key, e.check)] = e
    index = LandedIndex(directory, names)
    probes = [
        (k, key, c)
        for k in (DEDUPE, CONTRIBUTION)
        for key in (0, 1, 7, 40, 2**64 - 1)
        for c in (0, 1)
    ]
    probes += list(expected)
    for kind in (DEDUPE, CONTRIBUTION):
        asked = [p for p in probes if p[0] == kind]
        got = index.lookup(kind, [p[1] for p in asked], [p[2] for p in asked])
        want = [expected[p].value if p in expected else None for p in asked]
        assert got == want
    compact_layers(directory, names, directory / "merged", cutoff)
    merged = LandedIndex(directory, ["merged"])
    kept = {p: e for p, e in expected.items() if cutoff is None or e.ms >= cutoff}
    assert merged.entries == len(kept)
    for p in probes:
        want_value = kept[p].value if p in kept else None
        assert merged.get(*p) == want_value


def test_the_writer_takes_records_after_its_parent_or_within_the_lifetime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """jobs/landed.py's writer, fed the records of a read that started earlier
    (the contributions index's boundary): it takes only those after its own
    parent's boundary, or, without a parent index, those received within the
    record lifetime; one record without ``rc`` means no index at all."""
    from jobs import landed

    monkeypatch.setattr(
        landed,
        "landed_entries",
        lambda record: [(DEDUPE, record["n"], 0, record["n"], b"v")],
    )
    after = landed.LandedIndexWriter({0: 2}, None, None, [], 0)
    for position in range(1, 5):
        after.take(0, position, 0, {"n": position, "rc": "r"})
    after.take(1, 1, 0, {"n": 10, "rc": "r"})  # a partition past no boundary
    assert [e.key for e in after.entries] == [3, 4, 10]
    entry = after.write(tmp_path, "g2")
    assert entry == {"layers": ["landed.g2.arrow"], "entries": 3}

    since = landed.LandedIndexWriter({}, 1_000, None, [], 0)
    since.take(0, 1, 999, {"n": 1, "rc": "r"})
    since.take(0, 2, 1_000, {"n": 2, "rc": "r"})
    since.take(0, 3, None, {"n": 3, "rc": "r"})  # no receivedAtMs: not within
    assert [e.key for e in since.entries] == [2]
    since.take(0, 4, 2_000, {"n": 4})  # logged before rc existed
    since.take(0, 5, 2_000, {"n": 5, "rc": "r"})
    since.take(0, 6, 3_000, {"n": 6})  # the newest such record
    since.take(0, 7, 4_000, {"n": 7, "rc": "r"})
    assert not since.complete and since.entries == []
    # No index; the manifest says when the newest record without rc was received.
    entry = since.write(tmp_path, "g3")
    assert entry == {"unindexedThroughMs": 3_000}
    assert landed.chain_of({"landed": entry}) is None


def test_a_parent_without_an_index_tells_the_next_whether_to_read(
    tmp_path: Path,
) -> None:
    """A parent that names a record without rc still inside the record lifetime:
    the next index is incomplete without a read of the log (it would read the
    whole lifetime to find it again); once that record left the lifetime, or for
    a parent that names none, the next one reads the lifetime."""
    from conf.settings import Settings
    from jobs import landed

    settings = Settings(data_dir=tmp_path)
    since = int(time.time() * 1000) - settings.record_ttl_seconds * 1000
    inside = since + 3_600_000

    def plan(entry: dict[str, int] | None) -> landed.LandedIndexWriter:
        manifest = {"boundary": {"0": 5}, **({"landed": entry} if entry else {})}
        return landed.LandedIndexWriter.plan(settings, (tmp_path, manifest))

    known = plan({"unindexedThroughMs": inside})
    assert not known.complete and known.unindexed_through_ms == inside
    assert known.write(tmp_path, "g2") == {"unindexedThroughMs": inside}
    for entry in ({"unindexedThroughMs": since - 3_600_000}, None):
        reads = plan(entry)
        assert reads.complete and reads.after == {}
        assert reads.since_ms is not None and reads.since_ms >= since
