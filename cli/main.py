"""The `lb` command line: run the leaderboard stack, publish generations, demo it.

Every command reads its settings from LB_* environment variables, validated once at
start-up (a bad value is named: "LB_PARTITIONS: ..."). Expected failures print one or
two lines saying what is wrong and how to fix it, and exit with the codes below;
`--debug` adds the traceback.

Adding a command: put it in its own module `cli/<topic>.py` exposing
``register(subparsers)``; each parser it adds sets ``func=handler`` where
``handler(args, settings) -> int`` returns the exit code. Then list the module in
``COMMAND_MODULES`` below. Parsers made by ``subparsers.add_parser`` inherit this
file's help formatting (description and epilog kept as written, defaults shown).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from conf.boards import BoardsFileError, load_boards
from conf.settings import Settings, SettingsError, load_settings
from jobs.publish_lock import PublishBusy, publish_lock

# Modules adding their own commands through ``register(subparsers)``; a module not
# present in this checkout is skipped (so a branch can land its module later).
COMMAND_MODULES: tuple[str, ...] = (
    "cli.season",
    "cli.ops",
    "cli.replay",
    "cli.maintain",
    "cli.tokens",
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_UNAVAILABLE = 3
EXIT_NOT_INSTALLED = 4
EXIT_BUSY = 5
EXIT_ENVIRONMENT = 6
EXIT_INTERRUPTED = 130
EXIT_BUG = 70

EXIT_CODES = f"""\
exit codes:
  {EXIT_OK}    success
  {EXIT_FAILED}    the command ran and failed (its message says what failed)
  {EXIT_CONFIG}    usage or configuration error: bad argument, invalid LB_* variable,
       broken boards file, the development key with LB_PRODUCTION=true
  {EXIT_UNAVAILABLE}    a service is unavailable: Redis unreachable, port in use,
       the API did not become ready
  {EXIT_NOT_INSTALLED}    something is not installed: Delta jars (make jars),
       redis-server (make redis)
  {EXIT_BUSY}    busy: another `lb publish` holds this data dir's publish lock
  {EXIT_ENVIRONMENT}    the environment failed: disk full, read-only or unwritable
       directory, path too long, the Spark driver died; fix it and rerun
  {EXIT_BUG}   unexpected error (a bug): rerun with --debug and report the traceback
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)"""

ENVIRONMENT = """\
environment (see README, Configuration):
  LB_DATA_DIR     Delta tables, segments, local Redis data, pid files (default ./.lb)
  LB_REDIS_URL    use this Redis instead of the one `lb up` starts
  LB_BOARDS_FILE  regions and seasons (default: conf/boards.yaml in the package)
  LB_HMAC_KEYS    keyId:secret[,keyId:secret] of the game servers
  LB_PARTITIONS   number of partitions (default 8)
  LB_PRODUCTION   true outside local use: the development key is refused"""

TOP_EXAMPLES = """\
examples:
  lb demo                      play a synthetic season, publish it, open the page
  lb up --port 8080            start Redis and the API in the background
  lb publish                   land, recompute and publish one generation
  lb down                      stop what `lb up` started
  lb --debug publish           the same, with a traceback on failure
  lb <command> --help          options and examples of one command"""


class HelpFormatter(argparse.HelpFormatter):
    """Help that explains: one-line paragraphs are wrapped to the terminal, while
    multi-line ones (examples, tables) keep their lines; an option's default is
    shown after its help when it has a meaningful one."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for paragraph in text.split("\n\n"):
            if "\n" in paragraph.strip("\n"):
                paragraphs.append(
                    "\n".join(indent + line for line in paragraph.splitlines())
                )
            else:
                paragraphs.append(super()._fill_text(paragraph, width, indent))
        return "\n\n".join(paragraphs)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" not in text
            and action.option_strings
            and default not in (None, False, argparse.SUPPRESS)
        ):
            text += " (default: %(default)s)"
        return text


class LbParser(argparse.ArgumentParser):
    """An ArgumentParser whose subcommands format their help like the top level."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


# Another publisher holds this data dir's publish lock (jobs/publish_lock.py).
PublishLocked = PublishBusy


class RedisUnreachable(RuntimeError):
    """Redis does not answer at the URL the command would use."""


@dataclass(frozen=True)
class Failure:
    """What the user sees for an expected failure: a line, a fix, an exit code."""

    message: str
    hint: str | None
    code: int


def redact(url: str) -> str:
    """A Redis URL without its password (safe to print)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + host))


