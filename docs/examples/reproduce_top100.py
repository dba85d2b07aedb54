"""Reproduce a published top-100 from the Delta tables and check it against the API.

A notebook-style walk-through (cells marked ``# %%``; open it in Jupyter or VS Code,
or run it as a script):

    LB_DATA_DIR=.lb .venv/bin/python docs/examples/reproduce_top100.py \\
        --api http://127.0.0.1:8080 --board season:S4:global

1. find the generation in ``gold_manifest`` and the Delta table versions it was
   built from (``tableVersions`` in its manifest);
2. read ``silver_contributions`` and ``silver_totals`` *as of those versions* (time
   travel: silver is overwritten by every publish) and check that the totals are
   the contributions added up;
3. rank the totals ourselves: score descending, then player id in UTF-8 byte order,
   competition rank = 1 + players with a strictly higher score;
4. compare with the published ranking (gold) and with the API's answer pinned to
   the same generation (``GET /v1/boards/{board}/top?limit=100&generation=gN``);
5. read the board's *full* ranking of the generation from gold (every position,
   as of the recorded versions) and check it against the whole of our ranking and
   the manifest's population.

Gold has two forms (docs/TABLES.md). A generation published in full has its whole
ranking in ``gold_snapshots`` (``FULL_RANKING_SQL``). A layered generation
(``LB_LAYERS_MAX_CHAIN`` >= 1, an incremental publish within the chain limits:
its manifest's ``build.gold`` names a ``base`` and the ``layers`` since) wrote only
the rows that changed, to ``gold_changes``: its full ranking is the base's rows
with each player's newest row from the chain (the highest ``generation_number``),
the ``removed`` ones left out, ranked again (``LAYERED_RANKING_SQL``). The test
suite checks both against a full recompute of the same boundary.

Without Spark: the ``deltalake`` package reads the tables (and time-travels) through
its ``QueryBuilder``, which applies deletion vectors (silver has them: an incremental
publish ``MERGE``s into it), and DuckDB runs the SQL over the Arrow result. With
``--engine spark`` the same SQL runs in Spark SQL (``VERSION AS OF``). Exit status 0
when everything agrees, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

LIMIT = 100

# The ranking every engine runs: display order and competition rank (DESIGN.md).
# DuckDB and Spark both compare strings by their UTF-8 bytes, as the service does.
RANK_SQL = """
SELECT
    ROW_NUMBER() OVER (ORDER BY score DESC, player_id) AS position,
    RANK() OVER (ORDER BY score DESC) AS rank,
    player_id,
    score
FROM {totals}
WHERE board = '{board}'
ORDER BY position
LIMIT {limit}
"""

# The full published ranking of one board in a generation published in full. Read
# gold as of the generation's recorded version; on a large board, select only the
# columns you need.
FULL_RANKING_SQL = """
SELECT position, rank, player_id, score
FROM {gold}
WHERE generation = '{generation}' AND board = '{board}'
ORDER BY position
"""

# The same for a layered generation (manifest ``build.gold``: ``base``, ``layers``):
# the base's rows, each player's newest change from the chain, ranked as RANK_SQL
# ranks (boards with ``order: asc``, ``tieBreak: first_achieved`` or ``rank:
# unique`` order and rank as docs/TABLES.md says).
LAYERED_RANKING_SQL = """
WITH stacked AS (
    SELECT player_id, score, FALSE AS removed, 0 AS layer
    FROM {gold} WHERE generation = '{base}' AND board = '{board}'
    UNION ALL
    SELECT player_id, score, removed, generation_number AS layer
    FROM {changes} WHERE generation IN ({layers}) AND board = '{board}'
), newest AS (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY player_id ORDER BY layer DESC) AS n
    FROM stacked
)
SELECT
    ROW_NUMBER() OVER (ORDER BY score DESC, player_id) AS position,
    RANK() OVER (ORDER BY score DESC) AS rank,
    player_id,
    score
FROM newest
WHERE n = 1 AND NOT removed
ORDER BY position
"""


def ranking_sql(manifest: dict[str, Any], board: str, gold: str, changes: str) -> str:
    """The full-ranking query of ``board`` in the generation of ``manifest``, over
    the relations ``gold`` (gold_snapshots) and ``changes`` (gold_changes)."""
    chain = (manifest.get("build") or {}).get("gold")
    if not chain:
        return FULL_RANKING_SQL.format(
            gold=gold, generation=manifest["generation"], board=board
        )
    return LAYERED_RANKING_SQL.format(
        gold=gold,
        changes=changes,
        base=chain["base"],
        layers=", ".join(f"'{g}'" for g in chain["layers"]),
        board=board,
    )


# Totals are the contributions added up (sum boards) or the best one (max boards);
# a removed contribution counts 0 but keeps the player on the board.
TOTALS_FROM_CONTRIBUTIONS_SQL = """
SELECT player_id,
       CASE WHEN any_value(aggregation) = 'max'
            THEN max(CASE WHEN removed THEN 0 ELSE points END)
            ELSE sum(CASE WHEN removed THEN 0 ELSE points END) END AS score
