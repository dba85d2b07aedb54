"""`lb token`: mint a bearer token signed with LB_PLAYER_TOKEN_KEY (api/tokens.py).

A reader token (``--reader NAME``, ``sub`` = ``reader:NAME``) lets a game's own front
end read with ``LB_READ_AUTH=token``; a player token (``--player ID``) is what a
game's login service hands a player (its own view of a shadowed standing, friends).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from conf.settings import Settings

READER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_TTL_SECONDS = 366 * 24 * 3600


def _ttl(value: str) -> int:
    try:
        seconds = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a whole number of seconds: {value!r}"
        ) from None
    if not 1 <= seconds <= MAX_TTL_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be between 1 and {MAX_TTL_SECONDS} seconds (366 days)"
        )
    return seconds


def _cmd_token(args: argparse.Namespace, settings: Settings) -> int:
    from api.tokens import READER_PREFIX, issue_token
    from speed.events import EventInvalid, normalize_id

    if args.reader is not None:
        if not READER_NAME.fullmatch(args.reader):
            print(
                "lb token: --reader must be 1-64 letters, digits, '_', '-' or '.'",
                file=sys.stderr,
            )
            return 2
        subject = READER_PREFIX + args.reader
    else:
        try:
            subject = normalize_id("--player", args.player)
        except EventInvalid as exc:
            print(f"lb token: {exc}", file=sys.stderr)
            return 2
        if subject.startswith(READER_PREFIX):
            print(
                f"lb token: a player id starting with {READER_PREFIX!r} would be a "
                "reader token; use --reader NAME",
                file=sys.stderr,
            )
            return 2
    print(issue_token(settings.player_token_secret, subject, args.ttl))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "token",
        help="mint a reader or player token (Bearer JWT, LB_PLAYER_TOKEN_KEY)",
        description=(
            "Print an HS256 JWT signed with LB_PLAYER_TOKEN_KEY. A reader token "
            "(sub = reader:NAME) is for a game's own front end when reads need a "
            "token (LB_READ_AUTH=token); a player token (sub = the player id) is "
            "what a game's login service hands a player. Send it as "
            "'Authorization: Bearer <token>'."
        ),
        epilog=(
            "examples:\n"
            "  lb token --reader web --ttl 86400\n"
            "  lb token --player P2\n"
            '  curl -H "Authorization: Bearer $(lb token --reader web)" '
            "localhost:8080/v1/boards"
        ),
    )
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--reader", metavar="NAME", help="a reader token: reader:NAME")
    who.add_argument("--player", metavar="ID", help="a player token for this id")
    p.add_argument(
        "--ttl", type=_ttl, default=3600, metavar="SECONDS", help="lifetime (exp)"
    )
    p.set_defaults(func=_cmd_token)