def _class_named(module: str, name: str) -> type[BaseException] | None:
    """An exception class of another module, if it defines it (loosely coupled:
    cli/stack.py's named errors are mapped here without importing them eagerly)."""
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    return found if isinstance(found, type) else None


# What the environment did, by errno: a failure of the machine, not of `lb`.
ENVIRONMENT_ERRNOS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: (
        "no space left on the device",
        "free space there (or point LB_DATA_DIR at a bigger disk), then rerun",
    ),
    errno.EDQUOT: (
        "disk quota exceeded",
        "free space there or raise the quota, then rerun",
    ),
    errno.EROFS: (
        "read-only file system",
        "remount it read-write or point LB_DATA_DIR at a writable directory",
    ),
    errno.EACCES: (
        "permission denied",
        "make it writable by this user or point LB_DATA_DIR elsewhere",
    ),
    errno.EPERM: (
        "operation not permitted",
        "make it writable by this user or point LB_DATA_DIR elsewhere",
    ),
    errno.ENAMETOOLONG: (
        "path too long",
        "use a shorter LB_DATA_DIR (a unix socket path must be under 108 bytes)",
    ),
}
# Work the commands do that fails as a whole: what a rerun sees.
RERUN_SAFE = (
    "nothing half-done was published (a generation appears whole or not at all); "
    "rerunning is safe"
)


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 16:
        seen.append(current)
        if current.__cause__ is not None:
            current = current.__cause__
        elif not current.__suppress_context__:
            current = current.__context__
        else:
            current = None
    return seen


def _spark_driver_died(exc: BaseException) -> bool:
    """A lost connection to the Spark driver (its JVM died or was killed)."""
    try:
        from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError
    except ImportError:
        return False
    if isinstance(exc, Py4JNetworkError):
        return True
    # py4j's own words when the JVM went away in the middle of a call.
    return (
        isinstance(exc, Py4JError)
        and not isinstance(exc, Py4JJavaError)
        and "Answer from Java side is empty" in str(exc)
    )


def environment_failure(exc: BaseException) -> Failure | None:
    """A failure of the environment (disk, permissions, a path's length, a dead
    Spark driver) anywhere in ``exc``'s chain, else None."""
    for each in _chain(exc):
        if _spark_driver_died(each):
            said = (str(each).strip().splitlines() or [""])[0]
            return Failure(
                f"the Spark driver died ({type(each).__name__}: {said})",
                f"{RERUN_SAFE}; if it was killed for memory, raise "
                "LB_SPARK_DRIVER_MEMORY or free memory first",
                EXIT_ENVIRONMENT,
            )
        if not isinstance(each, OSError):
            continue
        if each.errno is None and "AF_UNIX path too long" in str(each):
            return Failure(
                "a unix socket path is too long (AF_UNIX paths must be under "
                "108 bytes)",
                "use a shorter LB_DATA_DIR",
                EXIT_ENVIRONMENT,
            )
        known = ENVIRONMENT_ERRNOS.get(each.errno or -1)
        if known is not None:
            what, fix = known
            paths = [str(p) for p in (each.filename, each.filename2) if p]
            where = f": {' -> '.join(paths)}" if paths else ""
            if each.errno != errno.ENAMETOOLONG:
                fix = f"{fix}; {RERUN_SAFE}"
            return Failure(f"{what}{where}", fix, EXIT_ENVIRONMENT)
    return None


