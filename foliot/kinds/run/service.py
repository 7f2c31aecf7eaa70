"""The run kind's entry points: start a run, ask its actor, claim queued tasks, read it.

Routes and the pull face call these; the run's actor (`actor.RunKind`) does the rest. Every
entry point refuses with 503 until the node has recovered (`KindHost.ready`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Coroutine
from functools import partial, wraps
from typing import Any, Concatenate, ParamSpec

import attrs
import trio

from ...actors.dispatcher import Call
from ...actors.messages import ActorMessage, Envelope, ReplySlot
from ...actors.placement import check_local
from ...actors.queues import Reservation
from ...core.errors import (
    Conflict,
    Fenced,
    NotFound,
    OverQuota,
    StorageError,
    Unavailable,
    UniqueViolation,
)
from ...core.tracing import NO_TRACER, Tracer
from ...core.workflow import machine
from ...core.workflow.definition import Definition, slot_workflow
from ...core.workflow.flow import DEFAULT_PRIORITY, Bucket
from ...core.workflow.machine import Context, Reply
from ...core.workflow.model import ParentRef, Run, ScheduleRef, TaskRef, TaskRow, replace_run
from ...storage.base import (
    DEBOUNCE_TAKEN,
    SLOT_TAKEN,
    DebounceChange,
    IdempotencyRecord,
    UnitOfWork,
    json_dumps,
)
from ...storage.schedules import ScheduleFire
from ..host import KindHost
from . import children, debounce
from .actor import RunKind, first_slot, slot_of
from .debounce import DebouncedStart
from .ids import new_run_id, new_task_token

# Concurrency keys are woken on change (`WakeQueued`, when a slot is freed); the pump's sweep
# only repairs a lost wake-up: every `_SWEEP_S`, one page of at most `_SWEEP_KEYS` waiting keys.
_PUMP_START_S = 2.0  # after a start, every waiting key is looked at once, this soon
_SWEEP_S = 30.0  # a page of waiting keys is looked at this often; younger heads are left alone
_SWEEP_KEYS = 200  # keys per page: the sweep's work per period, however many keys wait
_WAKE_RETRIES_S = (1.0, 4.0)  # a wake-up whose read failed tries again after these


P = ParamSpec("P")
_Started = tuple[dict[str, Any], bool]


def _run_start_span(
    start: Callable[Concatenate[Runs, P], Coroutine[Any, Any, _Started]],
) -> Callable[Concatenate[Runs, P], Coroutine[Any, Any, _Started]]:
    """`Runs.start` as the span `run.start` of the run it creates (none for a replay)."""

    @wraps(start)
    async def traced(self: Runs, /, *args: P.args, **kwargs: P.kwargs) -> _Started:
        with self.tracer.span("run.start") as span:
            body, created = await start(self, *args, **kwargs)
            # The new run's actor holds it: adopted with no checkpoint since the commit.
            run = self.live(body["runId"]) if created and self.tracer.on else None
            if run is not None:
                span.of(run)
            return body, created

    return traced


class Runs:
    """Foliot runs on one node: the kind the runtime drives, and what callers ask of it."""

    def __init__(self, host: KindHost, tracer: Tracer = NO_TRACER) -> None:
        self.host = host
        self.tracer = tracer  # spans: run.start, run.signal, run.transition, store.commit
        self.kind = RunKind(self)
        self._watchers: dict[str, trio.Event] = {}
        # Set when runs may wait for a concurrency slot (one queued, or a wake-up sent); the
        # pump sleeps on it otherwise, so a node without concurrency keys never polls for them.
        self._queueing = trio.Event()
        self._queueing.set()  # at start: runs queued before a restart are looked for once
        # The pump's sweep: each queue head it saw, and when (Trio's clock) it first saw it at
        # the head; the heads seen in the cycle under way (`_sweep`).
        self._heads_seen: dict[str, float] = {}
        self._heads_this_cycle: set[str] = set()
        # Where new run ids and task tokens come from (random); a simulation draws them from its
        # seed instead, so a run of it is reproduced exactly (tests/sim).
        self.new_run_id: Callable[[], str] = new_run_id
        self.new_token: Callable[[], str] = new_task_token

    # ------------------------------------------------------------------ for the run's actor

    def context(self) -> Context:
        settings = self.host.settings
        return Context(
            now=self.host.clock.now(),
            new_token=self.new_token,
            payload_max=settings.payload_max_bytes,
            signal_buffer_max=settings.signal_buffer_max,
            signal_buffer_max_bytes=settings.signal_buffer_max_bytes,
            new_run_id=self._new_child_id,
            grant_children=self._grant_children,
        )

    def _grant_children(self, app: str, n: int) -> tuple[int, int]:
        granted, wait_s = self.host.admission.child_lanes.take_up_to(app, n, trio.current_time())
        return granted, int(wait_s * 1000) + 1

    def _new_child_id(self) -> str:
        return self.host.new_id(self.new_run_id)

    async def commit(self, unit: UnitOfWork) -> bool:
        """Commit one unit of work, fenced by the run's lease and shielded (`KindHost.shielded`):
        a shutdown or a caller's cancellation cannot cut a commit from the effects after it.
        False: the unit's `otherwise` was written instead (its admission refused)."""
        fences = self.host.fences(unit.run.run_id, *(child.run.run_id for child in unit.children))
        if fences is not None:
            unit = attrs.evolve(unit, fences=fences)
        with self.tracer.span("store.commit", unit.run) as span:
            span.set("foliot.event_count", len(unit.events))
            return await self.host.shielded(partial(self.host.store.commit, unit))

    def idempotency_cutoff(self) -> int | None:
        """Idempotency records created before this have expired (None: they never do)."""
        ttl = self.host.settings.idempotency_ttl_ms
        return None if ttl is None else self.host.clock.now() - ttl

    def dispatch(
        self,
        run: Run,
        task: TaskRef,
        path: str,
        timeout_ms: int,
        priority: int = DEFAULT_PRIORITY,
        buckets: tuple[Bucket, ...] = (),
    ) -> None:
        """Push the task to `path` (its deadline counts from the send), or offer it to its
        queue until a poller claims it; by `priority`, once a token of each rate-limit bucket
        is taken (a gated offer waits in the dispatcher, see `Dispatcher.call`).

        Nothing goes out for a run whose partition is not this node's (any more): a message
        handled while the partition left (a `Redeliver` from a recovery, a commit under way)
        must not push or offer from here; the owner's recovery does."""
        if not self.host.accepts(run.run_id):
            return
        if task.queue is not None:
            if task.claimed_by is None:
                self._offer(run.app, task.queue, task.token, run.run_id, priority, buckets)
            return
        self.host.dispatcher.push(run, task, path, timeout_ms, priority, buckets)

    def reoffer(self, task: TaskRow) -> None:
        """An unclaimed queued task found open at recovery: offered with the priority and the
        rate-limit buckets its attempt was opened with (`TaskRow`, migration 0078)."""
        assert task.queue is not None
        self._offer(task.app, task.queue, task.token, task.run_id, task.priority, task.buckets)

    def _offer(
        self, app: str, queue: str, token: str, run_id: str, priority: int, buckets: tuple[Bucket, ...]
    ) -> None:
        if not buckets:
            self.host.queues.offer(app, queue, token, run_id, priority)
            return
        offer = partial(self._offer_if_open, app, queue, token, run_id, priority)
        self.host.dispatcher.call(Call(app, token, offer, run_id, priority=priority, buckets=buckets))

    async def _offer_if_open(self, app: str, queue: str, token: str, run_id: str, priority: int) -> None:
        """A rate-limited offer whose slot came: offered unless its attempt closed meanwhile."""
        live = self.live(run_id)
        if live is not None and (live.task is None or live.task.token != token or live.task.claimed_by):
            return
        self.host.queues.offer(app, queue, token, run_id, priority)

    def abort(self, token: str) -> None:
        self.host.dispatcher.abort(token)
        self.host.queues.withdraw(token)

    def notify(self, run: Run) -> None:
        event = self._watchers.pop(run.run_id, None)
        if event is not None:
            event.set()

    def adopt(self, tr: machine.Transition) -> None:
        """A run just created and committed: its actor holds the document, its effects run.

        Unless its partition left this node while the commit was under way (the commit was
        fenced in time: PostgreSQL makes the hand-over wait for it): then the run is the next
        owner's, which recovers it from storage, first push and timers included."""
        if not self.host.accepts(tr.run.run_id):
            self.kind.perform(None, tr)  # only what does not need the run here (`perform`)
            return
        self.host.supervisor.adopt(self.kind, tr.run.run_id, tr.run)
        self.kind.perform(None, tr)
        if tr.run.waits_for_slot:
            # Written in its key's queue: it takes a slot at once if one is free (every new
            # run, whatever started it; a start that was refused one wakes nobody in vain).
            assert tr.run.concurrency_key is not None
            self.wake_queued(tr.run.app, tr.run.concurrency_key)

    def begin(
        self,
        *,
        app: str,
        definition: Definition,
        version: int,
        input: Any,
        ctx: Context,
        run_id: str | None = None,
        business_key: str | None = None,
        run_timeout_ms: int | None = None,
        trace_id: str | None = None,
        parent: ParentRef | None = None,
        depth: int = 0,
        debounce: tuple[str, int] | None = None,
        priority: int = DEFAULT_PRIORITY,
        tree: int | None = None,
    ) -> machine.Transition:
        """A new run's first transition: the one place a run is created, whatever creates it (an
        API start, a schedule's fire and a debounced burst through `start`, a signal-with-start,
        a `run`/`map`/`parallel` step's child). Its unit of work takes its place in its
        concurrency key's queue (`first_slot`) and `adopt` wakes the key once it is committed, so
        a rule for new runs is written here once (tests/unit/test_start_paths.py)."""
        return machine.start(
            run_id=run_id if run_id is not None else self.host.new_id(self.new_run_id),
            app=app,
            definition=definition,
            version=version,
            input=input,
            business_key=business_key,
            run_timeout_ms=run_timeout_ms,
            trace_id=trace_id if trace_id is not None else secrets.token_hex(16),
            ctx=ctx,
            parent=parent,
            depth=depth,
            debounce=debounce,
            priority=priority,
            tree=tree,
        )

    async def tree_budget(self, app: str) -> int:
        """A top-level run's tree budget: the app's `maxTreeRuns` (FOLIOT_MAX_TREE_RUNS)."""
        return (await self.host.directory.limits(app, self.host.settings)).max_tree_runs

    async def within_open_runs(self, app: str, n: int = 1) -> None:
        """The app's open-runs limit (issue 37) for `n` more runs: `OverQuota` past it, else
        they are counted as taken. Every path that creates runs calls this before `begin` (an API
        start, a debounce's, a schedule's fire through `start`; signal-with-start; a fan-out's
        children in `children.settle`): tests/unit/test_start_paths.py holds them. The count is
        the `run_counts` counters read at most once a second per app (`Directory.open_runs`)
        plus this node's starts since, so the limit holds within about a second of starts (and
        of other nodes' starts); a start counted here that then fails is forgotten at the next
        read."""
        directory = self.host.directory
        limits = await directory.limits(app, self.host.settings)
        most = limits.max_open_runs
        now_open = await directory.open_runs(app)
        if now_open + n > most:
            name = limits.setting("maxOpenRuns")
            raise OverQuota(
                f"app {app!r} has {now_open} open runs; {n} more would pass its limit ({name}) of {most}",
                limit=name,
                most=most,
            )
        directory.took_runs(app, n)

    async def settle(
        self, tr: machine.Transition, definition: Definition
    ) -> tuple[machine.Transition, tuple[UnitOfWork, ...], list[machine.Transition]]:
        """`children.settle`, and the units of work of the child runs it starts."""
        tr, started = await children.settle(self, tr, definition)
        units = tuple(
            UnitOfWork(child.run, None, child.events, child.tasks, slot=first_slot(child.run))
            for child in started
        )
        return tr, units, started

    async def debounced_start(self, req: DebouncedStart, render: Any) -> tuple[dict[str, Any], int]:
        """`debounce.debounced_start`."""
        self._check_ready()
        return await debounce.debounced_start(self, req, render)

    def wake_queued(self, app: str, key: str, limit: int | None = None, *, local_only: bool = False) -> None:
        """A slot of `key` may be free: its oldest runs waiting for one try to take it, up to
        `limit` of them (None: the oldest), each only if its guard would let it (`_fits`);
        `local_only`: only those this node owns, as each node's pump wakes its own. An `Admit`
        the guard refuses costs an actor and a transaction under the key's lock; the read that
        spares it is one statement. An admission wakes the key again: more may fit."""
        self._queueing.set()

        async def wake() -> None:
            for delay in (*_WAKE_RETRIES_S, None):
                try:
                    held, heads = await self.host.store.queue_room(app, key, limit or 1)
                    break
                except StorageError:
                    if delay is None:
                        return  # left to the pump's sweep
                    await trio.sleep(delay)
            for place, (run_id, version) in enumerate(heads):
                if not await self._fits(app, key, version, held + place):
                    break  # nor may a run behind it: a start never overtakes a queued run
                if not local_only or self.host.accepts(run_id):
                    self.tell(run_id, machine.Admit())

        self.host.spawn(wake)

    async def _fits(self, app: str, key: str, version: int, held: int) -> bool:
        """Whether a queued run of `version` would be admitted beside `held` slots of `key`: the
        limit is its own version's (as `slot_of` gives its admission); unknown here (a
        definition not read): let its guard decide."""
        try:
            definition = await self.host.directory.maybe_definition(app, slot_workflow(key), version)
        except StorageError:
            return True
        return definition is None or held < definition.slot_limit(key)

    async def pump(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The safety net for a lost wake-up (a crash between a commit and its effects, a message
        between nodes, a failed read): a key is woken when a slot of it is freed, so this only
        sweeps. Once after a start, every waiting key, page after page; then every `_SWEEP_S`
        one page of at most `_SWEEP_KEYS` keys, resuming where the last one ended (from the
        first again after the last), each key whose oldest run has waited longer than a period.
        Its work per period is one read and at most a page of keys however many keys wait, so
        an idle node's CPU does not grow with them; every key is looked at again within
        ceil(keys / `_SWEEP_KEYS`) periods. With no key waiting it sleeps until a run queues."""
        task_status.started()
        await trio.sleep(_PUMP_START_S)
        after: tuple[str, str] | None = None
        self._queueing = trio.Event()  # set again by a page with keys, or by a run queueing
        try:
            while (after := await self._sweep(after, self.host.clock.now())) is not None:
                pass
        except StorageError:
            self._queueing.set()  # the next period looks again
        after = None
        while True:
            await self._queueing.wait()
            await trio.sleep(_SWEEP_S)
            if after is None:
                # A new cycle: a run queueing from now on sets the new event (none is missed),
                # and a cycle whose first page is empty lets the pump sleep until one does.
                self._queueing = trio.Event()
            try:
                after = await self._sweep(after, self.host.clock.now() - int(_SWEEP_S * 1000))
            except StorageError:
                self._queueing.set()  # try again next period

    async def _sweep(self, after: tuple[str, str] | None, cutoff: int) -> tuple[str, str] | None:
        """One page of the pump's sweep, of the keys after `after`: each whose head was created
        before `cutoff`, has a slot free (`_fits`) and is this node's is told `Admit` (as a
        wake-up would). Where the next page starts (None: from the first key again)."""
        page = await self.host.store.queued_keys(after, _SWEEP_KEYS + 1)  # one more: is there?
        if page:
            self._queueing.set()
        now, seen = trio.current_time(), self._heads_seen
        for queued in page[:_SWEEP_KEYS]:
            # Waited a period: by its creation time, or by this node's own clock since a sweep
            # first saw it at the head (a run created by a node whose wall clock was ahead
            # looks younger than it is; found by tests/sim, seed 55).
            first = seen.setdefault(queued.head, now)
            self._heads_this_cycle.add(queued.head)
            if (queued.since >= cutoff and now - first < _SWEEP_S) or not self.host.accepts(queued.head):
                continue
            if await self._fits(queued.app, queued.key, queued.version, queued.held):
                self.tell(queued.head, machine.Admit())
        if len(page) <= _SWEEP_KEYS:
            # A cycle ends: forget the heads it did not see (admitted, or no longer first).
            self._heads_seen = {h: t for h, t in seen.items() if h in self._heads_this_cycle}
            self._heads_this_cycle = set()
            return None
        last = page[_SWEEP_KEYS - 1]
        return last.app, last.key

    async def reconcile(self, only: Callable[[str], bool]) -> tuple[int, int]:
        """After a restart: what parents and children may not have been told (`children`)."""
        return await children.reconcile(self, only)

    def queueing(self) -> None:
        """A run of this node waits for a concurrency slot: the pump watches the queues."""
        self._queueing.set()

    def adopt_children(self, started: list[machine.Transition]) -> None:
        """Child runs committed with their parent's transition: now they run."""
        for child in started:
            with self.tracer.span("run.start", child.run):  # under the parent's transition
                self.adopt(child)

    # ------------------------------------------------------------------ messages without a caller

    def tell(self, run_id: str, message: ActorMessage) -> None:
        self.host.tell_or_retry(self.kind, run_id, Envelope(message))

    def answer(self, run_id: str, answer: machine.TaskAnswer) -> None:
        """A push's outcome, from the dispatcher."""
        self.host.tell_or_retry(self.kind, run_id, Envelope(answer))

    def busy(self, run_id: str) -> bool:
        """The run's actor is handling or holding messages: a new one waits behind them."""
        actor = self.host.supervisor.actors.get(run_id)
        return actor is not None and not actor.idle

    def live(self, run_id: str) -> Run | None:
        """The live actor's document, if the run is in memory."""
        actor = self.host.supervisor.actors.get(run_id)
        return actor.state if actor is not None else None

    # ------------------------------------------------------------------ entry points

    def _check_ready(self) -> None:
        if not self.host.ready:
            raise Unavailable("the engine is starting; retry shortly")

    async def ask(
        self, run_id: str, message: ActorMessage, known: Run | None = None
    ) -> tuple[Reply, Run | None]:
        """Send a message to a run's actor and wait until it committed and answered.

        `known` is the run as the caller just read it; it spares a passivated run a second read.
        """
        self._check_ready()
        check_local(self.host.placement, run_id)  # owned elsewhere: the request is forwarded
        slot = ReplySlot()
        if type(message) is machine.SignalIn and known is not None:
            with self.tracer.span("run.signal", known) as span:
                span.set("foliot.signal", message.name)
                await self.host.supervisor.ask(self.kind, run_id, Envelope(message, slot), known)
                reply = await slot.wait()
                span.set("foliot.reply", str(reply.value) if isinstance(reply, machine.Ok) else reply.code)
            return reply, slot.value
        await self.host.supervisor.ask(self.kind, run_id, Envelope(message, slot), known)
        reply = await slot.wait()
        return reply, slot.value

    async def claim_queued(
        self, app: str, queue: str, count: int, wait_until: float, worker_id: str | None
    ) -> list[tuple[Run, TaskRef]]:
        """Long-poll: claim up to `count` queued tasks, waiting until `wait_until` (Trio time).

        A token leaves the queue only when its claim is committed (or the run refuses it as
        closed); the run's actor settles it through the reply slot, so the poller's
        cancellation cannot lose it. A poller cancelled after its claims committed loses the
        answer: those tasks are claimed and time out at their deadline (at-least-once).
        """
        self._check_ready()
        while True:
            async with self.host.queues.reserve(app, queue, count, wait_until) as held:
                if not held.offers:
                    return []
                slots: list[ReplySlot] = []
                for token, run_id in held.offers:
                    slot = ReplySlot(on_settle=partial(_settle_claim, held, token))
                    await self.host.supervisor.ask(
                        self.kind, run_id, Envelope(machine.Claim(token, worker_id), slot)
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

    @_run_start_span
    async def start(
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
        debounce: DebounceChange | None = None,
        schedule: ScheduleRef | None = None,
        fire: ScheduleFire | None = None,
        priority: int = DEFAULT_PRIORITY,
    ) -> tuple[dict[str, Any], bool]:
        """Create a run. Returns (response body, created); created is False for a replay.

        `debounce` (a `claim`): the run is the first of a debounced burst (`debounce.py`); a
        trailing one begins at `debounce.until`. A schedule's fire passes its `schedule` (kept on
        the run) and its `fire` record, written with the run's insert under the new run's id:
        `UniqueViolation("schedule_fire")` when that scheduled time started a run before."""
        self._check_ready()
        if idempotency_key is not None:
            replay = await self.replay(app, idempotency_key, request_hash)
            if replay is not None:
                return replay, False
        definition, version = await self.definition_of(app, workflow, version)
        await self.within_open_runs(app)
        # No pre-check of the business key: the unique index on open runs decides, atomically.
        tr = self.begin(
            app=app,
            definition=definition,
            version=version,
            input=input,
            business_key=business_key,
            run_timeout_ms=run_timeout_ms,
            ctx=self.context(),
            debounce=(debounce.key, debounce.until)
            if debounce is not None and debounce.mode == "trailing"
            else None,
            priority=priority,
            tree=await self.tree_budget(app),
        )
        if schedule is not None:
            tr = attrs.evolve(tr, run=replace_run(tr.run, {"schedule": schedule}))
        candidates = [tr]
        if tr.run.status == "queued":
            # A workflow with `concurrency`: admitted at once when a slot is free and no run
            # waits (the store's guard decides, under the key's lock), else committed as queued
            # (the admitted unit's `otherwise`: one commit).
            admit = machine.transition(tr.run, definition, machine.Admit(), self.context())
            candidates.insert(0, machine.chain(tr, admit))
        if len(candidates) == 2 and debounce is None and fire is None:
            outcome = await self._commit_start(
                candidates, definition, render, app, workflow, business_key, idempotency_key, request_hash
            )
            if outcome is not None:
                return outcome
            raise AssertionError("a queued start is never refused a slot")  # pragma: no cover
        for candidate in candidates:
            outcome = await self._commit_start(
                [candidate],
                definition,
                render,
                app,
                workflow,
                business_key,
                idempotency_key,
                request_hash,
                debounce,
                fire,
            )
            if outcome is not None:
                return outcome
        raise AssertionError("a queued start is never refused a slot")  # pragma: no cover

    async def _start_unit(
        self,
        tr: machine.Transition,
        definition: Definition,
        render: Any,
        app: str,
        idempotency_key: str | None,
        request_hash: str,
        debounce: DebounceChange | None,
        fire: ScheduleFire | None,
    ) -> tuple[machine.Transition, UnitOfWork, dict[str, Any], list[machine.Transition]]:
        """A new run's first transition as its unit of work: (transition, unit, answer body,
        child runs it starts)."""
        run_id = tr.run.run_id
        tr, children_units, started = await self.settle(tr, definition)
        body = render(tr.run)
        idem = None
        if idempotency_key is not None:
            idem = IdempotencyRecord(
                app, idempotency_key, request_hash, run_id, json_dumps(body), self.host.clock.now()
            )
        unit = UnitOfWork(
            tr.run,
            None,
            tr.events,
            tr.tasks,
            idem,
            idempotency_expired_before=self.idempotency_cutoff(),
            children=children_units,
            slot=slot_of(None, tr.run, definition),
            debounce=debounce,
        )
        if fire is not None:
            unit = attrs.evolve(unit, fire=attrs.evolve(fire, run_id=run_id))
        return tr, unit, body, started

    async def _commit_start(
        self,
        candidates: list[machine.Transition],
        definition: Definition,
        render: Any,
        app: str,
        workflow: str,
        business_key: str | None,
        idempotency_key: str | None,
        request_hash: str,
        debounce: DebounceChange | None = None,
        fire: ScheduleFire | None = None,
    ) -> tuple[dict[str, Any], bool] | None:
        """Commit a new run's first transition (or the first of two, the second written
        instead when the first's admission is refused); None when its slot was taken."""
        prepared = [
            await self._start_unit(c, definition, render, app, idempotency_key, request_hash, debounce, fire)
            for c in candidates
        ]
        tr, unit, body, started = prepared[0]
        if len(prepared) == 2:
            unit = attrs.evolve(unit, otherwise=prepared[1][1])
        if self.host.supervisor.closed:
            raise Unavailable("the server is shutting down")
        try:
            # In the caller's own task: the commit is shielded and its effects follow with no
            # checkpoint in between, so a client going away cannot part them (no task spawned).
            if not await self.commit(unit):
                tr, _, body, started = prepared[1]  # no slot free: it was written queued
        except Fenced as exc:  # the partition moved to another node between the id and the commit
            raise Unavailable("this node no longer owns the new run's partition; retry") from exc
        except UniqueViolation as exc:
            if exc.constraint == "schedule_fire":
                raise  # that scheduled time started its run before: the schedule's to answer
            if exc.constraint == SLOT_TAKEN and tr.run.holds_slot:
                return None  # no slot free: it starts queued instead
            if exc.constraint == DEBOUNCE_TAKEN:
                raise Conflict(
                    "another start began this debounce key's burst", code="debounce_taken"
                ) from exc
            # A retried request with the same key answers as the first one did, whichever
            # uniqueness its own insert ran into first (business key or idempotency key).
            if idempotency_key is not None:
                replay = await self.replay(app, idempotency_key, request_hash)
                if replay is not None:
                    return replay, False
            if exc.constraint == "business_key" and business_key is not None:
                await self._refuse_business_key(app, workflow, business_key)
            raise Conflict(str(exc)) from exc
        except StorageError as exc:
            if not await self.kind.applied(tr.run.run_id, None, tr, started, exc):
                if len(prepared) == 1:
                    raise  # not applied: nothing changed
                queued = prepared[1][0]
                if not await self.kind.applied(tr.run.run_id, None, queued, prepared[1][3], exc):
                    raise  # neither form was written
                tr, _, body, started = prepared[1]
        self.adopt(tr)
        self.adopt_children(started)
        return body, True

    async def definition_of(self, app: str, workflow: str, version: int | None) -> tuple[Definition, int]:
        """The definition a start runs (`version`, else the latest); 404 when there is none."""
        found = await self.host.directory.resolve(app, workflow, version)
        if found is None:
            which = f"version {version} of " if version is not None else ""
            raise NotFound(f"{which}workflow {workflow!r} not found")
        return found

    async def replay(self, app: str, key: str, request_hash: str) -> dict[str, Any] | None:
        """The answer stored for an Idempotency-Key, or None when unknown or expired;
        `Conflict` when it was used with another request body."""
        found = await self.host.store.get_idempotency(app, key)
        cutoff = self.idempotency_cutoff()
        if found is None or (cutoff is not None and found.created_at < cutoff):
            return None  # unknown, or expired (not pruned yet): the start is a new one
        if found.request_hash != request_hash:
            raise Conflict(
                "this Idempotency-Key was used with a different request body",
                code="idempotency_key_reused",
            )
        body: dict[str, Any] = json.loads(found.response)
        return body

    async def _refuse_business_key(self, app: str, workflow: str, business_key: str) -> None:
        existing = await self.host.store.find_open_run(app, workflow, business_key)
        if existing is not None:
            raise Conflict(
                f"businessKey {business_key!r} is used by open run {existing.run_id}",
                code="business_key_in_use",
                runId=existing.run_id,
            )

    async def document(self, run_id: str) -> Run | None:
        """The freshest view: the live actor's document, else storage."""
        live = self.live(run_id)
        if live is not None:
            return live
        return await self.host.store.get_run(run_id)

    async def wait_for(self, run_id: str, predicate: Any, timeout_s: float = 10.0) -> Run:
        """Block until the run satisfies `predicate` (used by tests and long-polling tools)."""
        with trio.fail_after(timeout_s):
            while True:
                event = self._watchers.setdefault(run_id, trio.Event())
                try:
                    run = await self.document(run_id)
                    if run is not None and predicate(run):
                        return run
                    await event.wait()
                finally:
                    # The last waiter to leave removes the entry: nothing kept for runs no one watches.
                    if self._watchers.get(run_id) is event and event.statistics().tasks_waiting == 0:
                        del self._watchers[run_id]


def _settle_claim(held: Reservation, token: str, slot: ReplySlot) -> None:
    """Called in the actor's task with the claim's answer: keep, drop or put back the token."""
    if slot.error is not None:
        held.settle(token, claimed=False)
    else:
        held.settle(token, claimed=isinstance(slot.reply, machine.Ok), gone=True)
