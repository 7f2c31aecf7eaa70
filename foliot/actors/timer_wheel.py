"""One actor for every durable timer: sleeps, wait timeouts, task deadlines, backoffs, run timeouts.

Timers are rows in storage (derived from each run's document on every commit). The wheel keeps
only those due within `window_ms` in a heap and pages later ones in as time advances, so a
million parked runs cost a million rows, not a million heap entries. Entries are never
deleted from the heap: a superseded one is recognised as stale when it surfaces (its key no
longer matches the run's current timer) and skipped, as trio's own deadline heap does.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable
from typing import Any

import trio

from ..clock import Clock
from ..storage.base import Store
from ..workflow.machine import TimerFired
from ..workflow.model import Run

log = logging.getLogger("foliot.timers")

TimerId = tuple[str, str]  # (run_id, slot)
_PAGE = 5_000


class TimerWheel:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        deliver: Callable[[str, TimerFired], bool],
        *,
        window_ms: int = 60_000,
    ) -> None:
        self._store = store
        self._clock = clock
        self._deliver = deliver
        self._window_ms = window_ms
        self._heap: list[tuple[int, int, str, str, str, str]] = []
        self._current: dict[TimerId, tuple[str, str, int]] = {}
        self._horizon = 0  # every stored timer due before this is in the heap
        self._seq = 0
        self._wake = trio.Event()
        self.fired = 0
        self.last_lag_ms = 0
        self.max_lag_ms = 0

    # ------------------------------------------------------------------ feeding

    def sync(self, run: Run) -> None:
        """After a commit: make the wheel's view of this run's timers match its document."""
        wanted = dict(run.timers())
        for slot in ("step", "run"):
            tid = (run.run_id, slot)
            timer = wanted.get(slot)
            if timer is None:
                self._current.pop(tid, None)
                continue
            self._add(run.run_id, slot, timer.kind, timer.key, timer.due)

    def _add(self, run_id: str, slot: str, kind: str, key: str, due: int) -> None:
        tid = (run_id, slot)
        if due >= self._horizon:
            # Beyond the window: storage holds it and a later page-in brings it back.
            self._current.pop(tid, None)
            return
        if self._current.get(tid) == (kind, key, due):
            return
        self._current[tid] = (kind, key, due)
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, run_id, slot, kind, key))
        if self._heap[0][1] == self._seq:
            self._wake.set()

    def retry_later(self, run_id: str, msg: TimerFired, delay_ms: int = 1_000) -> None:
        """A firing could not be applied (mailbox full, storage down): fire it again soon."""
        self._add(run_id, msg.slot, msg.kind, msg.key, self._clock.now() + delay_ms)

    # ------------------------------------------------------------------ introspection

    def stats(self) -> dict[str, Any]:
        nxt = self._next_live()
        return {
            "inMemory": len(self._current),
            "heapEntries": len(self._heap),
            "nextDue": nxt,
            "fired": self.fired,
            "lagMs": self.last_lag_ms,
            "maxLagMs": self.max_lag_ms,
            "horizon": self._horizon,
        }

    def pending_for(self, run_id: str) -> list[dict[str, Any]]:
        out = []
        for slot in ("step", "run"):
            cur = self._current.get((run_id, slot))
            if cur is not None:
                out.append({"slot": slot, "kind": cur[0], "key": cur[1], "due": cur[2]})
        return out

    def _next_live(self) -> int | None:
        while self._heap:
            due, _, run_id, slot, kind, key = self._heap[0]
            if self._current.get((run_id, slot)) == (kind, key, due):
                return due
            heapq.heappop(self._heap)
        return None

    # ------------------------------------------------------------------ the actor

    async def page_in(self) -> None:
        """Load every stored timer due before now + window (overdue ones included)."""
        horizon = self._clock.now() + self._window_ms
        self._horizon = horizon
        after: tuple[int, str, str] | None = None
        while True:
            rows = await self._store.timers_due_before(horizon, _PAGE, after)
            for r in rows:
                self._add(r.run_id, r.slot, r.kind, r.key, r.due_at)
            if len(rows) < _PAGE:
                return
            last = rows[-1]
            after = (last.due_at, last.run_id, last.slot)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.page_in()
        task_status.started()
        while True:
            now = self._clock.now()
            if now >= self._horizon - self._window_ms // 2:
                try:
                    await self.page_in()
                except Exception:
                    log.exception("timer page-in failed; retrying")
                    await trio.sleep(1)
                    continue
            self._fire_due(self._clock.now())
            nxt = self._next_live()
            refresh_at = self._horizon - self._window_ms // 2
            wake_at = refresh_at if nxt is None else min(nxt, refresh_at)
            self._wake = trio.Event()
            with trio.move_on_at(self._clock.trio_deadline(wake_at)):
                await self._wake.wait()

    def _fire_due(self, now: int) -> None:
        while True:
            due = self._next_live()
            if due is None or due > now:
                return
            _, _, run_id, slot, kind, key = heapq.heappop(self._heap)
            del self._current[(run_id, slot)]
            msg = TimerFired(slot, kind, key)
            lag = now - due
            self.last_lag_ms = lag
            self.max_lag_ms = max(self.max_lag_ms, lag)
            if self._deliver(run_id, msg):
                self.fired += 1
            else:
                self.retry_later(run_id, msg, 100)
