"""The engine: store, clock, supervisor, timer wheel, dispatcher and queues, wired together.

HTTP routes talk to the engine only. `Engine.serve` starts every actor under one nursery,
recovers (timers paged in, open attempts re-delivered with their original idempotency keys),
then reports ready.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import httpx
import outcome
import trio

from .actors.admission import Admission
from .actors.cache import TtlCache
from .actors.clock import Clock
from .actors.dispatcher import Dispatcher, Target
from .actors.messages import ActorMessage, Envelope, Redeliver, ReplySlot
from .actors.placement import Placement, check_local
from .actors.pushclient import PushClient
from .actors.queues import Queues, Reservation
from .actors.retention import Pruner
from .actors.runtime import Kind
from .actors.supervisor import Supervisor
from .actors.timer_wheel import TimerWheel
from .cluster.keeper import DEFAULT_TTL_MS, LeaseKeeper
from .cluster.ownership import Ownership
from .core.config import Settings
from .core.credentials import Vault
from .core.errors import (
    Conflict,
    Fenced,
    NotFound,
    StorageUnavailable,
    Unavailable,
    UniqueViolation,
)
from .core.leases import partition_of
from .core.swf import machine as swf_machine
from .core.swf import messages as swf_messages
from .core.swf.faults import Fault
from .core.workflow import machine
from .core.workflow.definition import Definition, parse_definition
from .core.workflow.machine import Context, Reply
from .core.workflow.model import Run, TaskRef
from .kinds.run.actor import RunKind
from .kinds.swf import catalog as swf_catalog
from .kinds.swf.actor import SwfKind, SwfState
from .kinds.swf.actor import actor_id as swf_actor_id
from .kinds.swf.actor import queue_of as swf_queue_of
from .observe.metrics import Metrics
from .observe.trends import Sampler, Trends
from .storage.base import (
    ApiKeyRecord,
    AppRecord,
    IdempotencyRecord,
    Store,
    UnitOfWork,
    WorkflowRecord,
    json_dumps,
)
from .storage.cluster import ClusterStore
from .storage.swf import SwfUnit, units_of

if TYPE_CHECKING:
    from .actors.pull import Pull
    from .http.forward import Forwarder

log = logging.getLogger("foliot.engine")

_DEFINITION_CACHE = 1024
_TARGET_TTL_MS = 30_000

T = TypeVar("T")


class Engine:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        clock: Clock | None = None,
        vault: Vault,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock or Clock()
        self.vault = vault
        self._swf_token_key: bytes | None = None
        self.metrics = Metrics()  # this engine's registry, never the process-wide default
        self.metrics.time_commits(store)
        self.ownership = Ownership(self)
        self.supervisor = Supervisor(self)
        self.runs = RunKind(self)
        # Every kind of actor, by name: the timer wheel's rows name their actor's kind.
        self.kinds: dict[str, Kind[Any]] = {self.runs.name: self.runs}
        self.swf = SwfKind(self, store, partial(swf_catalog.for_message, store))
        self.kinds[self.swf.name] = self.swf
        self.queues = Queues()
        self.timers = TimerWheel(
            store,
            self.clock,
            self._deliver_timer,
            window_ms=settings.timer_window_ms,
            max_inflight=settings.timer_max_inflight,
        )
        self.pruner = Pruner.from_settings(store, self.clock, settings)
        self._own_client = http_client is None
        # Pushes go through Foliot's own lean client (one connection per sender at most, so
        # nothing waits for a connection); tests may pass an httpx client with a mock transport.
        self.http: httpx.AsyncClient | PushClient = http_client or PushClient(
            max_idle_per_origin=settings.push_concurrency
        )
        self.dispatcher = Dispatcher(
            self.http,
            now=self.clock.now,
            target=self.target,
            answer=self._deliver_answer,
            sync_cap_ms=settings.sync_task_max_ms,
            max_body=settings.body_max_bytes,
            metrics=self.metrics,
            concurrency=settings.push_concurrency,
            per_app=settings.push_concurrency_per_app,
            current=self._live_document,
        )
        self.admission = Admission(settings, self.dispatcher, store)
        self.timers.observe_lag = self.metrics.timer_lag.observe
        self.timers.owned = self.ownership.accepts
        self.metrics.attach(self)
        self.trends = Trends(settings.trend_interval_ms, settings.trend_samples)
        self.sampler = Sampler(self, self.trends)
        self._definitions: OrderedDict[tuple[str, str, int], Definition] = OrderedDict()
        self._targets: dict[str, tuple[int, Target]] = {}
        # The request path's reads: fresh within a second, dropped at once when changed here.
        self._keys = TtlCache[str, ApiKeyRecord | None](self.clock.now)
        self._apps = TtlCache[str, AppRecord | None](self.clock.now)
        self._latest = TtlCache[tuple[str, str], WorkflowRecord | None](self.clock.now)
        self._watchers: dict[str, trio.Event] = {}
        self._nursery: trio.Nursery | None = None
        self._committing: set[trio.CancelScope] = set()
        self._stop_by: float | None = None  # Trio time by which shielded commits must end
        self.drained_commits = 0  # commits that finished after the shutdown began
        self.ready = False
        # Set by the HTTP layer to send a message to an actor owned by another node.
        self.remote_tell: Callable[[Kind[Any], str, Envelope], bool] | None = None
        self.recovered_tasks = 0
        self.started_at = self.clock.now()
        # Several nodes (issue 10): where each actor lives, and the client reaching the others.
        self.placement: Placement = self.ownership  # where each actor lives (tests may wrap it)
        self.forwarder: Forwarder | None = None
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
            if self._own_client:
                with trio.CancelScope(shield=True), trio.move_on_after(2):
                    await self.http.aclose()

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

    async def commit(self, unit: UnitOfWork) -> None:
        """Commit one unit of work, shielded: a shutdown (or a caller's cancellation) cannot
        cut a commit from the effects that follow it. Once the shutdown began it is bounded
        by the grace period; one cut short there is reported as storage unavailable (whether
        it landed is settled by recovery at the next start, as after a crash)."""
        if self.ownership.keeper is not None:
            unit = attrs.evolve(unit, fences=self.ownership.fences(unit.run.run_id))
        await self.shielded(partial(self.store.commit, unit))

    async def swf_commit(self, unit: SwfUnit) -> None:
        """Commit an SWF unit as `commit` does, fenced by its executions' leases."""
        if self.ownership.keeper is not None:
            ids = [swf_actor_id(u.region, u.execution.run_id) for u in units_of(unit)]
            unit = attrs.evolve(unit, fences=self.ownership.fences(*ids))
        await self.shielded(partial(self.store.swf_commit, unit))

    async def shielded(self, write: Callable[[], Awaitable[None]]) -> None:
        """Run one storage write as `commit` does: shielded, bounded by the shutdown grace."""
        with trio.CancelScope(shield=True) as scope:
            if self._stop_by is not None:
                scope.deadline = self._stop_by
            self._committing.add(scope)
            try:
                await write()
            finally:
                self._committing.discard(scope)
                if self._stop_by is not None and not scope.cancelled_caught:
                    self.drained_commits += 1
        if scope.cancelled_caught:
            raise StorageUnavailable("the server is shutting down; the commit was cut short")

    async def recover(self, partitions: frozenset[int] | None = None) -> None:
        """Re-deliver open attempts and what open SWF executions are owed; overdue timers fire
        when the wheel pages them in. `partitions`: only the actors of these (just gained; their
        timers are paged in again from the start of the table), else every actor."""
        only = None if partitions is None else _in_partitions(partitions, self.ownership.partitions)
        if partitions is not None:
            self.timers.rewind()
        recovered = 0
        for task in await self.store.open_tasks():
            if (only is not None and not only(task.run_id)) or not self.ownership.accepts(task.run_id):
                continue
            if task.queue is not None and task.deadline is None:
                self.queues.offer(task.app, task.queue, task.token, task.run_id)
            elif task.queue is None:
                self.tell(task.run_id, Redeliver(task.token))
            recovered += 1
        self.recovered_tasks += recovered
        open_swf = await self.swf.recover(only)
        log.info(
            "recovery done%s: %d open tasks re-delivered or re-offered, %d open SWF executions recovered",
            "" if partitions is None else f" for {len(partitions)} partitions",
            recovered,
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

    def context(self) -> Context:
        return Context(
            now=self.clock.now(),
            new_token=lambda: "tt_" + secrets.token_urlsafe(24),
            payload_max=self.settings.payload_max_bytes,
            signal_buffer_max=self.settings.signal_buffer_max,
            signal_buffer_max_bytes=self.settings.signal_buffer_max_bytes,
        )

    async def maybe_definition(self, app: str, name: str, version: int) -> Definition | None:
        key = (app, name, version)
        cached = self._definitions.get(key)
        if cached is not None:
            self._definitions.move_to_end(key)
            return cached
        record = await self.store.get_workflow(app, name, version)
        if record is None:
            return None
        definition = parse_definition(json.loads(record.document))
        self._definitions[key] = definition
        if len(self._definitions) > _DEFINITION_CACHE:
            self._definitions.popitem(last=False)
        return definition

    async def definition(self, app: str, name: str, version: int) -> Definition:
        found = await self.maybe_definition(app, name, version)
        if found is None:
            raise NotFound(f"workflow {name!r} version {version} not found")
        return found

    async def target(self, app: str) -> Target:
        now = self.clock.now()
        cached = self._targets.get(app)
        if cached is not None and now < cached[0]:
            return cached[1]
        record = await self.store.get_app(app)
        if record is None:
            raise NotFound(f"app {app!r} not found")
        live = [
            s
            for s in reversed(await self.store.list_signing_secrets(app))
            if s.expires_at is None or s.expires_at > now
        ]
        target = Target(record.handler_base_url, tuple(self.vault.decrypt(s.secret_enc) for s in live))
        # Cache no longer than the next secret expiry, so the outgoing one stops in time.
        valid_until = min([now + _TARGET_TTL_MS] + [s.expires_at for s in live if s.expires_at is not None])
        # Expired entries go as new ones come, so apps no longer used are not kept forever.
        for name in [name for name, (until, _) in self._targets.items() if until <= now]:
            del self._targets[name]
        self._targets[app] = (valid_until, target)
        return target

    async def api_key(self, key_id: str) -> ApiKeyRecord | None:
        """An API key's record, at most `TtlCache` old (a revocation here applies at once)."""
        return await self._keys.get(key_id, lambda: self.store.get_api_key(key_id))

    async def app_record(self, app: str) -> AppRecord | None:
        return await self._apps.get(app, lambda: self.store.get_app(app))

    async def latest_workflow(self, app: str, name: str) -> WorkflowRecord | None:
        return await self._latest.get((app, name), lambda: self.store.get_workflow(app, name, None))

    def forget_api_key(self, key_id: str) -> None:
        self._keys.invalidate(key_id)

    def forget_app(self, app: str) -> None:
        """The app's URL or secrets changed: re-read them before the next push or request."""
        self._targets.pop(app, None)
        self._apps.invalidate(app)

    def forget_workflow(self, app: str, name: str) -> None:
        """A version was registered: the next start without `version` picks it."""
        self._latest.invalidate((app, name))

    def dispatch(self, run: Run, task: TaskRef, path: str, timeout_ms: int) -> None:
        """Push the task to `path` (its deadline counts from the send), or offer it to its
        queue until a poller claims it."""
        if task.queue is not None:
            if task.claimed_by is None:
                self.queues.offer(run.app, task.queue, task.token, run.run_id)
            return
        self.dispatcher.push(run, task, path, timeout_ms)

    def busy(self, run_id: str) -> bool:
        """The run's actor is handling or holding messages: a new one waits behind them."""
        actor = self.supervisor.actors.get(run_id)
        return actor is not None and not actor.idle

    def _live_document(self, run_id: str) -> Run | None:
        actor = self.supervisor.actors.get(run_id)
        return actor.state if actor is not None else None

    def abort(self, token: str) -> None:
        self.dispatcher.abort(token)
        self.queues.withdraw(token)

    def notify(self, run: Run) -> None:
        event = self._watchers.pop(run.run_id, None)
        if event is not None:
            event.set()

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

    def swf_run_id(self, region: str) -> str:
        """A fresh SWF run id: 44 URL-safe characters, as long as AWS's; in a partition this
        node owns, so the execution starts here."""
        return self.ownership.new_id(lambda: secrets.token_urlsafe(33), partial(swf_actor_id, region))

    def swf_token_key(self) -> bytes:
        """The key SWF task tokens are signed with (stable across restarts: from the vault)."""
        if self._swf_token_key is None:
            self._swf_token_key = self.vault.derive_key("swf-task-token")
        return self._swf_token_key

    async def swf_start(
        self, region: str, request: swf_messages.StartRequest
    ) -> swf_messages.Transition | Fault:
        """Start an SWF execution: resolve its type, commit the first transition, adopt its
        actor. `UniqueViolation` when the workflow id is open in the domain."""
        t = request.workflow_type
        catalog = await swf_catalog.lookup(self.store, region, request.domain, {(t.name, t.version)}, set())
        run_id = self.swf_run_id(region)
        tr = swf_machine.start(request, catalog.workflow_type(t), run_id, self.clock.now())
        if isinstance(tr, Fault):
            return tr
        try:
            await self.swf_commit(SwfUnit(region, tr.execution, None, tr.events))
        except Fenced as exc:  # the partition moved to another node between the id and the commit
            raise StorageUnavailable("this node no longer owns the new execution's partition") from exc
        self.swf.adopt(region, tr)
        return tr

    async def swf_ask(
        self, region: str, run_id: str, message: Any
    ) -> tuple[swf_messages.Transition | Fault, SwfState | None]:
        """Send a message to an SWF execution's actor; its transition (or fault) once committed."""
        if not self.ready:
            raise Unavailable("the engine is starting; retry shortly")
        actor_id = swf_actor_id(region, run_id)
        check_local(self.placement, actor_id)  # owned elsewhere: the request is forwarded
        slot = ReplySlot()
        await self.supervisor.ask(self.swf, actor_id, Envelope(message, slot))
        reply: swf_messages.Transition | Fault = await slot.wait()
        return reply, slot.value

    async def swf_poll(
        self, region: str, domain: str, kind: str, task_list: str, identity: str | None, wait_until: float
    ) -> tuple[swf_messages.Transition, SwfState] | None:
        """Long-poll an SWF task list: the first pending task whose execution's actor starts
        it (`PollDecision`/`PollActivity` committed), or None once `wait_until` (Trio time)
        passed with no task. As for `claim_queued`, the queue entry is settled by the actor's
        answer (kept if the actor failed, dropped once started or no longer pending)."""
        if not self.ready:
            raise Unavailable("the engine is starting; retry shortly")
        app, queue = swf_queue_of(region, domain, kind, task_list)
        waited_from = trio.current_time()
        while True:
            async with self.queues.reserve(app, queue, 1, wait_until) as held:
                if not held.offers:
                    self.metrics.swf_poll_wait.labels(kind, "empty").observe(
                        trio.current_time() - waited_from
                    )
                    return None
                token, actor = held.offers[0]
                scheduled = int(token.rsplit(":", 1)[1])
                message = (
                    swf_messages.PollDecision(scheduled, identity)
                    if kind == "decision"
                    else swf_messages.PollActivity(scheduled, identity)
                )
                slot = ReplySlot(on_settle=partial(_settle_swf_claim, held, token))
                await self.supervisor.ask(self.swf, actor, Envelope(message, slot))
                held.hand_over(token)
                await slot.event.wait()
            if slot.error is not None:
                raise slot.error
            if isinstance(slot.reply, swf_messages.Transition):
                self.metrics.swf_poll_wait.labels(kind, "task").observe(trio.current_time() - waited_from)
                return slot.reply, slot.value
            # No longer pending (timed out, canceled, the execution closed): wait for the next.

    def tell(self, run_id: str, message: ActorMessage) -> None:
        self.tell_or_retry(self.runs, run_id, Envelope(message))

    def _deliver_timer(self, actor_kind: str, actor_id: str, slot: str, kind: str, key: str) -> bool:
        target = self.kinds[actor_kind]
        return self.supervisor.tell(target, actor_id, Envelope(target.firing(slot, kind, key)))

    def _deliver_answer(self, run_id: str, answer: machine.TaskAnswer) -> None:
        self.tell_or_retry(self.runs, run_id, Envelope(answer))

    # ------------------------------------------------------------------ API surface

    async def ask(
        self, run_id: str, message: ActorMessage, known: Run | None = None
    ) -> tuple[Reply, Run | None]:
        """Send a message to a run's actor and wait until it committed and answered.

        `known` is the run as the caller just read it; it spares a passivated run a second read.
        """
        if not self.ready:
            raise Unavailable("the engine is starting; retry shortly")
        check_local(self.placement, run_id)  # owned elsewhere: the request is forwarded
        slot = ReplySlot()
        await self.supervisor.ask(self.runs, run_id, Envelope(message, slot), known)
        reply = await slot.wait()
        return reply, slot.value

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

    async def claim_queued(
        self, app: str, queue: str, count: int, wait_until: float, worker_id: str | None
    ) -> list[tuple[Run, TaskRef]]:
        """Long-poll: claim up to `count` queued tasks, waiting until `wait_until` (Trio time).

        A token leaves the queue only when its claim is committed (or the run refuses it as
        closed); the run's actor settles it through the reply slot, so the poller's
        cancellation cannot lose it. A poller cancelled after its claims committed loses the
        answer: those tasks are claimed and time out at their deadline (at-least-once).
        """
        if not self.ready:
            raise Unavailable("the engine is starting; retry shortly")
        while True:
            async with self.queues.reserve(app, queue, count, wait_until) as held:
                if not held.offers:
                    return []
                slots: list[ReplySlot] = []
                for token, run_id in held.offers:
                    slot = ReplySlot(on_settle=partial(_settle_claim, held, token))
                    await self.supervisor.ask(
                        self.runs, run_id, Envelope(machine.Claim(token, worker_id), slot)
                    )
                    held.hand_over(token)  # from here on the actor's answer settles it
                    slots.append(slot)
                claimed: list[tuple[Run, TaskRef]] = []
                errors: list[BaseException] = []
                for slot in slots:
                    await slot.event.wait()
                    if slot.error is not None:
                        errors.append(slot.error)
                    elif isinstance(slot.reply, machine.Ok) and isinstance(slot.reply.value, TaskRef):
                        claimed.append((slot.value, slot.reply.value))
            if claimed:
                return claimed
            if errors:
                raise errors[0]
            # Every offer had closed meanwhile (a cancelled run): wait for the next ones.

    async def start_run(
        self,
        *,
        app: str,
        workflow: str,
        version: int | None,
        input: Any,
        business_key: str | None,
        run_timeout_ms: int | None,
        idempotency_key: str | None,
        request_hash: str,
        render: Any,
    ) -> tuple[dict[str, Any], bool]:
        """Create a run. Returns (response body, created); created is False for a replay."""
        if not self.ready:
            raise Unavailable("the engine is starting; retry shortly")
        if idempotency_key is not None:
            replay = await self._replay(app, idempotency_key, request_hash)
            if replay is not None:
                return replay, False
        if version is None:
            latest = await self.latest_workflow(app, workflow)
            version = latest.version if latest is not None else None
        definition = await self.maybe_definition(app, workflow, version) if version is not None else None
        if definition is None:
            which = f"version {version} of " if version is not None else ""
            raise NotFound(f"{which}workflow {workflow!r} not found")
        assert version is not None
        # No pre-check of the business key: the unique index on open runs decides, atomically.
        run_id = self.ownership.new_id(_new_run_id)
        tr = machine.start(
            run_id=run_id,
            app=app,
            definition=definition,
            version=version,
            input=input,
            business_key=business_key,
            run_timeout_ms=run_timeout_ms,
            trace_id=secrets.token_hex(16),
            ctx=self.context(),
        )
        body = render(tr.run)
        idem = None
        if idempotency_key is not None:
            idem = IdempotencyRecord(
                app, idempotency_key, request_hash, run_id, json_dumps(body), self.clock.now()
            )
        cutoff = self._idempotency_cutoff()
        unit = UnitOfWork(tr.run, None, tr.events, tr.tasks, idem, idempotency_expired_before=cutoff)

        if self._nursery is None or self.supervisor.closed:
            raise Unavailable("the server is shutting down")
        try:
            # In the caller's own task: the commit is shielded and its effects follow with no
            # checkpoint in between, so a client going away cannot part them (no task spawned).
            await self.commit(unit)
        except Fenced as exc:  # the partition moved to another node between the id and the commit
            raise Unavailable("this node no longer owns the new run's partition; retry") from exc
        except UniqueViolation as exc:
            # A retried request with the same key answers as the first one did, whichever
            # uniqueness its own insert ran into first (business key or idempotency key).
            if idempotency_key is not None:
                replay = await self._replay(app, idempotency_key, request_hash)
                if replay is not None:
                    return replay, False
            if exc.constraint == "business_key" and business_key is not None:
                await self._refuse_business_key(app, workflow, business_key)
            raise Conflict(str(exc)) from exc
        self.adopt(tr)
        return body, True

    def adopt(self, tr: machine.Transition) -> None:
        """A run just created and committed: its actor holds the document, its effects run."""
        self.supervisor.adopt(self.runs, tr.run.run_id, tr.run)
        self.runs.perform(None, tr)

    async def _replay(self, app: str, key: str, request_hash: str) -> dict[str, Any] | None:
        found = await self.store.get_idempotency(app, key)
        cutoff = self._idempotency_cutoff()
        if found is None or (cutoff is not None and found.created_at < cutoff):
            return None  # unknown, or expired (not pruned yet): the start is a new one
        if found.request_hash != request_hash:
            raise Conflict(
                "this Idempotency-Key was used with a different request body",
                code="idempotency_key_reused",
            )
        body: dict[str, Any] = json.loads(found.response)
        return body

    def idempotency_cutoff(self) -> int | None:
        return self._idempotency_cutoff()

    def _idempotency_cutoff(self) -> int | None:
        """Idempotency records created before this have expired (None: they never do)."""
        ttl = self.settings.idempotency_ttl_ms
        return None if ttl is None else self.clock.now() - ttl

    async def _refuse_business_key(self, app: str, workflow: str, business_key: str) -> None:
        existing = await self.store.find_open_run(app, workflow, business_key)
        if existing is not None:
            raise Conflict(
                f"businessKey {business_key!r} is used by open run {existing.run_id}",
                code="business_key_in_use",
                runId=existing.run_id,
            )

    async def run_document(self, run_id: str) -> Run | None:
        """The freshest view: the live actor's document, else storage."""
        actor = self.supervisor.actors.get(run_id)
        if actor is not None and actor.state is not None:
            state: Run = actor.state
            return state
        return await self.store.get_run(run_id)

    async def wait_for(self, run_id: str, predicate: Any, timeout_s: float = 10.0) -> Run:
        """Block until the run satisfies `predicate` (used by tests and long-polling tools)."""
        with trio.fail_after(timeout_s):
            while True:
                event = self._watchers.setdefault(run_id, trio.Event())
                try:
                    run = await self.run_document(run_id)
                    if run is not None and predicate(run):
                        return run
                    await event.wait()
                finally:
                    # The last waiter to leave removes the entry: nothing kept for runs no one watches.
                    if self._watchers.get(run_id) is event and event.statistics().tasks_waiting == 0:
                        del self._watchers[run_id]


_PASSIVATE_WAIT_S = 5.0  # how long a hand-over waits for the actors' messages to be handled


def _new_run_id() -> str:
    return "run_" + secrets.token_hex(12)


def _in_partitions(partitions: frozenset[int], total: int) -> Callable[[str], bool]:
    return lambda actor_id: partition_of(actor_id, total) in partitions


def _settle_swf_claim(held: Reservation, token: str, slot: ReplySlot) -> None:
    """An SWF task's start answered: drop the entry once started or gone, else put it back."""
    if slot.error is not None:
        held.settle(token, claimed=False)
    else:
        held.settle(token, claimed=isinstance(slot.reply, swf_messages.Transition), gone=True)


def _settle_claim(held: Reservation, token: str, slot: ReplySlot) -> None:
    """Called in the actor's task with the claim's answer: keep, drop or put back the token."""
    if slot.error is not None:
        held.settle(token, claimed=False)
    else:
        held.settle(token, claimed=isinstance(slot.reply, machine.Ok), gone=True)
