"""Wall-clock time read through Trio's clock, so tests can drive it with MockClock.

`Clock.now()` is epoch milliseconds: the wall time at the anchor plus the Trio clock's progress
since. The anchor is taken on the first reading inside Trio, the wall time and the Trio time
sampled together: a wall time taken earlier (when the clock was built, before slow start-up work
such as building an HTTP client's TLS context) would make every later reading, and every `until`
timer, that much late. Tests pass `anchor_ms` to pin the wall time of that first reading; every
sleep is computed against `now()`, so a 14-day sleep under `MockClock(autojump_threshold=0)`
takes no real time.
"""

from __future__ import annotations

import time

import trio


class Clock:
    def __init__(self, anchor_ms: int | None = None) -> None:
        self._fixed_ms = anchor_ms
        self._anchor_ms = 0.0
        self._trio_anchor: float | None = None

    def now(self) -> int:
        current = trio.current_time()
        if self._trio_anchor is None:
            wall = time.time() * 1000 if self._fixed_ms is None else float(self._fixed_ms)
            self._anchor_ms, self._trio_anchor = wall, current
        return int(self._anchor_ms + (current - self._trio_anchor) * 1000)

    def trio_deadline(self, epoch_ms: int) -> float:
        """The Trio clock reading at which `epoch_ms` is reached."""
        return trio.current_time() + max(0, epoch_ms - self.now()) / 1000

    async def sleep_until(self, epoch_ms: int) -> None:
        await trio.sleep_until(self.trio_deadline(epoch_ms))
