"""A command module as other topics write them (used by the registration test)."""

from __future__ import annotations

import argparse
from typing import Any

from conf.settings import Settings


def _hello(args: argparse.Namespace, settings: Settings) -> int:
    print(f"hello {args.name}")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "hello",
        help="say hello",
        description="Say hello to someone.",
        epilog="examples:\n  lb hello --name ann",
    )
    parser.add_argument("--name", default="world", help="who to greet")
    parser.set_defaults(func=_hello)