def explain(exc: BaseException) -> Failure | None:
    """The one place mapping expected failures to messages and exit codes.

    Returns None for an unexpected exception (a bug).
    """
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    from jobs.jars import JarsMissing
    from speed.server import RedisNotConfigured, RedisServerError

    if isinstance(exc, KeyboardInterrupt):
        return Failure("interrupted", None, EXIT_INTERRUPTED)
    if isinstance(exc, SettingsError):
        return Failure(
            f"invalid setting: {exc}",
            "fix the variable in your environment (README, Configuration)",
            EXIT_CONFIG,
        )
    if isinstance(exc, BoardsFileError):
        return Failure(
            f"broken boards file: {exc}",
            "fix that field, or unset LB_BOARDS_FILE to use the packaged default",
            EXIT_CONFIG,
        )
    if isinstance(exc, JarsMissing):
        return Failure(
            str(exc).split(". Run")[0],
            "run `make jars` once while online (it fetches them into .cache/jars)",
            EXIT_NOT_INSTALLED,
        )
    if isinstance(exc, PublishLocked):
        return Failure(
            str(exc),
            "wait for it to finish (one publish at a time per LB_DATA_DIR)",
            EXIT_BUSY,
        )
    if isinstance(exc, RedisUnreachable | RedisConnectionError | RedisTimeoutError):
        return Failure(
            f"Redis is unreachable: {exc}",
            "start the stack with `lb up`, or point LB_REDIS_URL at a running Redis",
            EXIT_UNAVAILABLE,
        )
    if isinstance(exc, RedisNotConfigured):
        return Failure(str(exc), None, EXIT_UNAVAILABLE)
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return Failure(
            f"port already in use: {exc.strerror}",
            "choose another with --port, or stop what listens there",
            EXIT_UNAVAILABLE,
        )
    if isinstance(exc, RedisServerError):
        missing = "not found" in str(exc)
        return Failure(
            str(exc),
            None if missing else "see the Redis log named above",
            EXIT_NOT_INSTALLED if missing else EXIT_UNAVAILABLE,
        )
    # cli/stack.py's named failures of `lb up` (port in use, Redis unreachable with
    # the /readyz reason, API not ready); their messages say what to do.
    for name in ("PortInUse", "RedisUnreachable", "StackStartFailed"):
        cls = _class_named("cli.stack", name)
        if cls is not None and isinstance(exc, cls):
            return Failure(str(exc), None, EXIT_UNAVAILABLE)
    stack_error = _class_named("cli.stack", "StackError")
    if stack_error is not None and isinstance(exc, stack_error):
        return Failure(str(exc), None, EXIT_FAILED)
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int):  # a command's own named failure
        return Failure(str(exc), getattr(exc, "hint", None), code)
    return environment_failure(exc)


# ------------------------------------------------------------------------ commands


