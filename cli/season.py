"""`lb season close <seasonId>` and `lb season adjudicate <seasonId> ...`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from conf.settings import Settings


def _ids(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def season_of(args: argparse.Namespace) -> str:
    """The internal season id of ``<seasonId> --game G`` (conf.boards.qualify)."""
    from conf.boards import qualify

    return qualify(args.game, args.season)


def add_game(parser: Any) -> None:
    parser.add_argument(
        "--game",
        default="default",
        help="the game whose season it is (API.md Games; default: default)",
    )


def _cmd_close(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.season import SeasonError, close_season

    try:
        snapshot = close_season(settings, season_of(args))
    except SeasonError as exc:
        print(f"lb season close: {exc}", file=sys.stderr)
        return 1
    for board, population in sorted(snapshot.boards.items()):
        print(f"{board}: {population} players")
    print(
        f"season {snapshot.season} closed: award version {snapshot.version}, "
        f"generation {snapshot.generation}, hash {snapshot.hash}"
    )
    return 0


def _cmd_adjudicate(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.season import SeasonError, adjudicate_season
    from jobs.spark import get_spark

    try:
        snapshot = adjudicate_season(
            settings,
            season_of(args),
            _ids(args.accept),
            _ids(args.reject),
            args.reason,
            spark=get_spark("season-adjudicate"),
        )
    except SeasonError as exc:
        print(f"lb season adjudicate: {exc}", file=sys.stderr)
        return 1
    for change in snapshot.changes:
        print(
            f"{change['board']} {change['playerId']}: rank {change['oldRank']} -> "
            f"{change['newRank']}, tier {change['oldTier']} -> {change['newTier']}"
        )
    print(
        f"season {snapshot.season}: award version {snapshot.version}, "
        f"hash {snapshot.hash}"
    )
    return 0


def register(subparsers: Any) -> None:
    season = subparsers.add_parser(
        "season",
        help="close a season, adjudicate late events",
        description=(
            "Season lifecycle. `close` (after the season's end + allowedLateness) "
            "checks every partition landed past the close time, publishes a final "
            "generation and writes award version 1 (files under "
            "$LB_DATA_DIR/awards/<season>/ and Delta gold_awards); running it again "
            "prints the same snapshot. `adjudicate` accepts or rejects events held "
            "for late review and writes award version N+1; version N never changes."
        ),
        epilog=(
            "examples:\n"
            "  lb season close S4\n"
            "  lb season adjudicate S4 --accept E1,E2 --reject E3 "
            '--reason "outage, verified"'
        ),
    )
    sub = season.add_subparsers(dest="season_command", required=True)
    close = sub.add_parser(
        "close",
        help="final generation plus immutable award snapshot",
        description="Close a season: final generation plus award snapshot v1.",
        epilog="examples:\n  lb season close S4",
    )
    close.add_argument("season")
    add_game(close)
    close.set_defaults(func=_cmd_close)
    adjudicate = sub.add_parser(
        "adjudicate",
        help="a new award version from the late-review queue",
        description=(
            "Accept or reject events held for late review (ids as listed by "
            "GET /v1/admin/seasons/<id>/late-review): award version N+1 with its "
            "changes against N, audited as cli:<user>."
        ),
        epilog=(
            "examples:\n"
            '  lb season adjudicate S4 --accept E901 --reason "outage, verified"'
        ),
    )
    adjudicate.add_argument("season")
    add_game(adjudicate)
    adjudicate.add_argument("--accept", default="", help="event ids, comma separated")
    adjudicate.add_argument("--reject", default="", help="event ids, comma separated")
    adjudicate.add_argument("--reason", required=True)
    adjudicate.set_defaults(func=_cmd_adjudicate)
