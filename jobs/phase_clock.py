"""Wall-clock seconds per step of a long job (publish phases, season-close steps)."""

from __future__ import annotations

import time


class PhaseClock:
    """Adds the seconds since the previous lap to ``sink[phase]`` (when a sink is
    given), so a phase entered twice reports its total."""

    def __init__(self, sink: dict[str, float] | None) -> None:
        self.sink = sink
        self.last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        if self.sink is not None:
            self.sink[phase] = self.sink.get(phase, 0.0) + now - self.last
        self.last = now
