"""`lb replay`: recompute a season under another scoring rule, diff, and promote."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from conf.settings import Settings

EXAMPLES = """\
examples:
  lb replay --season S4 --rule v2             boards season:S4@v2:<scope> + diff
  lb replay --season S4 --rule v2 --k 5       count players moving more than 5 ranks
  lb replay --season S4 --rule v2 --promote --reason "v2 approved"
  lb replay --game arena --season S4 --rule v2
      boards /v1/games/arena/boards/season:S4@v2:<scope> (arena's S4 only)
"""


def _cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    from cli.main import EXIT_CONFIG, EXIT_OK, check_redis
    from conf.boards import load_boards
    from jobs.jars import jar_paths
    from jobs.publish_lock import publish_lock
    from jobs.replay import ReplayError, game_season, run_replay

    try:
        # An unknown game or season is a usage error before Spark starts.
        game_season(load_boards(settings.boards_file), args.game, args.season)
    except ReplayError as exc:
        print(f"lb replay: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    jar_paths()
    check_redis(settings)
    from cli.quiet import quiet_spark

    try:
        # A replay publishes: it takes the data dir's publish lock like `lb publish`.
        with publish_lock(settings):
            summary = run_replay(
                settings,
                args.season,
                args.rule,
                k=args.k,
                promote=args.promote,
                actor=f"cli:{getpass.getuser()}",
                reason=args.reason,
                spark=quiet_spark(settings, "replay"),
                game=args.game,
            )
    except ReplayError as exc:
        print(f"lb replay: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    for line in summary.lines():
        print(line)
    print(summary.promoted or summary.generation)
    return EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser(
        "replay",
        help="recompute a season under another scoring rule and diff it",
        description=(
            "Recompute a season from its recorded events under another scoring rule "
            "into the boards season:<S>@<R>:<scope> (readable like a board, not "
            "listed in GET /v1/boards), publish a generation holding both, and print "
            "the diff (also written to the Delta table gold_replay_diffs). "
            "--promote then switches the season to the rule, audited, through a new "
            "generation."
        ),
        epilog=EXAMPLES,
    )
    p.add_argument("--season", required=True, help="season id, e.g. S4")
    p.add_argument("--rule", required=True, help="scoring rule version, e.g. v2")
    p.add_argument(
        "--game", default="default", help="the season's game (default: default)"
    )
    p.add_argument(
        "--k", type=int, default=10, help="report players moving more than K ranks"
    )
    p.add_argument(
        "--promote", action="store_true", help="switch the season to the rule"
    )
    p.add_argument("--reason", default=None, help="why (recorded in the audit trail)")
    p.set_defaults(func=_cmd_replay)
