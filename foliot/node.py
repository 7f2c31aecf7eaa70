"""The node: one process's runtime with its kinds, wired together (the composition root's
building block; `foliot.server` builds one and serves it).

`Node` implements the runtime's `Host` and the kinds' `KindHost`: it holds the store, the
clock, the supervisor, the timer wheel, the dispatcher, the queues and admission, and runs
them under one nursery (`serve`). The kinds (`runs`, `swf`) carry their own entry points;
faces call those, never the node's internals.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import outcome
import trio

from .actors.admission import Admission
from .actors.clock import Clock
from .actors.directory import Directory
from .actors.dispatcher import Dispatcher
from .actors.messages import Envelope, Redeliver
from .actors.placement import Placement
from .actors.pushclient import Poster, PushClient
from .actors.queues import Queues
from .actors.ratelimit import RateLimiter
from .actors.retention import Pruner
from .actors.runtime import Kind
from .actors.supervisor import Supervisor
from .actors.timer_wheel import TimerWheel
from .cluster.keeper import DEFAULT_TTL_MS, LeaseKeeper
from .cluster.ownership import Ownership
from .core.config import Settings
from .core.credentials import Vault
from .core.errors import StorageUnavailable, Unavailable
from .core.leases import partition_of
from .core.tracing import Tracer
from .kinds.run.service import Runs
from .kinds.schedule.service import Schedules
from .kinds.swf.service import Swf
from .observe.metrics import Metrics
from .observe.tracing import make_tracer
from .observe.trends import Sampler, Trends
from .storage.base import Store
from .storage.cluster import ClusterStore
from .storage.factory import sqlite_path
from .storage.fence import Fence
from .storage.health import DiskSpace, WriteHealth, refuses_writes, statvfs_free

if TYPE_CHECKING:
    from .actors.pull import Pull

log = logging.getLogger("foliot.engine")

T = TypeVar("T")


class Node:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        clock: Clock | None = None,
        vault: Vault,
        http_client: httpx.AsyncClient | Poster | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        self.settings = settings
        # Spans (FOLIOT_TRACING, observe/tracing.py): a no-op unless on; tests may pass their own.
        self._own_tracer = tracer is None
        self.tracer = tracer if tracer is not None else make_tracer(settings)
        self.store = store
        self.clock = clock or Clock()
        self.vault = vault
        # This engine's registry, never the process-wide default.
        self.metrics = Metrics(settings.metrics_max_label_values)
        self.metrics.time_commits(store)
        self.ownership = Ownership(self)
        self.supervisor = Supervisor(self)
        self.directory = Directory(store, self.clock, vault)
        self.queues = Queues()
        self.timers = TimerWheel(
            store,
            self.clock,
            self._deliver_timer,
            window_ms=settings.timer_window_ms,
            max_inflight=settings.timer_max_inflight,
        )
        self.pruner = Pruner.from_settings(store, self.clock, settings)
        # Pushes go through Foliot's own lean client (one connection per sender at most, so
        # nothing waits for a connection); tests may pass an httpx client with a mock transport,
        # or any `Poster` (the simulation's network, tests/sim).
        self._own_client: PushClient | None = None
        self.http: httpx.AsyncClient | Poster
        if http_client is None:
            self.http = self._own_client = PushClient(max_idle_per_origin=settings.push_concurrency)
        else:
            self.http = http_client
        self.dispatcher = Dispatcher(
            self.http,
            now=self.clock.now,
            target=self.directory.target,
            answer=self._deliver_answer,
            sync_cap_ms=settings.sync_task_max_ms,
            max_body=settings.body_max_bytes,
            metrics=self.metrics,
            concurrency=settings.push_concurrency,
            per_app=settings.push_concurrency_per_app,
            current=self._live_document,
            limiter=RateLimiter(store, self.clock.now),
            rate_delay=self.metrics.rate_delayed,
            tracer=self.tracer,
            may_send=self.ownership.accepts,
        )
        self.admission = Admission(settings, self.dispatcher, store)
        self.runs = Runs(self, self.tracer)
        self.swf = Swf(self, self.metrics)
        self.schedules = Schedules(self, self.runs, self.metrics)
        # Every kind of actor, by name: the timer wheel's rows name their actor's kind.
        self.kinds: dict[str, Kind[Any]] = {
            k.name: k for k in (self.runs.kind, self.swf.kind, self.schedules.kind)
        }
        self.timers.observe_lag = self.metrics.timer_lag.observe
        self.timers.owned = self.ownership.accepts
        self.metrics.attach(self)
        self.trends = Trends(settings.trend_interval_ms, settings.trend_samples)
        self.sampler = Sampler(self, self.trends)
        self._nursery: trio.Nursery | None = None
        self._committing: set[trio.CancelScope] = set()
        self._stop_by: float | None = None  # Trio time by which shielded commits must end
        self.drained_commits = 0  # commits that finished after the shutdown began
        self.write_health = WriteHealth(space=_disk_space(settings))  # what the last commit found (`/readyz`)
        self.ready = False
        # Set by the HTTP layer to send a message to an actor owned by another node.
        self.remote_tell: Callable[[Kind[Any], str, Envelope], bool] | None = None
        self.recovered_tasks = 0
        self.started_at = self.clock.now()
        # Several nodes (issue 10): where each actor lives, and the client reaching the others.
        self.placement: Placement = self.ownership  # where each actor lives (tests may wrap it)
        # The HTTP face's `Forwarder` (set by `foliot.server` in cluster mode; typed there).
        self.forwarder: Any = None
        self.pull: Pull | None = None

    # ------------------------------------------------------------------ lifecycle

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.supervisor.serve)
                await nursery.start(self.dispatcher.serve)
                await nursery.start(self.timers.serve)
                keeper = self.ownership.keeper
                if keeper is None:
                    await self.recover()
                else:
                    # Its first exchange acquires what is free and recovers it (`gained`).
                    await nursery.start(keeper.run)
                    await self.ownership.recovered()
                await nursery.start(self.pruner.serve)
                await nursery.start(self.sampler.serve)
                await nursery.start(self.admission.watch_lag)
                await nursery.start(self.runs.pump)
                self.ready = True
                task_status.started()
                try:
                    await trio.sleep_forever()
                finally:
                    # Cancelled: commits under way finish (shielded), within the shutdown grace.
                    self.ready = False
                    self.begin_shutdown(trio.current_time() + self.settings.shutdown_grace_ms / 1000)
        finally:
            self.ready = False
            await self._leave_cluster()
            if self._own_client is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(2):
                    await self._own_client.aclose()
            if self._own_tracer and self.tracer.on:  # flush the spans still batched
                with trio.CancelScope(shield=True), trio.move_on_after(2):
                    await trio.to_thread.run_sync(self.tracer.close, abandon_on_cancel=True)

    def join_cluster(
        self, store: ClusterStore, node_id: str, address: str, *, ttl_ms: int = DEFAULT_TTL_MS
    ) -> LeaseKeeper:
        """Own only the partitions whose leases this node holds (several nodes on one
        PostgreSQL): `serve` runs the lease keeper, with this engine as its `Ownership`."""
        keeper = LeaseKeeper(
            store,
            node_id,
            address,
            self.ownership,
            ttl_ms=ttl_ms,
            live_actors=lambda: len(self.supervisor.actors),
            partitions=self.ownership.partitions,
        )
        self.ownership.keeper = keeper
        self.ownership.node_id = node_id
        self.timers.owned = self.ownership.accepts
        self.pruner.active = partial(self.ownership.owns_partition, 0)
        return keeper

    async def _leave_cluster(self) -> None:
        """A clean stop: give every lease back at once (commits under way have ended), so the
        other nodes take the partitions over without waiting for the leases to expire."""
        keeper = self.ownership.keeper
        if keeper is None or not self.ownership.held:
            return
        self.ownership.lost(frozenset(self.ownership.held))
        with trio.CancelScope(shield=True), trio.move_on_after(2):
            try:
                await keeper.store.cluster_leave(keeper.node_id)
            except Exception as exc:  # the leases then expire on their own
                log.warning("cluster: leaving failed (%s); the leases will expire", exc)

    @property
    def serving(self) -> bool:
        """Ready for traffic (`/readyz`): started, holding its leases (or none to hold, as the
        keeper says), and done recovering the partitions gained."""
        return self.ready and self.ownership.ready

    def begin_shutdown(self, stop_by: float) -> None:
        """Bound the commits under way (and any that start now) by `stop_by` (Trio time)."""
        self._stop_by = stop_by if self._stop_by is None else min(self._stop_by, stop_by)
        for scope in self._committing:
            scope.deadline = min(scope.deadline, self._stop_by)

    @property
    def commits_in_flight(self) -> int:
        return len(self._committing)

    async def shielded(self, write: Callable[[], Awaitable[T]]) -> T:
        """Run one storage write as `commit` does: shielded, bounded by the shutdown grace."""
        with trio.CancelScope(shield=True) as scope:
            if self._stop_by is not None:
                scope.deadline = self._stop_by
            self._committing.add(scope)
            try:
                result = await write()
                self.write_health.succeeded()
            except BaseException as exc:
                if refuses_writes(exc):
                    self.write_health.failed(exc, self.clock.now())
                raise
            finally:
                self._committing.discard(scope)
                if self._stop_by is not None and not scope.cancelled_caught:
                    self.drained_commits += 1
        if scope.cancelled_caught:
            raise StorageUnavailable("the server is shutting down; the commit was cut short")
        return result

    # ------------------------------------------------------------------ Host and KindHost

    def accepts(self, actor_id: str) -> bool:
        return self.ownership.accepts(actor_id)

    def fences(self, *actor_ids: str) -> tuple[Fence, ...] | None:
        if self.ownership.keeper is None:
            return None
        return self.ownership.fences(*actor_ids)

    def new_id(self, make: Callable[[], str], key: Callable[[str], str] | None = None) -> str:
        return self.ownership.new_id(make, key or (lambda i: i))

    def _deliver_answer(self, run_id: str, answer: Any) -> None:
        self.runs.answer(run_id, answer)

    def _live_document(self, run_id: str) -> Any:
        return self.runs.live(run_id)

    async def recover(self, partitions: frozenset[int] | None = None) -> None:
        """Re-deliver open attempts and what open SWF executions are owed; overdue timers fire
        when the wheel pages them in. `partitions`: only the actors of these (just gained; their
        timers are paged in again from the start of the table), else every actor."""
        only = None if partitions is None else _in_partitions(partitions, self.ownership.partitions)
        if partitions is not None:
            self.timers.rewind()
        recovered = 0
        after: tuple[int, str] | None = None
        while True:  # in pages, oldest first: memory is one page's at any number of open tasks
            page = await self.store.open_tasks(after, _RECOVERY_PAGE)
            for task in page:
                if (only is not None and not only(task.run_id)) or not self.ownership.accepts(task.run_id):
                    continue
                if task.queue is not None and task.deadline is None:
                    # Offered again as it was: its priority, and a token of its rate-limit buckets
                    # taken first (the stored bucket holds back a burst after the restart).
                    self.runs.reoffer(task)
                elif task.queue is None:
                    self.runs.tell(task.run_id, Redeliver(task.token))
                recovered += 1
            if len(page) < _RECOVERY_PAGE:
                break
            after = (page[-1].created_at, page[-1].token)
        self.recovered_tasks += recovered

        def ours(actor_id: str) -> bool:
            return (only is None or only(actor_id)) and self.ownership.accepts(actor_id)

        told, cancelled = await self.runs.reconcile(ours)
        open_swf = await self.swf.kind.recover(only)
        log.info(
            "recovery done%s: %d open tasks re-delivered or re-offered, %d parents told of closed"
            " children, %d children cancelled, %d open SWF executions recovered",
            "" if partitions is None else f" for {len(partitions)} partitions",
            recovered,
            told,
            cancelled,
            open_swf,
        )

    async def passivate(self, partitions: frozenset[int]) -> None:
        """Before these partitions are released: no new message is taken for their actors
        (`Ownership.accepts` already says no), the messages they hold are handled (bounded by
        `_PASSIVATE_WAIT_S`), then they leave memory. A push not yet answered stays open in
        storage and the next owner sends it again with the same idempotency key."""
        only = _in_partitions(partitions, self.ownership.partitions)
        busy = [a for a in self.supervisor.actors.values() if only(a.id) and not a.idle]
        with trio.move_on_after(_PASSIVATE_WAIT_S):
            await self.supervisor.wait_idle(busy)
        self.drop(partitions)

    def drop(self, partitions: frozenset[int]) -> None:
        """Forget everything of these partitions' actors at once, writing nothing: the actors
        (callers of messages not handled get 503), their queued or running pushes, their offers
        to pull queues and their timers. Storage holds all of it for the next owner."""
        only = _in_partitions(partitions, self.ownership.partitions)
        gone = self.supervisor.drop(only)
        self.dispatcher.abort_where(only)
        self.queues.withdraw_where(only)
        self.timers.forget(only)
        if gone:
            log.info("ownership: %d actors of %d partitions left this node", gone, len(partitions))

    # ------------------------------------------------------------------ helpers for actors

    def later(self, delay_s: float, kind: Kind[Any], actor_id: str, envelope: Envelope) -> None:
        """Deliver an envelope again after a delay (storage was down when it arrived)."""
        if self._nursery is None or self.supervisor.closed:
            return

        async def again() -> None:
            await trio.sleep(delay_s)
            self.tell_or_retry(kind, actor_id, envelope)

        self._nursery.start_soon(again)

    def elsewhere(self, kind: Kind[Any], actor_id: str, envelope: Envelope) -> bool:
        """A message with no caller for an actor this node does not own (several nodes): handed
        to `remote_tell` (the HTTP layer's forwarding) when set, else dropped — the owner
        re-creates what storage holds (open attempts, timers, owed SWF effects) when it gains
        the partition. True: taken (or dropped); False: retry later."""
        if self.remote_tell is not None:
            return self.remote_tell(kind, actor_id, envelope)
        log.info("%s %s is not owned here; %s dropped", kind.name, actor_id, type(envelope.message).__name__)
        return True

    def tell_or_retry(self, kind: Kind[Any], actor_id: str, envelope: Envelope) -> None:
        """Deliver without waiting; a full mailbox is tried again 100 ms later."""
        if not self.supervisor.tell(kind, actor_id, envelope):
            self.later(0.1, kind, actor_id, envelope)

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> bool:
        """Run `fn` in the engine's nursery (effects that must look something up first);
        False when shutting down (not run)."""
        if self._nursery is not None and not self.supervisor.closed:
            self._nursery.start_soon(fn)
            return True
        return False

    def _deliver_timer(self, actor_kind: str, actor_id: str, slot: str, kind: str, key: str) -> bool:
        target = self.kinds[actor_kind]
        return self.supervisor.tell(target, actor_id, Envelope(target.firing(slot, kind, key)))

    # ------------------------------------------------------------------ API surface

    async def outlive_caller(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run `fn` in the engine's nursery and wait for its outcome.

        For a commit and its effects done on behalf of an HTTP request: if the client goes
        away (the request's task is cancelled), `fn` still finishes, so a committed change is
        never left without its effects. Only the engine's shutdown cancels it; what a commit
        would have done is then re-created from storage at the next start."""
        if self._nursery is None or self.supervisor.closed:
            raise Unavailable("the server is shutting down")
        done = trio.Event()
        result: list[outcome.Outcome[T]] = []

        async def detached() -> None:
            result.append(await outcome.acapture(fn))
            done.set()

        self._nursery.start_soon(detached)
        await done.wait()
        return result[0].unwrap()


_PASSIVATE_WAIT_S = 5.0  # how long a hand-over waits for the actors' messages to be handled
_RECOVERY_PAGE = 500  # open tasks recovery reads at once


def _in_partitions(partitions: frozenset[int], total: int) -> Callable[[str], bool]:
    return lambda actor_id: partition_of(actor_id, total) in partitions


def _disk_space(settings: Settings) -> DiskSpace | None:
    """The file system a SQLite store writes to, watched for `FOLIOT_MIN_FREE_BYTES` (`/readyz`);
    None for PostgreSQL (its disk is the database server's) and an in-memory SQLite."""
    url = settings.database_url
    if not url.startswith("sqlite:"):
        return None
    path = sqlite_path(url)
    if path == ":memory:":
        return None
    where = os.path.dirname(os.path.abspath(path))
    return DiskSpace(where, settings.min_free_bytes, statvfs_free(where))
