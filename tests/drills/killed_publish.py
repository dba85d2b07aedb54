"""`lb publish` whose Spark JVM is killed (SIGKILL) in one phase: a drill's driver.

Run as ``python -m tests.drills.killed_publish PHASE`` with the stack's environment;
PHASE is when the JVM dies:

* ``land``: after the first partition's bronze commit (the rest not landed);
* ``recompute``: once the contributions are recomputed, before the totals;
* ``segments``: segment files written aside, before they are renamed into place;
* ``manifest``: segments in place, before the manifest row.

The publish then fails on its next Spark call, as it would when the driver's JVM
is killed by the OOM killer. Prints ``killed <PHASE>`` when the kill happened; the
exit code is `lb publish`'s.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

PHASES = ("land", "recompute", "segments", "manifest")


def _descendants(root: int) -> list[int]:
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found.append(child)
            todo.append(child)
    return found


def kill_jvm(phase: str) -> None:
    killed = []
    for pid in _descendants(os.getpid()):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if name == "java":
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    assert killed, "no Spark JVM below this process"
    print(f"killed {phase} (jvm {killed})", flush=True)


def install(phase: str) -> None:
    import jobs.publish as publish
    from jobs.phase_clock import PhaseClock

    done = False

    def once() -> None:
        nonlocal done
        if not done:
            done = True
            kill_jvm(phase)

    if phase == "land":
        run_land = publish.run_land

        def land(settings: Any, spark: Any, **kwargs: Any) -> Any:
            return run_land(settings, spark, after_commit=lambda _p: once())

        publish.run_land = land  # type: ignore[assignment]
    elif phase in ("recompute", "manifest"):
        after = {"recompute": "recompute_contributions", "manifest": "segments"}[phase]
        lap = PhaseClock.lap

        def lap_then_kill(self: PhaseClock, phase: str) -> None:
            lap(self, phase)
            if phase == after:
                once()

        PhaseClock.lap = lap_then_kill  # type: ignore[method-assign]
    elif phase == "segments":
        import jobs.segments as segments

        hidden_rows = segments._hidden_rows

        def kill_then_hidden(*args: Any, **kwargs: Any) -> Any:
            once()
            return hidden_rows(*args, **kwargs)

        segments._hidden_rows = kill_then_hidden
    else:
        raise SystemExit(f"unknown phase {phase!r}; one of {', '.join(PHASES)}")


def main() -> int:
    phase = sys.argv[1]
    install(phase)
    from cli.main import main as lb

    return int(lb(["publish"]) or 0)


if __name__ == "__main__":
    sys.exit(main())
