"""The API's processes: uvicorn serving ``api.main:create_app``, one process or a
manager and N workers, each worker listening on a socket of its own.

Why not ``uvicorn --workers N``: there the manager binds one listening socket and
every worker accepts from it. A worker's event loop accepts every connection queued
when it wakes, so a client that opens its keep-alive connections in a burst (a game
server's pool, a load generator) lands most or all of them on one worker, which
then serves the whole load on one core while the other idles (`make bench-reads`
on 1 M players, 3 December: live nearby at 1,000 req/s had one worker at 96 % of a
core and the other at 0 %, p99 259 ms; bench/RESULTS.md). Here each worker binds
its own socket with ``SO_REUSEPORT`` on the same address, and the kernel spreads
new connections over the workers' sockets by a hash of the connection's addresses,
as nginx's ``reuseport`` does. The manager holds no listening socket (one nobody
accepts from would still get its share of connections).

uvicorn's own manager (``Multiprocess``: restarts a dead or hung worker, stops on a
worker that fails to start, signals) is used as it is; only its worker class is
ours, so that each worker binds its socket before it serves.

    python -m cli.api_server --host H --port P [--workers N] [--http CLASS]
"""

from __future__ import annotations

import argparse
import socket
import sys

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import multiprocess

APP = "api.main:create_app"


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A TCP socket listening on ``host:port`` with SO_REUSEPORT (every worker
    binds one; the kernel balances connections over them)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class OwnSocketWorker(multiprocess.Process):
    """A uvicorn worker that serves on a socket it binds itself (runs in the
    child: the manager pickles this object to start it)."""

    def target(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            sock = listening_socket(
                self.config.host, self.config.port, self.config.backlog
            )
        except OSError as exc:
            print(f"cannot listen on {self.config.host}:{self.config.port}: {exc}")
            # The manager stops instead of restarting it again and again.
            sys.exit(STARTUP_FAILURE)
        super().target([sock])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cli.api_server")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--http", default="auto", help="uvicorn's --http")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    config = uvicorn.Config(
        APP,
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        http=args.http,
        access_log=False,
        log_level=args.log_level,
    )
    if config.workers <= 1:
        # One process: it binds and serves itself (uvicorn.run without workers).
        server = uvicorn.Server(config)
        server.run()
        return 0 if server.started else STARTUP_FAILURE
    # Fail now, in the manager, when the address cannot be had (a worker would
    # fail the same way); the probe socket is closed before any worker binds.
    try:
        listening_socket(config.host, config.port, config.backlog).close()
    except OSError as exc:
        print(f"cannot listen on {config.host}:{config.port}: {exc}", file=sys.stderr)
        return STARTUP_FAILURE
    # uvicorn's manager builds its workers from this module-level name.
    multiprocess.Process = OwnSocketWorker  # type: ignore[misc]
    multiprocess.Multiprocess(config, sockets=[]).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
