"""One actor runtime for every kind of durable document driven by a pure machine.

A Foliot run and an SWF execution are both a document, a pure step function and effects
performed after the commit. The runtime here is the part they share: an `Actor` (mailbox,
drain, reload after a stale write, the storage-failure path, settling timer firings with the
wheel); the supervisor (spawn, route, passivate, restart) and the timer wheel address actors
by (kind, id). A `Kind` adapts one pure machine to it: how a document is loaded, how one
message becomes a transition, a commit and effects, which timers a document holds, and when an
actor may leave memory.

Actor ids are unique across kinds (run ids start with `run_`, SWF execution ids with `swf:`),
so the supervisor's map and the `timers` table are keyed by id alone; the kind says which
adapter spawns and drives an actor, and which message a due timer becomes.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import attrs
import trio

from ..core.errors import Fenced, StaleWrite, StorageError, Unavailable, storage_refusal
from .messages import Envelope

if TYPE_CHECKING:
    from .host import Host

log = logging.getLogger("foliot.actor")

S = TypeVar("S")

_MAX_REDELIVERIES = 30
_MAX_STALE_RELOADS = 3  # StaleWrites in a row for one message before it counts as a storage failure


class Arming(Protocol):
    """One durable timer a document holds: what it is for, the key of this arming, when due."""

    @property
    def kind(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def due(self) -> int: ...


class Kind(Protocol[S]):
    """What the runtime needs from one kind of actor: a pure machine and its effects."""

    name: str  # "run" | "swf": the actor's kind, stored with its timer rows

    async def load(self, actor_id: str) -> S | None:
        """The document from storage (rehydration); None when there is none."""

    async def handle(self, actor: Actor[S], envelope: Envelope) -> bool:
        """Transition, commit (guarded by the document's version), perform the effects, reply.
        True when the commit met a StaleWrite: the runtime reloads the document and retries."""

    def timers(self, state: S) -> Sequence[tuple[str, Arming]]:
        """(slot, arming) for every timer the document needs armed; derived, never stored apart."""

    def firing(self, slot: str, kind: str, key: str) -> Any:
        """The message a due timer delivers to its actor."""

    def fired(self, message: Any) -> tuple[str, str] | None:
        """(slot, key) when `message` is a timer firing, else None."""

    def parked(self, state: S) -> bool:
        """Nothing in flight that needs the actor in memory: it may be passivated."""

    def is_open(self, state: S) -> bool: ...

    def unknown(self, actor_id: str) -> Any:
        """The reply to a caller whose actor has no document."""

    def persistent(self, message: Any) -> bool:
        """A message with no caller that is retried after storage failures without limit."""

    async def give_up(self, actor: Actor[S], exc: Exception) -> None:
        """The actor keeps crashing: park its document where an operator can look."""

    def describe(self, actor: Actor[S]) -> dict[str, Any]: ...


class Actor(Generic[S]):
    """An actor: data while idle, a task only while it has messages.

    The supervisor appends to `mailbox` (a deque made on the first message, dropped once
    drained) and starts one drain task when `draining` is false; the drain handles messages
    one at a time and ends when the mailbox is empty. An idle parked actor is therefore a
    slotted object and its document, with no task, channel or cancel scope.
    """

    __slots__ = (
        "current",
        "draining",
        "host",
        "id",
        "kind",
        "last_message_at",
        "live_since",
        "mailbox",
        "processed",
        "room",
        "seed",
        "state",
        "touched",
    )

    def __init__(self, kind: Kind[S], actor_id: str, host: Host, state: S | None = None) -> None:
        self.kind = kind
        self.id = actor_id
        self.host = host
        self.state = state
        self.mailbox: deque[Envelope] | None = None
        self.room: trio.Event | None = None  # made by a caller waiting for mailbox room
        self.draining = False  # a drain task is running for this actor
        self.live_since = host.clock.now()
        self.touched = self.live_since  # last activity: the supervisor's passivation order
        self.last_message_at: int | None = None
        self.current: Envelope | None = None
        self.processed = 0
        # A caller's copy of the document the actor was spawned with (`Supervisor.ask`): only a
        # commit (the guarded write) or a load confirms it is the stored one. Kept after its
        # message only if one did; else the next message reads the document again, so a stale
        # copy never decides anything the store does not check (a timer firing found stale).
        self.seed: S | None = None

    @property
    def mailbox_depth(self) -> int:
        return len(self.mailbox) if self.mailbox is not None else 0

    @property
    def parked(self) -> bool:
        state = self.state
        return state is None or self.kind.parked(state)

    @property
    def is_open(self) -> bool:
        state = self.state
        return state is not None and self.kind.is_open(state)

    @property
    def idle(self) -> bool:
        """No drain running and nothing queued: the actor may be dropped from memory."""
        return not self.draining and not self.mailbox

    def offer(self, envelope: Envelope) -> bool:
        """Queue a message; False when the mailbox is full (back-pressure)."""
        mailbox = self.mailbox
        if mailbox is None:
            mailbox = self.mailbox = deque()
        elif len(mailbox) >= self.host.settings.mailbox_size:
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
            if self.state is None:
                try:
                    self.state = await self.kind.load(self.id)
                except StorageError as exc:
                    # Cannot rehydrate now: answer or re-schedule what waits, and leave quietly.
                    self._drain_after_storage_failure(exc)
                    return
                if not self.mailbox:
                    break  # dropped while it loaded (its partition left): refused, nothing to do
            envelope = self.mailbox.popleft()
            self._wake_waiters()
            self.current = envelope
            await self._handle_settled(envelope)
            self.current = None
            self.processed += 1
            if self.seed is not None:
                if self.state is self.seed:
                    self.state = None  # no commit confirmed the caller's copy: read it again
                self.seed = None
        self.mailbox = None

    async def _handle_settled(self, envelope: Envelope) -> None:
        """`handle`; a timer firing is then settled with the wheel, which holds it in flight
        until told: done once the document no longer holds that arming (applied or stale),
        else (storage failed, a crash) handed out again after a backoff."""
        fired = self.kind.fired(envelope.message)
        try:
            await self.handle(envelope)
        finally:
            if fired is not None:
                self._settle(*fired)

    def _settle(self, slot: str, key: str) -> None:
        """Done with a firing: applied or stale when the document no longer holds that arming;
        not applied (handed out again after a backoff) when it still holds it as due; and when
        it holds it due later (an SWF heartbeat moved a deadline without a new key), re-armed
        for then."""
        timers = self.host.timers
        state = self.state
        held = None
        if state is not None:
            held = next((t for s, t in self.kind.timers(state) if s == slot and t.key == key), None)
        if held is None:
            timers.settle(self.id, slot, key, applied=True)
        elif held.due > self.host.clock.now():
            timers.settle(self.id, slot, key, applied=True)
            timers.sync(self.kind.name, self.id, (), ((slot, held),))
        else:
            timers.settle(self.id, slot, key, applied=False)

    async def handle(self, envelope: Envelope) -> None:
        """Handle one message; every storage failure on the way (a lookup, reloading after a
        StaleWrite, the commit) takes the one storage-failure path."""
        self.last_message_at = self.host.clock.now()
        for _ in range(_MAX_STALE_RELOADS):
            try:
                if self.state is None:
                    if envelope.reply is not None:
                        envelope.reply.put(self.kind.unknown(self.id))
                    return
                if not await self.kind.handle(self, envelope):
                    return
                # Someone else moved the document (another node, a stale seed): reload, retry.
                self.state = await self.kind.load(self.id)
            except Fenced as exc:
                # Another node owns this actor now: nothing was written; act on nothing more.
                log.info("%s %s: fenced (%s); leaving this node", self.kind.name, self.id, exc)
                self.state = None
                if envelope.reply is not None:
                    envelope.reply.fail(Unavailable(f"{self.kind.name} {self.id} moved to another node"))
                self.host.supervisor.discard(self)
                return
            except StorageError as exc:
                self._storage_failed(envelope, exc)
                return
        self._storage_failed(envelope, StaleWrite(f"the document moved under us {_MAX_STALE_RELOADS} times"))

    def _storage_failed(self, envelope: Envelope, exc: StorageError) -> None:
        log.warning("%s %s: storage failed (%s)", self.kind.name, self.id, exc)
        if envelope.reply is not None:
            envelope.reply.fail(storage_refusal(exc))
            return
        fired = self.kind.fired(envelope.message)
        if fired is not None:
            # The wheel owns a firing until it is settled; it hands it out again after a backoff.
            self.host.timers.settle(self.id, fired[0], fired[1], applied=False)
            return
        # No caller to tell: try again later, as the message still holds.
        if envelope.attempts < _MAX_REDELIVERIES or self.kind.persistent(envelope.message):
            delay = min(0.2 * 2 ** min(envelope.attempts, 5), 5.0)
            retry = attrs.evolve(envelope, attempts=envelope.attempts + 1)
            self.host.later(delay, self.kind, self.id, retry)

    def _drain_after_storage_failure(self, exc: StorageError) -> None:
        mailbox, self.mailbox = self.mailbox, None
        self._wake_waiters()
        while mailbox:
            self._storage_failed(mailbox.popleft(), exc)

    def refuse_pending(self, error: BaseException, *, keep_current: bool = False) -> None:
        """Shutdown: fail the message in hand and every queued one (callers get `error`); what
        they would have done is re-created from storage at the next start.

        `keep_current`: the actor leaves while its drain still runs (its partition left this
        node): the message in hand may be in the middle of its commit, which can still land,
        so its caller waits for the drain's own answer (the commit's, or `Fenced`'s 503)
        rather than being told now that nothing was changed."""
        current = self.current
        if not keep_current:
            self.current = None
        if (
            current is not None
            and not keep_current
            and current.reply is not None
            and not current.reply.event.is_set()
        ):
            current.reply.fail(error)
        mailbox, self.mailbox = self.mailbox, None
        self._wake_waiters()
        while mailbox:
            envelope = mailbox.popleft()
            if envelope.reply is not None:
                envelope.reply.fail(error)

    def describe(self) -> dict[str, Any]:
        """What /admin/actors and the console show: the runtime's view, then the kind's."""
        return {
            "kind": self.kind.name,
            "id": self.id,
            "mailboxDepth": self.mailbox_depth,
            "liveSince": self.live_since,
            "lastMessageAt": self.last_message_at,
            "processed": self.processed,
            **self.kind.describe(self),
        }
