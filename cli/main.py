"""The `lb` command line (API.md: up, down, publish, season close, rebuild, demo)."""

from __future__ import annotations

import argparse
import sys

from cli import season
from conf.boards import BoardsFileError, load_boards
from conf.settings import Settings


def _cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    from cli.stack import up

    url = up(settings, args.port)
    print(f"API ready at {url}")
    return 0


def _cmd_down(args: argparse.Namespace, settings: Settings) -> int:
    from cli.stack import down

    stopped = down(settings)
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def _cmd_publish(args: argparse.Namespace, settings: Settings) -> int:
    import fcntl

    from jobs.publish import run_publish
    from speed.rebase import rebase_published

    # One publisher at a time per data dir: a second one fails fast instead of
    # racing the first for the same generation number.
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    lock = open(settings.run_dir / "publish.lock", "w")  # noqa: SIM115 - held to exit
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(
            "lb publish: another publish is running for this data dir", file=sys.stderr
        )
        return 1
    generation = run_publish(settings)
    # The speed layer's changed-sets and histograms now follow the new generation.
    report = rebase_published(settings, generation)
    stale = {p: o for p, o in report.partitions.items() if o != "ok"}
    if stale:
        print(
            f"rebase: partitions not rebased (reads stay exact on the previous base "
            f"until the next publish): {stale}",
            file=sys.stderr,
        )
    print(generation)
    return 0


def _cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from cli.demo import run_demo

    return run_demo(settings, players=args.players, events=args.events)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start Redis and the API in the background")
    p_up.add_argument("--port", type=int, default=8080)
    p_up.set_defaults(func=_cmd_up)
    sub.add_parser("down", help="stop what `lb up` started").set_defaults(
        func=_cmd_down
    )
    sub.add_parser(
        "publish", help="land the logs, recompute and publish one generation"
    ).set_defaults(func=_cmd_publish)
    p_demo = sub.add_parser("demo", help="the main job on embedded defaults")
    p_demo.add_argument("--players", type=int, default=100_000)
    p_demo.add_argument("--events", type=int, default=1_000_000)
    p_demo.set_defaults(func=_cmd_demo)
    season.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings()
        load_boards(settings.boards_file)
    except (BoardsFileError, ValueError) as exc:
        print(f"lb: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        return int(args.func(args, settings))
    except RuntimeError as exc:
        print(f"lb {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