def check_redis(settings: Settings, timeout: float = 2.0) -> str:
    """Ping the Redis the command would use; raise :class:`RedisUnreachable` if not.

    Done before starting Spark, so a wrong LB_REDIS_URL fails in a second with its
    reason instead of after Spark's start-up with a long traceback.
    """
    import redis

    from speed.connection import sync_client
    from speed.server import resolve_redis_url

    url = resolve_redis_url(settings)
    source = "LB_REDIS_URL" if settings.redis_url else "the Redis `lb up` started"
    client = sync_client(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        client.ping()
    except (redis.exceptions.RedisError, OSError) as exc:
        raise RedisUnreachable(f"{redact(url)} ({source}): {exc}") from None
    finally:
        client.close()
    return url


def _cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    from cli.stack import up

    url = up(settings, args.port)
    print(f"API ready at {url}  (page: {url}/, API docs: {url}/docs)")
    return EXIT_OK


def _cmd_down(args: argparse.Namespace, settings: Settings) -> int:
    from cli.stack import down

    stopped = down(settings)
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return EXIT_OK


def _cmd_publish(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.jars import jar_paths

    # Cheap checks first: the jars and Redis, before Spark takes seconds to start.
    jar_paths()
    check_redis(settings)

    from cli.quiet import quiet_spark
    from jobs.publish import run_publish
    from speed.rebase import rebase_published

    # One publisher at a time per data dir: a second one fails fast instead of
    # racing the first for the same generation number.
    with publish_lock(settings):
        generation = run_publish(
            settings,
            spark=quiet_spark(settings, "publish"),
            full=args.full,
            compact=args.compact,
        )
        # The speed layer's changed-sets and histograms now follow the generation.
        report = rebase_published(settings, generation)
    stale = {p: o for p, o in report.partitions.items() if o != "ok"}
    if stale:
        print(
            f"rebase: partitions not rebased (reads stay exact on the previous base "
            f"until the next publish): {stale}",
            file=sys.stderr,
        )
    print(generation)
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from cli.demo import run_demo

    return run_demo(
        settings,
        players=args.players,
        events=args.events,
        port=args.port,
        keep_running=not args.exit,
    )


def _add_core_commands(sub: Any) -> None:
    p_up = sub.add_parser(
        "up",
        help="start Redis and the API in the background",
        description=(
            "Start a local redis-server (unless LB_REDIS_URL points to one) and the "
            "API on 127.0.0.1:PORT, in the background. Returns when /readyz answers "
            "200. Pid files and logs go to $LB_DATA_DIR/run."
        ),
        epilog=(
            "examples:\n"
            "  lb up                         API on http://127.0.0.1:8080\n"
            "  lb up --port 9000             another port\n"
            "  LB_REDIS_URL=redis://host:6379/0 lb up   use an existing Redis"
        ),
    )
    p_up.add_argument(
        "--port", type=int, default=8080, help="TCP port of the API on 127.0.0.1"
    )
    p_up.set_defaults(func=_cmd_up)

    p_down = sub.add_parser(
        "down",
        help="stop what `lb up` started",
        description=(
            "Stop the API and the redis-server that `lb up` started for this "
            "LB_DATA_DIR (nothing else). Data stays on disk."
        ),
        epilog="examples:\n  lb down",
    )
    p_down.set_defaults(func=_cmd_down)

    p_publish = sub.add_parser(
        "publish",
        help="land the logs, recompute and publish one generation",
        description=(
            "Land every partition's log into Delta (bronze), recompute exact totals "
            "(silver) and ranks (gold), write the serving segments and the manifest, "
            "then rebase the speed layer onto the new generation. Prints the "
            "generation id on its last line. Needs Redis (checked first) and the "
            "Delta jars (both checked before Spark starts). Spark's own log goes to "
            "$LB_DATA_DIR/logs/spark.log, not the console."
        ),
        epilog=(
            "examples:\n"
            "  lb publish                    prints e.g. g7 on its last line\n"
            "  gen=$(lb publish | tail -1)   capture the generation id\n"
            "  lb publish --compact          the same, every layered board compacted"
        ),
    )
    p_publish.add_argument(
        "--full",
        action="store_true",
        help="recompute everything (default: incremental when the previous "
        "generation is a valid base)",
    )
    p_publish.add_argument(
        "--compact",
        action="store_true",
        help="write every board of the new generation as a full base: layered "
        "boards are compacted from their chains (same answers); without it a "
        "chain compacts only past LB_LAYERS_MAX_CHAIN / LB_LAYERS_MAX_FRACTION",
    )
    p_publish.set_defaults(func=_cmd_publish)

    p_demo = sub.add_parser(
        "demo",
        help="play a synthetic season, publish it, and serve the page",
        description=(
            "Start a fresh stack in $LB_DATA_DIR/demo, ingest a synthetic season "
            "through the signed API (redeliveries, corrections, ties), publish a "
            "generation with Spark, show the top 10 and a player's rank in every "
            "mode, then print the page's URL and keep serving until Ctrl-C "
            "(or stop at once with --exit)."
        ),
        epilog=(
            "examples:\n"
            "  lb demo                       default size, stays up until Ctrl-C\n"
            "  lb demo --exit                scripted use: stop when done\n"
            "  lb demo --players 1000000 --events 5000000   a bigger season"
        ),
    )
    p_demo.add_argument(
        "--players", type=int, default=10_000, help="distinct players in the season"
    )
    p_demo.add_argument(
        "--events", type=int, default=50_000, help="score events to ingest"
    )
    p_demo.add_argument(
        "--port", type=int, default=None, help="API port (default: a free port)"
    )
    p_demo.add_argument(
        "--exit",
        action="store_true",
        help="stop the stack when done instead of serving until Ctrl-C",
    )
    p_demo.set_defaults(func=_cmd_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = LbParser(
        prog="lb",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="\n\n".join((TOP_EXAMPLES, ENVIRONMENT, EXIT_CODES)),
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback when a command fails",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="<command>", title="commands"
    )
    _add_core_commands(sub)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def _report(command: str, exc: BaseException, debug: bool) -> int:
    failure = explain(exc)
    if debug:
        traceback.print_exception(exc)
    if failure is None:
        print(
            f"lb {command}: unexpected error: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        if not debug:
            print(
                "  this is a bug: rerun with --debug and report the traceback",
                file=sys.stderr,
            )
        return EXIT_BUG
    print(f"lb {command}: {failure.message}", file=sys.stderr)
    if failure.hint:
        print(f"  fix: {failure.hint}", file=sys.stderr)
    return failure.code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace, Settings], int] = args.func
    try:
        settings = load_settings()
        load_boards(settings.boards_file)
        return int(handler(args, settings))
    except (Exception, KeyboardInterrupt) as exc:
        return _report(args.command, exc, args.debug)


if __name__ == "__main__":
    sys.exit(main())