FROM {contributions}
WHERE board = '{board}'
GROUP BY player_id
"""


# %% 1. The generation and the table versions it was built from
def read_manifest(delta_dir: Path, generation: str | None) -> dict[str, Any]:
    """The manifest of ``generation`` (default: the newest) from ``gold_manifest``."""
    rows = DeltaTable(str(delta_dir / "gold_manifest")).to_pyarrow_table(
        columns=["generation", "generation_number", "manifest_json"]
    )
    by_number = sorted(rows.to_pylist(), key=lambda r: r["generation_number"])
    if not by_number:
        raise SystemExit("no generation published yet: run `lb publish` first")
    chosen = (
        by_number[-1]
        if generation is None
        else next((r for r in by_number if r["generation"] == generation), None)
    )
    if chosen is None:
        raise SystemExit(f"{generation} is not in gold_manifest")
    manifest: dict[str, Any] = json.loads(chosen["manifest_json"])
    if "tableVersions" not in manifest:
        raise SystemExit(
            f"{chosen['generation']} predates tableVersions in the manifest: "
            "publish a new generation"
        )
    return manifest


# %% 2. Silver as of the generation, with the deltalake package and DuckDB
def read_as_of(path: Path, version: int) -> pa.Table:
    """The Delta table at ``path`` as of ``version``, as Arrow.

    Through ``QueryBuilder`` (delta-kernel), not ``to_pyarrow_dataset()``: silver
    has deletion vectors (rows an incremental publish replaced), which only the
    former applies (the latter refuses such tables)."""
    query = QueryBuilder().register("t", DeltaTable(str(path), version=version))
    return pa.table(query.execute("SELECT * FROM t"))


def duckdb_session(delta_dir: Path, versions: dict[str, int]) -> Any:
    """A DuckDB connection with each table registered *as of its version*."""
    con = duckdb.connect()
    for table, version in versions.items():
        con.register(table, read_as_of(delta_dir / table, version))
    return con


def top_duckdb(
    delta_dir: Path, versions: dict[str, int], board: str, limit: int = LIMIT
) -> tuple[list[tuple[int, int, str, int]], int]:
    """(our top ``limit``, players whose total differs from their contributions)."""
    con = duckdb_session(delta_dir, versions)
    from_contributions = TOTALS_FROM_CONTRIBUTIONS_SQL.format(
        contributions="silver_contributions", board=board
    )
    mismatches = con.sql(
        f"""
        SELECT count(*) FROM ({from_contributions}) AS c
        FULL JOIN (SELECT player_id, score FROM silver_totals WHERE board = '{board}') t
          USING (player_id)
        WHERE c.score IS DISTINCT FROM t.score
        """
    ).fetchall()[0][0]
    top = con.sql(RANK_SQL.format(totals="silver_totals", board=board, limit=limit))
    return [tuple(row) for row in top.fetchall()], int(mismatches)


def ranking_duckdb(
    delta_dir: Path, manifest: dict[str, Any], board: str
) -> list[tuple[int, int, str, int]]:
    """The board's full ranking in the generation of ``manifest``, from gold (every
    position), as of its recorded versions.

    Only the board's rows of the generations read become Arrow: the filters are
    pushed into the ``QueryBuilder`` queries (gold is partitioned by generation)."""
    versions = manifest["tableVersions"]
    chain = (manifest.get("build") or {}).get("gold")
    base = chain["base"] if chain else manifest["generation"]
    query = QueryBuilder().register(
        "gold_snapshots",
        DeltaTable(
            str(delta_dir / "gold_snapshots"), version=versions["gold_snapshots"]
        ),
    )
    con = duckdb.connect()
    con.register(
        "gold",
        pa.table(
            query.execute(
                "SELECT generation, board, position, rank, player_id, score "
                f"FROM gold_snapshots WHERE generation = '{base}' AND board = '{board}'"
            )
        ),
    )
    if chain:
        layers = ", ".join(f"'{g}'" for g in chain["layers"])
        changes = QueryBuilder().register(
            "gold_changes",
            DeltaTable(
                str(delta_dir / "gold_changes"), version=versions["gold_changes"]
            ),
        )
        con.register(
            "changes",
            pa.table(
                changes.execute(
                    "SELECT generation, generation_number, board, player_id, score, "
                    f"removed FROM gold_changes WHERE generation IN ({layers}) "
                    f"AND board = '{board}'"
                )
            ),
        )
    rows = con.sql(ranking_sql(manifest, board, "gold", "changes"))
    return [tuple(row) for row in rows.fetchall()]


def ranked_duckdb(
    delta_dir: Path, versions: dict[str, int], board: str
) -> list[tuple[int, int, str, int]]:
    """Our whole ranking of the board from silver as of the generation."""
    con = duckdb_session(delta_dir, {"silver_totals": versions["silver_totals"]})
    sql = RANK_SQL.format(totals="silver_totals", board=board, limit="ALL")
    return [tuple(row) for row in con.sql(sql).fetchall()]


# %% 2b. The same with Spark SQL: time travel with VERSION AS OF
def top_spark(
    spark: Any,
    delta_dir: Path,
    versions: dict[str, int],
    board: str,
    limit: int = LIMIT,
) -> list[tuple[int, int, str, int]]:
    totals = (
        f"(SELECT * FROM delta.`{delta_dir / 'silver_totals'}` "
        f"VERSION AS OF {versions['silver_totals']}) AS silver_totals"
    )
    rows = spark.sql(RANK_SQL.format(totals=totals, board=board, limit=limit))
    return [
        (r["position"], r["rank"], r["player_id"], r["score"]) for r in rows.collect()
    ]


def ranking_spark(
    spark: Any, delta_dir: Path, manifest: dict[str, Any], board: str
) -> list[tuple[int, int, str, int]]:
    """The board's full ranking in the generation of ``manifest``, in Spark SQL."""
    versions = manifest["tableVersions"]
    gold = (
        f"(SELECT * FROM delta.`{delta_dir / 'gold_snapshots'}` "
        f"VERSION AS OF {versions['gold_snapshots']}) AS gold_snapshots"
    )
    changes = (
        f"(SELECT * FROM delta.`{delta_dir / 'gold_changes'}` "
        f"VERSION AS OF {versions['gold_changes']}) AS gold_changes"
        if "gold_changes" in versions
        else "gold_changes"
    )
    rows = spark.sql(ranking_sql(manifest, board, gold, changes))
    return [
        (r["position"], r["rank"], r["player_id"], r["score"]) for r in rows.collect()
    ]


