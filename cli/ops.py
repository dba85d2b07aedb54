"""Operations commands: `lb rebuild`, `lb verify`, `lb status` (API.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from conf.settings import Settings


def _cmd_rebuild(args: argparse.Namespace, settings: Settings) -> int:
    from cli.main import check_redis
    from jobs.rebuild import run_rebuild
    from speed.rebuild import describe

    check_redis(settings)  # before Spark starts: a wrong URL fails in a second

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    report = run_rebuild(settings, dry_run=args.dry_run, progress=progress)
    for line in describe(report.differences):
        print(line)
    if args.dry_run:
        print(
            "dry run: "
            + (
                "the speed layer equals its rebuild"
                if report.identical
                else f"{len(report.differences)} differences; nothing changed"
            )
        )
    else:
        print(
            f"rebuilt from {report.generation or 'no generation'}: "
            f"{len(report.differences)} differences repaired, "
            f"{report.records_restored} records restored"
        )
    return 0


def _cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    from api.served import served_reads
    from cli.main import check_redis
    from jobs.verify import describe, run_verify

    if args.check_incremental:
        return _check_incremental(args, settings)
    check_redis(settings)

    # The served side is the API's read service, built here (jobs do not import
    # the API) and read without HTTP.
    with served_reads(settings) as served:
        result = run_verify(
            settings,
            served,
            board=args.board,
            sample=args.sample,
            seed=args.seed,
            game=args.game,
        )
    for line in describe(result):
        print(line)
    return 0 if result.ok else 1


def _check_incremental(args: argparse.Namespace, settings: Settings) -> int:
    """`lb verify --check-incremental`: a generation's gold rows and served
    segments (layered boards merged) against a full recompute of its boundary
    (jobs.build.check_generation)."""
    from cli.quiet import quiet_spark
    from jobs.build import SERVED_DIFFERENCES_SHOWN, check_generation

    check = check_generation(
        settings, quiet_spark(settings, "verify"), generation=args.generation
    )
    build = check.build
    origin = f" from {build['from']}" if build.get("from") else ""
    print(
        f"{check.generation} ({build.get('mode')}{origin}): {check.rows} gold rows; "
        f"{check.only_in_gold} only in gold, {check.only_in_recompute} only in the "
        "full recompute"
    )
    served = len(check.served_differences)
    print(
        f"served segments (layered boards merged): "
        f"{'the same answers' if not served else f'{served} differences'}"
        + (" (the first shown)" if served >= SERVED_DIFFERENCES_SHOWN else "")
    )
    for line in check.served_differences:
        print(f"  {line}")
    print(
        "identical to a full recompute" if check.ok else "DIFFERS from a full recompute"
    )
    return 0 if check.ok else 1


def _cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    from cli.status import collect_status, render_status

    status = collect_status(settings)
    if args.json:
        import orjson

        print(orjson.dumps(status, option=orjson.OPT_INDENT_2).decode())
    else:
        print(render_status(status))
    return 0


def register(sub: Any) -> None:
    """Add the operations commands to the `lb` parser's subparsers."""
    p = sub.add_parser(
        "rebuild",
        help="rebuild the speed layer from the latest generation and the log tail",
        description=(
            "Rebuild every partition's speed layer (totals, changed-sets, Fenwick "
            "trees, contribution and dedupe records, position counters) from the "
            "newest generation plus every log record: landed Delta rows and the "
            "unlanded Redis log. Builds aside, prints the differences with the live "
            "state, then switches each partition in atomically. Progress goes to "
            "stderr."
        ),
        epilog=(
            "examples:\n"
            "  lb rebuild --dry-run          what differs; changes nothing\n"
            "  lb rebuild                    repair the speed layer after a loss"
        ),
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the diff against the live state and change nothing",
    )
    p.set_defaults(func=_cmd_rebuild)

    p = sub.add_parser(
        "verify",
        help="compare served answers with an offline computation from Delta",
        description=(
            "Compare the served snapshot and live answers (top 100, sampled players, "
            "award-tier boundaries) of every board with an offline computation in "
            "Spark from Delta. Exits 0 when they agree, 1 naming each divergence. "
            "Each run appends a row to the Delta table ops_verify_runs."
        ),
        epilog=(
            "examples:\n"
            "  lb verify                     every board, 100 sampled players\n"
            "  lb verify --board season:S4:global --sample 1000\n"
            "  lb verify --check-incremental --generation g7"
        ),
    )
    p.add_argument("--board", help="only this board (default: every board)")
    p.add_argument(
        "--game",
        default="default",
        help="the game whose boards are compared (API.md Games; default: default)",
    )
    p.add_argument(
        "--sample", type=int, default=100, help="players sampled per board (100)"
    )
    p.add_argument("--seed", type=int, help="sampling seed (default: from the run id)")
    p.add_argument(
        "--check-incremental",
        action="store_true",
        help="instead: compare a generation's gold rows and served segments "
        "(layered boards merged) with a full recompute of its boundary (no Redis "
        "needed; exit 1 on any difference)",
    )
    p.add_argument(
        "--generation", help="with --check-incremental: this one (default: latest)"
    )
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser(
        "status",
        help="stack, latest generation and age, backlog, seasons, last verify",
        description=(
            "One screen: Redis and the API, the latest generation and its age, per "
            "partition the log backlog and the age of the oldest unlanded event, "
            "the seasons' states and the last verify."
        ),
        epilog="examples:\n  lb status\n  lb status --json | jq .partitions",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_status)
