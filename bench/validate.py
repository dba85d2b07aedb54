"""CPU per event of the write path's validation, in process (no HTTP, no Redis).

    python -m bench.validate [--events N] [--repeat R]

Runs :func:`api.routes.score_events.validate_event` (schema, ids, occurredAt,
canonical body and fingerprint, scoring) over the ingest benchmark's events
(:class:`bench.harness.EventFactory`) and prints the best of ``R`` rounds in CPU
microseconds per event (``time.process_time``, so a loaded machine inflates it less
than wall time).
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime

import orjson

from bench.harness import EventFactory, bench_boards
from conf.rules import default_registry
from conf.settings import Settings
from speed.events import validate_event


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.validate", description=__doc__)
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    settings = Settings(rate_limit="off")
    boards = bench_boards()
    rules = default_registry()
    factory = EventFactory(100_000, 1, datetime.now(UTC))
    # Through JSON and back, as the route sees them.
    raws = [orjson.loads(orjson.dumps(factory.event("v"))) for _ in range(args.events)]
    now = datetime.now(UTC)
    best = float("inf")
    for _ in range(args.repeat):
        started = time.process_time()
        for raw in raws:
            validate_event(raw, settings, boards, now, rules)
        best = min(best, time.process_time() - started)
    print(
        f"validate_event: {best / len(raws) * 1e6:.2f} CPU us/event "
        f"(best of {args.repeat} x {len(raws)})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