# %% 3. The API's answer for the same generation
def top_api(api: str, board: str, generation: str) -> list[tuple[int, int, str, int]]:
    reply = httpx.get(
        f"{api}/v1/boards/{board}/top",
        params={"limit": LIMIT, "generation": generation},
        timeout=30,
    )
    reply.raise_for_status()
    body = reply.json()
    assert (body["exactness"], body["basis"]) == ("exact", "snapshot"), body
    return [
        (e["position"], e["rank"], e["playerId"], e["score"]) for e in body["entries"]
    ]


# %% 4. Put together
def check(
    delta_dir: Path,
    api: str | None,
    board: str,
    generation: str | None = None,
    engine: str = "duckdb",
) -> dict[str, Any]:
    manifest = read_manifest(delta_dir, generation)
    gen = manifest["generation"]
    versions = manifest["tableVersions"]
    ours, mismatches = top_duckdb(delta_dir, versions, board)
    if engine == "spark":
        from jobs.spark import get_spark

        ours = top_spark(get_spark("analysts-example"), delta_dir, versions, board)
    # 4 and 5. The full ranking: every gold row of the board; its top against
    # ours and the API's, all of it against our whole ranking and the number of
    # players the manifest says the generation ranked.
    full = ranking_duckdb(delta_dir, manifest, board)
    gold = full[:LIMIT]
    served = top_api(api, board, gen) if api else None
    population = int(manifest["boards"].get(board, {}).get("population", 0))
    return {
        "generation": gen,
        "tableVersions": versions,
        "boundary": manifest["boundary"],
        "rows": len(ours),
        "totals_match_contributions": mismatches == 0,
        "matches_gold": ours == gold,
        "matches_api": None if served is None else ours == served,
        "top": ours,
        "full_rows": len(full),
        "full_matches_ranking": full == ranked_duckdb(delta_dir, versions, board)
        and len(full) == population
        and [row[0] for row in full] == list(range(1, population + 1)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", help="API base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument("--board", default="season:S4:global")
    parser.add_argument("--generation", help="gN (default: the newest)")
    parser.add_argument("--engine", choices=("duckdb", "spark"), default="duckdb")
    parser.add_argument(
        "--data-dir", type=Path, default=Path(os.environ.get("LB_DATA_DIR", ".lb"))
    )
    args = parser.parse_args(argv)
    result = check(
        args.data_dir / "delta", args.api, args.board, args.generation, args.engine
    )
    print(f"generation {result['generation']}, tables as of {result['tableVersions']}")
    for position, rank, player, score in result["top"][:10]:
        print(f"  {position:>3}  rank {rank:>3}  {player:<16} {score:>10,}")
    print(f"  ... {result['rows']} rows reproduced")
    print(f"  full ranking: {result['full_rows']} rows in gold")
    checks = {
        "totals = contributions added up": result["totals_match_contributions"],
        "our ranking = gold": result["matches_gold"],
        "our ranking = the API": result["matches_api"],
        "full ranking = gold, every position": result["full_matches_ranking"],
    }
    for name, ok in checks.items():
        print(f"{'skipped' if ok is None else 'ok' if ok else 'DIFFERS'}: {name}")
    return 0 if all(ok is not False for ok in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
