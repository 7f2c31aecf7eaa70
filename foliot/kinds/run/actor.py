"""The Foliot run as a kind of actor: the pure run machine over the generic runtime.

For each message the run's actor computes the transition, commits it as one unit of work
guarded by the run's `seq`, and only then performs effects (push, offer, abort, timers) and
answers the caller. The mailbox, the drain, passivation and restarts are the runtime's
(`runtime.py`, `supervisor.py`); this module says what a run's document, transition, commit
and effects are.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ...actors.messages import Envelope, Redeliver, Resolve
from ...actors.runtime import Actor
from ...core.errors import CommitInDoubt, Fenced, StaleWrite, StorageError, UniqueViolation
from ...core.logs import log_transition
from ...core.workflow import machine
from ...core.workflow.definition import Definition
from ...core.workflow.machine import (
    ChildRunClosed,
    Ok,
    Rejected,
    Reply,
    Rewind,
    SignalIn,
    TimerFired,
    Transition,
)
from ...core.workflow.model import Run, Timer
from ...storage.base import SIGNAL_ID_UNIQUE, SLOT_TAKEN, DebounceChange, SlotChange, UnitOfWork, run_json
from ..readback import read_back

if TYPE_CHECKING:
    from .service import Runs

PARKED = frozenset({"queued", "waiting", "sleeping", "stuck", "paused"})
# Refusals of a signal that a retry of one the run already took would also get.
_SIGNAL_REFUSALS = frozenset({"run_closed", "signal_buffer_full", "signal_buffer_too_large"})

RunActor = Actor[Run]
_MAX_BATCHED_CLOSES = 256  # child closes applied in one commit
_RESOLVE_AFTER_S = 1.0  # a commit in doubt: its run is read again this soon (then with backoff)


@attrs.frozen
class _Doubt:
    """A transition whose commit may or may not have been applied (`RunKind.applied`)."""

    before: Run | None  # None: a new run
    tr: Transition
    started: tuple[Transition, ...]  # child runs it started


def _written(stored: Run | None, committed: Run) -> bool:
    """The store holds this very document (as storage gives it back: through its JSON text)."""
    return stored is not None and stored.seq == committed.seq and run_json(stored) == run_json(committed)


def slot_of(before: Run | None, after: Run, definition: Definition) -> SlotChange | None:
    """The concurrency slot change a transition from `before` to `after` makes, if any."""
    key = after.concurrency_key or (before.concurrency_key if before is not None else None)
    if key is None:
        return None
    held_before = before is not None and before.holds_slot
    waited_before = before is not None and before.waits_for_slot
    if after.holds_slot and not held_before:
        return SlotChange("admit", key, definition.slot_limit(key))
    if after.waits_for_slot and not (waited_before and before is not None and before.concurrency_key == key):
        return SlotChange("queue", key)  # starts to wait, or waits in another key's queue now
    if (held_before or waited_before) and not (after.holds_slot or after.waits_for_slot):
        return SlotChange("leave", key)
    return None


def first_slot(run: Run) -> SlotChange | None:
    """A new run's place in its concurrency key's queue, if it waits for a slot (one admitted at
    once takes it through `slot_of`'s admission instead)."""
    if run.waits_for_slot:
        assert run.concurrency_key is not None
        return SlotChange("queue", run.concurrency_key)
    return None


def debounce_of(before: Run, after: Run) -> DebounceChange | None:
    """A pending debounced run that begins (or closes) releases its burst's key."""
    key = before.debounce_key
    if key is None or after.debounce_key is not None:
        return None
    workflow, _, name = key.partition("/")
    return DebounceChange("release", workflow, name)


def _give_back(actor: RunActor, taken: list[Envelope]) -> None:
    """Messages taken from the mailbox but not committed: back at its front, in order."""
    if not taken:
        return
    if actor.mailbox is None:
        actor.mailbox = deque()
    actor.mailbox.extendleft(reversed(taken))
    taken.clear()


class RunKind:
    """`Kind[Run]`: loads runs, drives `workflow.machine`, commits to the run store."""

    name = "run"

    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self.host = runs.host
        self._doubts: dict[str, _Doubt] = {}  # run id -> its commit in doubt

    async def load(self, actor_id: str) -> Run | None:
        run = await self.host.store.get_run(actor_id)
        doubt = self._doubts.pop(actor_id, None)
        if doubt is not None and _written(run, doubt.tr.run):
            # The commit in doubt was applied: its effects are owed, before anything else.
            self.perform(doubt.before, doubt.tr)
            self.runs.adopt_children(list(doubt.started))
            if doubt.before is None and doubt.tr.run.waits_for_slot:
                self.runs.queueing()
        return run

    async def applied(
        self,
        run_id: str,
        before: Run | None,
        tr: Transition,
        started: list[Transition],
        error: StorageError,
    ) -> bool:
        """After the commit of `tr` failed with a storage error that does not say whether it was
        applied (the connection lost during the commit, its reply with it): the run read back.
        True: it was applied (go on as committed, effects and answer); False: it was not (the
        error stands, nothing changed). Unreadable too: `CommitInDoubt`, and the run's actor
        reads it again before it does anything else (`load`, through a `Resolve` if no other
        message comes), performing `tr`'s effects then if it was applied. A commit the database
        may still be applying (`CommitUnknown.settled` false) is not read back at once: that
        read could see the old document of a commit about to land."""
        read, stored = await read_back(lambda: self.host.store.get_run(run_id), error)
        if read:
            # Anything but this very document: not applied (a run has one writer, its actor, so
            # nothing else could have moved it on after this commit landed).
            return _written(stored, tr.run)
        self._doubts[run_id] = _Doubt(before, tr, tuple(started))
        self.host.later(_RESOLVE_AFTER_S, self, run_id, Envelope(Resolve()))
        raise CommitInDoubt()

    def timers(self, state: Run) -> Sequence[tuple[str, Timer]]:
        return state.timers()

    def firing(self, slot: str, kind: str, key: str) -> TimerFired:
        return TimerFired(slot, kind, key)

    def fired(self, message: Any) -> tuple[str, str] | None:
        return (message.slot, message.key) if type(message) is TimerFired else None

    def parked(self, state: Run) -> bool:
        return state.status in PARKED or not state.is_open

    def is_open(self, state: Run) -> bool:
        return state.is_open

    def unknown(self, actor_id: str) -> Reply:
        return Rejected(404, "not_found", f"no run {actor_id}")

    def persistent(self, message: Any) -> bool:
        # A push answer is never given up: an unsent-deadline push attempt has no timer behind
        # it; nor is a child's close (its parent would wait for it until the next restart), nor
        # the resolution of a commit in doubt (its effects would wait for the next restart).
        return isinstance(message, machine.TaskAnswer | ChildRunClosed | Resolve)

    async def handle(self, actor: RunActor, envelope: Envelope) -> bool:
        """One try; True when the commit met a StaleWrite and the run must be reloaded."""
        msg = envelope.message
        slot = envelope.reply
        run = actor.state
        assert run is not None
        if actor.id in self._doubts:
            return True  # a commit in doubt: the run is read again first (`load` resolves it)
        if type(msg) is Resolve:
            return False  # read again already
        runs, host = self.runs, self.host
        definition = await host.directory.definition(run.app, run.workflow, run.version)
        if isinstance(msg, Redeliver):
            self.redeliver(run, definition, msg.token)
            return False
        if isinstance(msg, Rewind) and msg.version is not None and msg.version != run.version:
            target = await host.directory.maybe_definition(run.app, run.workflow, msg.version)
            if target is None:
                if slot is not None:
                    slot.put(
                        Rejected(404, "not_found", f"workflow {run.workflow!r} has no version {msg.version}")
                    )
                return False
            msg = attrs.evolve(msg, target=target)
        tr = machine.transition(run, definition, msg, runs.context())
        taken: list[Envelope] = []
        if type(msg) is ChildRunClosed and slot is None and actor.mailbox:
            tr, taken = self._more_closes(actor, tr, definition)
        try:
            with runs.tracer.span("run.transition", run) as span:
                stale = await self._commit(actor, envelope, run, definition, tr)
                if actor.state is not run:  # committed (else the span is dropped)
                    span.transition(msg, tr.events)
        except BaseException:
            _give_back(actor, taken)  # not committed: they are handled again
            raise
        if stale:
            _give_back(actor, taken)
        return stale

    def _more_closes(
        self, actor: RunActor, tr: Transition, definition: Definition
    ) -> tuple[Transition, list[Envelope]]:
        """Child closes queued behind this one, applied with it: one commit for a burst of a
        map's children instead of one each. Stops at anything else, or once the fan-out is done."""
        mailbox = actor.mailbox
        assert mailbox is not None
        taken: list[Envelope] = []
        ctx = self.runs.context()
        while mailbox and len(taken) < _MAX_BATCHED_CLOSES and tr.gather is None:
            nxt = mailbox[0]
            if type(nxt.message) is not ChildRunClosed or nxt.reply is not None or tr.run.fan is None:
                break
            mailbox.popleft()
            taken.append(nxt)
            more = machine.transition(tr.run, definition, nxt.message, ctx)
            if more.changed:
                tr = machine.chain(tr, more) if tr.changed else more
        return tr, taken

    async def _commit(
        self, actor: RunActor, envelope: Envelope, run: Run, definition: Definition, tr: Transition
    ) -> bool:
        runs = self.runs
        msg = envelope.message
        slot = envelope.reply
        host = self.host
        started: list[Transition] = []
        children_units: tuple[UnitOfWork, ...] = ()
        if tr.run.version != run.version:
            # Rewound or migrated to another version: what follows is that version's.
            definition = await host.directory.definition(tr.run.app, tr.run.workflow, tr.run.version)
        if tr.changed and (tr.children or tr.gather is not None):
            tr, children_units, started = await runs.settle(tr, definition)
        if tr.changed:
            try:
                idem = envelope.idempotency(tr.reply) if envelope.idempotency is not None else None
                await runs.commit(
                    UnitOfWork(
                        tr.run,
                        run.seq,
                        tr.events,
                        tr.tasks,
                        idem,
                        signal_ids=tr.signal_ids,
                        idempotency_expired_before=runs.idempotency_cutoff() if idem else None,
                        children=children_units,
                        slot=slot_of(run, tr.run, definition),
                        debounce=debounce_of(run, tr.run),
                    )
                )
            except UniqueViolation as exc:
                if slot is not None:
                    slot.put(self._unique_reply(exc, tr.run))
                return False
            except Fenced:
                raise  # another node owns the run now: the runtime drops the actor
            except StaleWrite:
                return True
            except StorageError as exc:
                if not await self.applied(actor.id, run, tr, started, exc):
                    raise  # not applied: nothing changed
            actor.state = tr.run
            self.perform(run, tr)
            runs.adopt_children(started)
        elif (
            isinstance(msg, SignalIn)
            and msg.signal_id is not None
            and isinstance(tr.reply, Rejected)
            and tr.reply.code in _SIGNAL_REFUSALS
            and await host.store.signal_taken(actor.id, msg.signal_id)
        ):
            # A refused signal (run closed, buffer full) that the run took before is a retry.
            tr = attrs.evolve(tr, reply=Ok("duplicate"))
        if slot is not None:
            slot.put(tr.reply, tr.run)
        return False

    def _unique_reply(self, exc: UniqueViolation, run: Run) -> Reply:
        if exc.constraint == SIGNAL_ID_UNIQUE:
            return Ok("duplicate")  # the run took this signalId before; nothing was committed
        if exc.constraint == SLOT_TAKEN:
            return Rejected(
                409,
                "no_concurrency_slot",
                f"every concurrency slot of {run.concurrency_key!r} is taken; retry later",
            )
        if exc.constraint == "idempotency":
            return Rejected(409, "idempotency_replay", "a request with this Idempotency-Key committed first")
        if exc.constraint == "business_key":
            return Rejected(
                409, "business_key_in_use", f"businessKey {run.business_key!r} is used by another open run"
            )
        return Rejected(409, "conflict", str(exc))

    async def give_up(self, actor: RunActor, exc: Exception) -> None:
        """Park the run as stuck (internal_error) so an operator can look; never loop forever."""
        runs, host = self.runs, self.host
        run = await host.store.get_run(actor.id)
        if run is None or not run.is_open:
            return
        definition = await host.directory.definition(run.app, run.workflow, run.version)
        message = f"the run's actor crashed {host.supervisor.max_crashes} times: {type(exc).__name__}"
        tr = machine.mark_stuck(run, definition, "internal_error", message, runs.context())
        await runs.commit(
            UnitOfWork(tr.run, run.seq, tr.events, tr.tasks, slot=slot_of(run, tr.run, definition))
        )
        actor.state = tr.run
        self.perform(run, tr)

    # ------------------------------------------------------------------ effects

    def perform(self, before: Run | None, tr: Transition) -> None:
        """After the commit: timers, pushes, offers, aborts, and anyone watching the run.

        A commit that was under way when the run's partition left this node (handed over or
        lost; the commit itself was fenced in time) arms no timer here and sends no push nor
        offer: the next owner recovers them from storage, and would send them too. What goes
        to other runs (their owners, wherever they are) and the run's watchers still go."""
        log_transition(tr.run, tr.events)
        runs, host = self.runs, self.host
        here = host.accepts(tr.run.run_id)
        if here:
            host.timers.sync(
                self.name, tr.run.run_id, () if before is None else before.timers(), tr.run.timers()
            )
        for effect in tr.effects:
            if isinstance(effect, machine.Dispatch):
                if not here:
                    continue
                runs.dispatch(
                    tr.run, effect.task, effect.path, effect.timeout_ms, effect.priority, effect.buckets
                )
            elif isinstance(effect, machine.Abort):
                runs.abort(effect.token)
            elif isinstance(effect, machine.Withdraw):
                host.queues.withdraw(effect.token)
                host.dispatcher.abort(effect.token)  # an offer still waiting for its rate-limit token
            elif isinstance(effect, machine.CancelChildren):
                for child_id in effect.run_ids:
                    runs.tell(child_id, machine.Cancel(effect.reason))
            elif isinstance(effect, machine.NotifyParent):
                runs.tell(effect.parent_run_id, effect.message)
            elif isinstance(effect, machine.WakeQueued):
                runs.wake_queued(tr.run.app, effect.key, effect.limit)
        runs.notify(tr.run)

    def redeliver(self, run: Run, definition: Definition, token: str) -> None:
        """Send the open attempt again, same token and key; a 202-accepted one is left to its
        deadline timer. A push attempt has no deadline until it is sent, so an open one is
        always sent again, and gets a fresh deadline from that send."""
        task = run.task
        if task is None or task.token != token or task.accepted or not run.is_open:
            return
        if task.queue is None and task.deadline is not None and task.deadline <= self.host.clock.now():
            return
        step = definition.step(task.step)
        assert step.timeout_ms is not None
        priority, buckets = machine.flow_of(run, definition, step)
        self.runs.dispatch(run, task, step.push_path(run.workflow), step.timeout_ms, priority, buckets)

    def describe(self, actor: RunActor) -> dict[str, Any]:
        run = actor.state
        task = run.task if run is not None else None
        return {
            "runId": actor.id,
            "app": run.app if run else None,
            "workflow": run.workflow if run else None,
            "status": run.status if run else None,
            "currentStep": run.current_step if run else None,
            "inflight": None
            if task is None
            else {
                "taskToken": task.token,
                "step": task.step,
                "attempt": task.attempt,
                "queue": task.queue,
                "deadline": task.deadline,
                "accepted": task.accepted,
                "pushing": self.host.dispatcher.is_inflight(task.token),
            },
        }
