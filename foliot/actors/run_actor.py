"""A run's actor: a bounded mailbox, the pure machine, commit, then effects.

The actor is the run's only writer. For each message it computes the transition, commits it
as one unit of work guarded by the run's `seq`, and only then performs effects (push, offer,
abort, timers) and answers the caller. While idle it is plain data (no task); the supervisor
starts a drain task when a message arrives, and drops idle parked actors from memory after
`FOLIOT_PASSIVATE_AFTER_MS`; the next message rehydrates the run from storage.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..errors import StaleWrite, StorageError, Unavailable, UniqueViolation
from ..logs import log_transition
from ..storage.base import SIGNAL_ID_UNIQUE, UnitOfWork
from ..workflow import machine
from ..workflow.definition import Definition
from ..workflow.machine import Ok, Rejected, Reply, Rewind, SignalIn, TimerFired, Transition
from ..workflow.model import Run
from .messages import Envelope, Redeliver

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("foliot.actor")

PARKED = frozenset({"waiting", "sleeping", "stuck", "paused"})
_MAX_REDELIVERIES = 30
_MAX_STALE_RELOADS = 3  # StaleWrites in a row for one message before it counts as a storage failure
# Refusals of a signal that a retry of one the run already took would also get.
_SIGNAL_REFUSALS = frozenset({"run_closed", "signal_buffer_full", "signal_buffer_too_large"})


class RunActor:
    """A run's actor: data while idle, a task only while it has messages.

    The supervisor appends to `mailbox` (a deque made on the first message, dropped once
    drained) and starts one drain task when `draining` is false; the drain handles messages
    one at a time and ends when the mailbox is empty. An idle parked actor is therefore a
    slotted object and its run document, with no task, channel or cancel scope.
    """

    __slots__ = (
        "current",
        "draining",
        "engine",
        "last_message_at",
        "live_since",
        "mailbox",
        "processed",
        "room",
        "run",
        "run_id",
        "touched",
    )

    def __init__(self, run_id: str, engine: Engine, run: Run | None = None) -> None:
        self.run_id = run_id
        self.engine = engine
        self.run = run
        self.mailbox: deque[Envelope] | None = None
        self.room: trio.Event | None = None  # made by a caller waiting for mailbox room
        self.draining = False  # a drain task is running for this actor
        self.live_since = engine.clock.now()
        self.touched = self.live_since  # last activity: the supervisor's passivation order
        self.last_message_at: int | None = None
        self.current: Envelope | None = None
        self.processed = 0

    @property
    def mailbox_depth(self) -> int:
        return len(self.mailbox) if self.mailbox is not None else 0

    @property
    def parked(self) -> bool:
        return self.run is None or self.run.status in PARKED or not self.run.is_open

    @property
    def idle(self) -> bool:
        """No drain running and nothing queued: the actor may be dropped from memory."""
        return not self.draining and not self.mailbox

    def offer(self, envelope: Envelope) -> bool:
        """Queue a message; False when the mailbox is full (back-pressure)."""
        mailbox = self.mailbox
        if mailbox is None:
            mailbox = self.mailbox = deque()
        elif len(mailbox) >= self.engine.settings.mailbox_size:
            return False
        mailbox.append(envelope)
        return True

    async def wait_for_room(self) -> None:
        if self.room is None:
            self.room = trio.Event()
        await self.room.wait()

    def _wake_waiters(self) -> None:
        room, self.room = self.room, None
        if room is not None:
            room.set()

    # ------------------------------------------------------------------ the drain

    async def drain(self) -> None:
        """Handle queued messages until none is left. Raises only on a bug; the supervisor then
        restarts it from the last checkpoint (the document is reloaded)."""
        while self.mailbox:
            # Stop between messages at shutdown: the rest are refused, as before.
            await trio.lowlevel.checkpoint_if_cancelled()
            if self.run is None:
                try:
                    self.run = await self.engine.store.get_run(self.run_id)
                except StorageError as exc:
                    # Cannot rehydrate now: answer or re-schedule what waits, and leave quietly.
                    self._drain_after_storage_failure(exc)
                    return
            envelope = self.mailbox.popleft()
            self._wake_waiters()
            self.current = envelope
            await self._handle_settled(envelope)
            self.current = None
            self.processed += 1
        self.mailbox = None

    async def _handle_settled(self, envelope: Envelope) -> None:
        """`handle`; a timer firing is then settled with the wheel, which holds it in flight
        until told: done once the run no longer holds that arming (applied or stale), else
        (storage failed, a crash) handed out again after a backoff."""
        msg = envelope.message
        try:
            await self.handle(envelope)
        finally:
            if isinstance(msg, TimerFired):
                held = self.run is not None and any(
                    slot == msg.slot and t.key == msg.key for slot, t in self.run.timers()
                )
                self.engine.timers.settle(self.run_id, msg, applied=not held)

    async def handle(self, envelope: Envelope) -> None:
        """Handle one message; every storage failure on the way (loading the definition,
        reloading after a StaleWrite, the commit) takes the one storage-failure path."""
        self.last_message_at = self.engine.clock.now()
        for _ in range(_MAX_STALE_RELOADS):
            try:
                if not await self._handle_once(envelope):
                    return
                # Someone else moved the run (another node, a stale seed): reload and retry.
                self.run = await self.engine.store.get_run(self.run_id)
            except StorageError as exc:
                self._storage_failed(envelope, exc)
                return
        self._storage_failed(envelope, StaleWrite(f"the run moved under us {_MAX_STALE_RELOADS} times"))

    async def _handle_once(self, envelope: Envelope) -> bool:
        """One try; True when the commit met a StaleWrite and the run must be reloaded."""
        msg = envelope.message
        slot = envelope.reply
        run = self.run
        if run is None:
            if slot is not None:
                slot.put(Rejected(404, "not_found", f"no run {self.run_id}"))
            return False
        definition = await self.engine.definition(run.app, run.workflow, run.version)
        if isinstance(msg, Redeliver):
            self.redeliver(run, definition, msg.token)
            return False
        if isinstance(msg, Rewind) and msg.version is not None and msg.version != run.version:
            target = await self.engine.maybe_definition(run.app, run.workflow, msg.version)
            if target is None:
                if slot is not None:
                    slot.put(
                        Rejected(404, "not_found", f"workflow {run.workflow!r} has no version {msg.version}")
                    )
                return False
            msg = attrs.evolve(msg, target=target)
        tr = machine.transition(run, definition, msg, self.engine.context())
        if tr.changed:
            try:
                idem = envelope.idempotency(tr.reply) if envelope.idempotency is not None else None
                await self.engine.commit(
                    UnitOfWork(
                        tr.run,
                        run.seq,
                        tr.events,
                        tr.tasks,
                        idem,
                        signal_ids=tr.signal_ids,
                        idempotency_expired_before=self.engine.idempotency_cutoff() if idem else None,
                    )
                )
            except UniqueViolation as exc:
                if slot is not None:
                    slot.put(self._unique_reply(exc, tr.run))
                return False
            except StaleWrite:
                return True
            self.run = tr.run
            self.perform(tr)
        elif (
            isinstance(msg, SignalIn)
            and msg.signal_id is not None
            and isinstance(tr.reply, Rejected)
            and tr.reply.code in _SIGNAL_REFUSALS
            and await self.engine.store.signal_taken(self.run_id, msg.signal_id)
        ):
            # A refused signal (run closed, buffer full) that the run took before is a retry.
            tr = attrs.evolve(tr, reply=Ok("duplicate"))
        if slot is not None:
            slot.put(tr.reply, tr.run)
        return False

    def _unique_reply(self, exc: UniqueViolation, run: Run) -> Reply:
        if exc.constraint == SIGNAL_ID_UNIQUE:
            return Ok("duplicate")  # the run took this signalId before; nothing was committed
        if exc.constraint == "idempotency":
            return Rejected(409, "idempotency_replay", "a request with this Idempotency-Key committed first")
        if exc.constraint == "business_key":
            return Rejected(
                409, "business_key_in_use", f"businessKey {run.business_key!r} is used by another open run"
            )
        return Rejected(409, "conflict", str(exc))

    def _storage_failed(self, envelope: Envelope, exc: StorageError) -> None:
        log.warning("run %s: storage failed (%s)", self.run_id, exc)
        if envelope.reply is not None:
            envelope.reply.fail(Unavailable("storage is unavailable; nothing was changed, retry"))
            return
        if isinstance(envelope.message, TimerFired):
            # The wheel owns a firing until it is settled; it hands it out again after a backoff.
            self.engine.timers.settle(self.run_id, envelope.message, applied=False)
            return
        # No caller to tell (a push answer): try again later, as the message still holds.
        # A push answer is never given up: an unsent-deadline push attempt has no timer behind it.
        if envelope.attempts < _MAX_REDELIVERIES or isinstance(envelope.message, machine.TaskAnswer):
            delay = min(0.2 * 2 ** min(envelope.attempts, 5), 5.0)
            retry = attrs.evolve(envelope, attempts=envelope.attempts + 1)
            self.engine.later(delay, self.run_id, retry)

    def _drain_after_storage_failure(self, exc: StorageError) -> None:
        mailbox, self.mailbox = self.mailbox, None
        self._wake_waiters()
        while mailbox:
            self._storage_failed(mailbox.popleft(), exc)

    def refuse_pending(self, error: BaseException) -> None:
        """Shutdown: fail the message in hand and every queued one (callers get `error`); what
        they would have done is re-created from storage at the next start."""
        current, self.current = self.current, None
        if current is not None and current.reply is not None and not current.reply.event.is_set():
            current.reply.fail(error)
        mailbox, self.mailbox = self.mailbox, None
        self._wake_waiters()
        while mailbox:
            envelope = mailbox.popleft()
            if envelope.reply is not None:
                envelope.reply.fail(error)

    # ------------------------------------------------------------------ effects

    def perform(self, tr: Transition) -> None:
        """After the commit: timers, pushes, offers, aborts, and anyone watching the run."""
        log_transition(tr.run, tr.events)
        engine = self.engine
        engine.timers.sync(tr.run)
        for effect in tr.effects:
            if isinstance(effect, machine.Dispatch):
                engine.dispatch(tr.run, effect.task, effect.path, effect.timeout_ms)
            elif isinstance(effect, machine.Abort):
                engine.abort(effect.token)
            elif isinstance(effect, machine.Withdraw):
                engine.queues.withdraw(effect.token)
        engine.notify(tr.run)

    def redeliver(self, run: Run, definition: Definition, token: str) -> None:
        """Send the open attempt again, same token and key; a 202-accepted one is left to its
        deadline timer. A push attempt has no deadline until it is sent, so an open one is
        always sent again, and gets a fresh deadline from that send."""
        task = run.task
        if task is None or task.token != token or task.accepted or not run.is_open:
            return
        if task.queue is None and task.deadline is not None and task.deadline <= self.engine.clock.now():
            return
        step = definition.step(task.step)
        assert step.timeout_ms is not None
        self.engine.dispatch(run, task, step.push_path(run.workflow), step.timeout_ms)

    def describe(self) -> dict[str, Any]:
        run = self.run
        task = run.task if run is not None else None
        return {
            "runId": self.run_id,
            "app": run.app if run else None,
            "workflow": run.workflow if run else None,
            "status": run.status if run else None,
            "currentStep": run.current_step if run else None,
            "mailboxDepth": self.mailbox_depth,
            "liveSince": self.live_since,
            "lastMessageAt": self.last_message_at,
            "processed": self.processed,
            "inflight": None
            if task is None
            else {
                "taskToken": task.token,
                "step": task.step,
                "attempt": task.attempt,
                "queue": task.queue,
                "deadline": task.deadline,
                "accepted": task.accepted,
                "pushing": self.engine.dispatcher.is_inflight(task.token),
            },
        }
