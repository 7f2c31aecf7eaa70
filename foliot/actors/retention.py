"""Retention: nothing is kept forever.

One task, off the hot path, makes a pass at start-up and then every `prune_interval_ms` (on
the engine's clock, so tests drive it with MockClock). A pass deletes, in small transactions
until nothing is left to delete, idempotency records older than their TTL and runs closed
longer ago than the retention period with their events, tasks, timers and signal ids, and SWF
executions closed longer ago than their domain's `workflowExecutionRetentionPeriodInDays`
(always on: SWF has no "keep forever") with their history, tasks and listing rows, and
rate-limit buckets idle for `BUCKET_IDLE_MS` past their last slot (full again: deleting one
changes no send), and leading debounce keys whose burst is over and whose run closed (what the
key's next start would drop). A schedule's fire records and a run's debounce key go with the
run (`prune_closed_runs`), also after the schedule was deleted, and a sweep (a bounded page
of the table per pass, resumed where it stopped) deletes fire records whose run went without
them; expired console sessions are
deleted as sessions are created (`storage.sessions`). Open runs and open executions are never
touched; `tests/storage/test_retention_tables.py` fails when a table has no rule. The counters are exposed on
`/metrics`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

import trio

from ..core.config import Settings
from ..storage.base import Store
from ..storage.schedules import FIRES_START
from .clock import Clock

log = logging.getLogger("foliot.retention")

# Rows (runs, or idempotency records) per transaction: measured on SQLite with 1.4 M rows,
# 500 closed runs with 5 events each took 30-65 ms to delete.
BATCH: Final = 200
# A rate-limit bucket is deleted once its last slot ended this long ago (it is full again from
# its TAT on; the margin covers the clocks of a cluster's nodes disagreeing a little).
BUCKET_IDLE_MS: Final = 60_000
# The sweep of fire records whose run is gone: this many records read per transaction, and at
# most `SWEEP_PAGES` transactions a pass, going on from where the last pass stopped.
SWEEP_PAGE: Final = 500
SWEEP_PAGES: Final = 20


class Pruner:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        retention_ms: int | None,
        idempotency_ttl_ms: int | None,
        interval_ms: int,
        batch: int = BATCH,
    ) -> None:
        self.store = store
        self.clock = clock
        self.retention_ms = retention_ms
        self.idempotency_ttl_ms = idempotency_ttl_ms
        self.interval_ms = interval_ms
        self.batch = batch
        self.pruned_runs = 0
        self.pruned_idempotency = 0
        self.pruned_swf_executions = 0
        self.pruned_rate_buckets = 0
        self.pruned_debounce_keys = 0
        self.pruned_schedule_fires = 0
        self._fires_after = FIRES_START
        self.passes = 0
        self.failures = 0
        self.last_run_at: int | None = None  # epoch ms when the last complete pass finished
        # Several nodes: only one prunes (the holder of partition 0; see docs/decisions.md).
        self.active: Callable[[], bool] = lambda: True

    @classmethod
    def from_settings(cls, store: Store, clock: Clock, settings: Settings) -> Pruner:
        return cls(
            store,
            clock,
            retention_ms=settings.retention_ms,
            idempotency_ttl_ms=settings.idempotency_ttl_ms,
            interval_ms=settings.prune_interval_ms,
        )

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self.prune_once()
            await self.clock.sleep_until(self.clock.now() + self.interval_ms)

    async def prune_once(self) -> None:
        """One pass. A failure (storage down, a bug) is logged and counted; the next pass retries."""
        if not self.active():
            return
        now = self.clock.now()
        try:
            if self.idempotency_ttl_ms is not None:
                await self._drain(self.store.prune_idempotency, now - self.idempotency_ttl_ms, "idempotency")
            if self.retention_ms is not None:
                await self._drain(self.store.prune_closed_runs, now - self.retention_ms, "runs")
            await self._drain(self.store.swf_prune_closed, now, "swf")  # per domain, cutoff inside
            await self._drain(self.store.prune_rate_buckets, (now - BUCKET_IDLE_MS) * 1000, "buckets")
            await self._drain(self.store.prune_debounce_keys, now, "debounce")
            await self._sweep_fires()
        except Exception:
            self.failures += 1
            log.exception("pruning failed; retrying in %d s", self.interval_ms // 1000)
            return
        self.passes += 1
        self.last_run_at = self.clock.now()

    async def _sweep_fires(self) -> None:
        """Fire records go with their runs (`prune_closed_runs`); this sweep, a bounded slice of
        the table per pass, deletes those whose run went without them (pruned before that)."""
        total = 0
        for _ in range(SWEEP_PAGES):
            started = trio.current_time()
            deleted, after = await self.store.prune_orphan_fires(self._fires_after, SWEEP_PAGE)
            self.pruned_schedule_fires += deleted
            total += deleted
            self._fires_after = FIRES_START if after is None else after
            if after is None:
                break
            await trio.sleep(trio.current_time() - started)
        if total:
            log.info("pruned %d schedule fire records whose run was gone", total)

    async def _drain(self, prune: Callable[[int, int], Awaitable[int]], before: int, what: str) -> None:
        total = 0
        while True:
            started = trio.current_time()
            deleted = await prune(before, self.batch)
            if what == "runs":
                self.pruned_runs += deleted
            elif what == "swf":
                self.pruned_swf_executions += deleted
            elif what == "buckets":
                self.pruned_rate_buckets += deleted
            elif what == "debounce":
                self.pruned_debounce_keys += deleted
            else:
                self.pruned_idempotency += deleted
            total += deleted
            if deleted == 0:
                break
            # Rest as long as the batch took: a backlog takes at most half of the store's time.
            await trio.sleep(trio.current_time() - started)
        if total:
            noun = {
                "runs": "closed runs",
                "swf": "closed SWF executions",
                "buckets": "idle rate-limit buckets",
                "debounce": "debounce keys of bursts over",
            }.get(what, "idempotency records")
            log.info("pruned %d %s", total, noun)
