"""Operations commands: `lb rebuild`, `lb verify`, `lb status` (API.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from conf.settings import Settings


def _cmd_rebuild(args: argparse.Namespace, settings: Settings) -> int:
    from speed.rebuild import describe, run_rebuild

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
    from jobs.verify import describe, run_verify

    result = run_verify(settings, board=args.board, sample=args.sample, seed=args.seed)
    for line in describe(result):
        print(line)
    return 0 if result.ok else 1


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
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the diff against the live state and change nothing",
    )
    p.set_defaults(func=_cmd_rebuild)

    p = sub.add_parser(
        "verify", help="compare served answers with an offline computation from Delta"
    )
    p.add_argument("--board", help="only this board (default: every board)")
    p.add_argument(
        "--sample", type=int, default=100, help="players sampled per board (100)"
    )
    p.add_argument("--seed", type=int, help="sampling seed (default: from the run id)")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser(
        "status",
        help="stack, latest generation and age, backlog, seasons, last verify",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_status)
