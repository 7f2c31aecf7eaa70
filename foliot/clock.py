"""Wall-clock time read through Trio's clock, so tests can drive it with MockClock.

`Clock.now()` is epoch milliseconds: the wall time at the anchor plus the Trio clock's
progress since. Production anchors at start-up; every sleep is computed against `now()`, so
a 14-day sleep under `MockClock(autojump_threshold=0)` takes no real time.
"""

from __future__ import annotations

import time

import trio


class Clock:
    def __init__(self, anchor_ms: int | None = None) -> None:
        self._anchor_ms = int(time.time() * 1000) if anchor_ms is None else anchor_ms
        self._trio_anchor: float | None = None

    def now(self) -> int:
        if self._trio_anchor is None:
            self._trio_anchor = trio.current_time()
        return self._anchor_ms + int((trio.current_time() - self._trio_anchor) * 1000)

    def trio_deadline(self, epoch_ms: int) -> float:
        """The Trio clock reading at which `epoch_ms` is reached."""
        return trio.current_time() + max(0, epoch_ms - self.now()) / 1000

    async def sleep_until(self, epoch_ms: int) -> None:
        await trio.sleep_until(self.trio_deadline(epoch_ms))
