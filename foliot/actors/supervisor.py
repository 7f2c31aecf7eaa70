"""Owns the actors of every kind: spawn, route, rehydrate, passivate, restart.

An actor is data while idle and a task only while it has messages. Routing is synchronous
(`tell`): look up or spawn the actor, append to its mailbox and, if no drain task runs for it,
start one; with no checkpoint in between, a message can never be stranded by an actor leaving
memory. A full mailbox is back-pressure: `tell` says so and the caller retries later; `ask`
(one HTTP request) waits for room up to `FOLIOT_MAILBOX_WAIT_MS`, then is refused with 429.
A drain that raises is restarted from the last checkpoint; past `MAX_CRASHES` in
`CRASH_WINDOW_MS` its kind parks it (a run as `stuck` with class `internal_error`), and the
server goes on. Actors are addressed by (kind, id); ids are unique across kinds, so the map of
live actors is keyed by id and the kind says which adapter spawns one (`runtime.Kind`).

Passivation needs no timer per actor: `actors` is kept in order of last activity, and one
sweeper drops idle parked actors older than `FOLIOT_PASSIVATE_AFTER_MS` from its front; past
`FOLIOT_MAX_LIVE_ACTORS`, the oldest idle parked ones are dropped at once. An actor with queued
messages or a running drain is never dropped.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from ..core.errors import Internal, Unavailable
from .messages import Envelope
from .runtime import Actor, Kind

if TYPE_CHECKING:
    from .host import Host

log = logging.getLogger("foliot.supervisor")

S = TypeVar("S")

MAX_CRASHES = 3
CRASH_WINDOW_MS = 60_000
_SHED_SCAN = 64  # actors looked at, beyond the excess, when shedding past the live cap
_SWEEP_BATCH = 1024  # actors dropped between checkpoints


class Supervisor:
    def __init__(self, host: Host) -> None:
        self.host = host
        # Live actors, least recently active first (each activity moves one to the end).
        self.actors: OrderedDict[str, Actor[Any]] = OrderedDict()
        self.max_crashes = MAX_CRASHES
        self._nursery: trio.Nursery | None = None
        self._crashes: dict[str, list[int]] = {}
        self._wake_sweeper = trio.Event()
        self.spawned = 0
        self.passivated = 0
        self.restarts = 0
        self.draining = 0  # drain tasks running now
        self.closed = False  # shutting down: nothing new is spawned
        self._drain_ended: trio.Event | None = None  # made by `wait_idle`, set when a drain ends

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._sweep)
                task_status.started()
                try:
                    await trio.sleep_forever()
                finally:
                    self.closed = True  # before the nursery stops taking new actors
        finally:
            self.closed = True

    # ------------------------------------------------------------------ routing

    def _actor(self, kind: Kind[S], actor_id: str, state: S | None = None, seed: bool = False) -> Actor[S]:
        actor = self.actors.get(actor_id)
        if actor is None:
            assert self._nursery is not None, "supervisor not started"
            self._shed_load()
            actor = Actor(kind, actor_id, self.host, state)
            if seed:
                actor.seed = state
            if not self.actors:
                self._wake_sweeper.set()
            self.actors[actor_id] = actor
            self.spawned += 1
        else:
            assert actor.kind is kind, f"{actor_id} is a {actor.kind.name} actor, not a {kind.name} one"
        return actor

    def adopt(self, kind: Kind[S], actor_id: str, state: S) -> Actor[S]:
        """A document that was just created: register its actor with the document in hand."""
        return self._actor(kind, actor_id, state)

    def _deliver(self, actor: Actor[Any], envelope: Envelope) -> bool:
        if not actor.offer(envelope):
            return False
        if not actor.draining:
            self._start_drain(actor)
        return True

    def _start_drain(self, actor: Actor[Any]) -> None:
        assert self._nursery is not None
        actor.draining = True
        self.draining += 1
        self._nursery.start_soon(self._drain, actor)

    def tell(self, kind: Kind[Any], actor_id: str, envelope: Envelope) -> bool:
        """Deliver without waiting; False when the mailbox is full (back-pressure).

        While shutting down, messages are dropped: each one is re-created from storage at the
        next start (open tasks are re-delivered, timers fire again), so nothing is lost.
        """
        if self.closed:
            return True
        if not self.host.accepts(actor_id):
            return self.host.elsewhere(kind, actor_id, envelope)
        return self._deliver(self._actor(kind, actor_id), envelope)

    async def ask(self, kind: Kind[S], actor_id: str, envelope: Envelope, state: S | None = None) -> None:
        """Deliver, waiting for mailbox room if needed (only this caller waits), but not past
        `FOLIOT_MAILBOX_WAIT_MS`: then the request is refused (429 `overloaded`, Retry-After).

        `state`, a document the caller just read from storage, seeds the actor if it has to be
        spawned, so a passivated one is not read twice (a stale seed is caught by the guarded
        write and reloaded; one that no commit confirmed is dropped after the message, see
        `Actor.seed`)."""
        wait_s = self.host.settings.mailbox_wait_ms / 1000
        with trio.move_on_after(wait_s):
            while True:
                if self.closed:
                    raise Unavailable("the server is shutting down")
                if not self.host.accepts(actor_id):
                    raise Unavailable(f"{kind.name} {actor_id} is owned by another node now; retry")
                actor = self._actor(kind, actor_id, state, seed=True)
                if self._deliver(actor, envelope):
                    return
                await actor.wait_for_room()  # then look the actor up again: it may have left
        raise self.host.admission.refuse(
            "mailbox",
            f"{kind.name} {actor_id} is busy: its mailbox stayed full for {wait_s:g} s; retry shortly",
        )

    # ------------------------------------------------------------------ lifecycle

    async def _drain(self, actor: Actor[Any]) -> None:
        """One actor's drain task: its queued messages, with restarts from the checkpoint."""
        try:
            while True:
                try:
                    await actor.drain()
                    return
                except Exception as exc:
                    self.restarts += 1
                    log.exception("%s actor %s crashed", actor.kind.name, actor.id)
                    slot = actor.current.reply if actor.current is not None else None
                    if slot is not None and not slot.event.is_set():
                        slot.fail(Internal(f"the {actor.kind.name}'s actor failed; see the server log"))
                    actor.current = None
                    if self._record_crash(actor.id):
                        self._crashes.pop(actor.id, None)
                        try:
                            await actor.kind.give_up(actor, exc)
                        except Exception:
                            log.exception("could not park %s %s; retrying later", actor.kind.name, actor.id)
                            await trio.sleep(1)
                    actor.state = None  # restart from the last checkpoint
        except trio.Cancelled:
            # Shutting down: callers of the messages not handled get 503.
            actor.refuse_pending(Unavailable("the server is shutting down"))
            raise
        finally:
            actor.draining = False
            self.draining -= 1
            self._after_drain(actor)

    async def wait_idle(self, actors: list[Actor[Any]]) -> None:
        """Until none of `actors` has a drain running or a message queued."""
        while any(not actor.idle for actor in actors):
            if self._drain_ended is None:
                self._drain_ended = trio.Event()
            await self._drain_ended.wait()

    def _after_drain(self, actor: Actor[Any]) -> None:
        ended, self._drain_ended = self._drain_ended, None
        if ended is not None:
            ended.set()
        if actor.mailbox:
            # Told while leaving (by a callback of its last message): never stranded.
            if self.closed:
                actor.refuse_pending(Unavailable("the server is shutting down"))
            else:
                self._start_drain(actor)
                return
        if not actor.is_open:
            self._remove(actor)  # closed, not found, or not loadable now: leave memory
            self._forget_old_crashes()
        elif self.actors.get(actor.id) is actor:
            actor.touched = self.host.clock.now()
            self.actors.move_to_end(actor.id)

    def _remove(self, actor: Actor[Any]) -> None:
        if self.actors.get(actor.id) is not actor:
            return
        del self.actors[actor.id]
        self.passivated += 1
        if actor.state is not None and not actor.is_open:
            self._crashes.pop(actor.id, None)

    def drop(self, which: Callable[[str], bool]) -> int:
        """Forget the live actors whose id `which` picks, at once: another node owns them now.
        Callers of their messages not handled get 503; a drain under way finds its actor gone
        (its next commit is fenced). Returns how many left."""
        gone = [actor for actor_id, actor in self.actors.items() if which(actor_id)]
        for actor in gone:
            self.discard(actor)
        return len(gone)

    def discard(self, actor: Actor[Any]) -> None:
        """Forget one actor at once (another node owns it now), refusing what it holds."""
        if self.actors.get(actor.id) is actor:
            del self.actors[actor.id]
            self.passivated += 1
        self._crashes.pop(actor.id, None)
        # The message in hand, if a drain is handling it, is answered by that drain (its
        # commit may still land); the queued ones never reached storage.
        actor.refuse_pending(
            Unavailable(f"{actor.kind.name} {actor.id} moved to another node; retry"),
            keep_current=actor.draining,
        )

    def _droppable(self, actor: Actor[Any]) -> bool:
        return actor.idle and actor.parked

    async def _sweep(self) -> None:
        """Drop idle parked actors whose last activity is older than the passivation delay.

        `actors` is ordered by last activity, so only its front is looked at; an old actor that
        cannot go (a running run, a drain under way) is moved to the back as active now."""
        clock = self.host.clock
        idle_ms = self.host.settings.passivate_after_ms
        while True:
            if not self.actors:
                self._wake_sweeper = trio.Event()
                await self._wake_sweeper.wait()
                continue
            now = clock.now()
            cutoff = now - idle_ms
            for looked in range(1, len(self.actors) + 1):  # each actor at most once a pass
                if not self.actors:
                    break
                actor_id, actor = next(iter(self.actors.items()))
                if actor.touched > cutoff:
                    break
                if self._droppable(actor):
                    self._remove(actor)
                else:
                    actor.touched = now
                    self.actors.move_to_end(actor_id)
                if looked % _SWEEP_BATCH == 0:
                    await trio.lowlevel.checkpoint()
                    now = clock.now()
                    cutoff = now - idle_ms
            self._forget_old_crashes()
            if not self.actors:
                continue
            front = next(iter(self.actors.values()))
            due = max(front.touched + idle_ms, now + 1)
            await trio.sleep_until(clock.trio_deadline(due))

    def _record_crash(self, actor_id: str) -> bool:
        now = self.host.clock.now()
        recent = [t for t in self._crashes.get(actor_id, []) if now - t < CRASH_WINDOW_MS]
        recent.append(now)
        self._crashes[actor_id] = recent
        return len(recent) >= self.max_crashes

    def _forget_old_crashes(self) -> None:
        """Crash records outside the window count for nothing: drop them, so the map holds only
        actors that crashed recently (kept across an actor's exit, so a crash loop through
        passivation and rehydration is still counted)."""
        if not self._crashes:
            return
        now = self.host.clock.now()
        for actor_id in [a for a, times in self._crashes.items() if now - max(times) >= CRASH_WINDOW_MS]:
            del self._crashes[actor_id]

    def _shed_load(self) -> None:
        """Before a spawn past FOLIOT_MAX_LIVE_ACTORS, drop the least recently active idle
        parked actors (looking at a bounded number of them)."""
        excess = len(self.actors) + 1 - self.host.settings.max_live_actors
        if excess <= 0:
            return
        now = self.host.clock.now()
        for _ in range(min(len(self.actors), excess + _SHED_SCAN)):
            if excess <= 0:
                break
            actor_id, actor = next(iter(self.actors.items()))
            if self._droppable(actor):
                self._remove(actor)
                excess -= 1
            else:
                actor.touched = now
                self.actors.move_to_end(actor_id)
