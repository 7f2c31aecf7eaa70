"""Owns the run actors: spawn, route, rehydrate, passivate, restart.

Routing is synchronous (`tell`): look up or spawn the actor and `send_nowait` into its mailbox,
with no checkpoint in between, so an actor that decides to passivate can never strand a
message. A full mailbox is back-pressure: `tell` says so and the caller retries later; `ask`
(one HTTP request) waits for room up to `FOLIOT_MAILBOX_WAIT_MS`, then is refused with 429.
An actor that raises is restarted from its last checkpoint; past `MAX_CRASHES` in
`CRASH_WINDOW_MS` its run is parked as `stuck` with class `internal_error`, and the server
goes on.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from ..errors import Internal, Unavailable
from ..storage.base import UnitOfWork
from ..workflow import machine
from ..workflow.model import Run
from .messages import Envelope
from .run_actor import RunActor

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("foliot.supervisor")

MAX_CRASHES = 3
CRASH_WINDOW_MS = 60_000


class Supervisor:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.actors: dict[str, RunActor] = {}
        self._nursery: trio.Nursery | None = None
        self._crashes: dict[str, list[int]] = {}
        self.spawned = 0
        self.passivated = 0
        self.restarts = 0
        self.closed = False  # shutting down: nothing new is spawned

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                try:
                    await trio.sleep_forever()
                finally:
                    self.closed = True  # before the nursery stops taking new actors
        finally:
            self.closed = True

    # ------------------------------------------------------------------ routing

    def _actor(self, run_id: str, run: Run | None = None) -> RunActor:
        actor = self.actors.get(run_id)
        if actor is None:
            assert self._nursery is not None, "supervisor not started"
            actor = RunActor(run_id, self.engine, run)
            self.actors[run_id] = actor
            self.spawned += 1
            self._nursery.start_soon(self._supervise, actor)
            self._shed_load()
        return actor

    def adopt(self, run: Run) -> RunActor:
        """A run that was just created: start its actor with the document in hand."""
        return self._actor(run.run_id, run)

    def tell(self, run_id: str, envelope: Envelope) -> bool:
        """Deliver without waiting; False when the mailbox is full (back-pressure).

        While shutting down, messages are dropped: each one is re-created from storage at the
        next start (open tasks are re-delivered, timers fire again), so nothing is lost.
        """
        if self.closed:
            return True
        actor = self._actor(run_id)
        try:
            actor.send.send_nowait(envelope)
        except trio.WouldBlock:
            return False
        return True

    async def ask(self, run_id: str, envelope: Envelope, run: Run | None = None) -> None:
        """Deliver, waiting for mailbox room if needed (only this caller waits), but not past
        `FOLIOT_MAILBOX_WAIT_MS`: then the request is refused (429 `overloaded`, Retry-After).

        `run`, a document the caller just read from storage, seeds the actor if it has to be
        spawned, so a passivated run is not read twice (a stale seed is caught by the guarded
        write and reloaded)."""
        wait_s = self.engine.settings.mailbox_wait_ms / 1000
        with trio.move_on_after(wait_s):
            while True:
                if self.closed:
                    raise Unavailable("the server is shutting down")
                actor = self._actor(run_id, run)
                try:
                    actor.send.send_nowait(envelope)
                    return
                except trio.WouldBlock:
                    pass
                try:
                    await actor.send.send(envelope)
                    return
                except trio.ClosedResourceError:
                    continue  # it passivated while we waited: spawn afresh
        raise self.engine.admission.refuse(
            "mailbox", f"run {run_id} is busy: its mailbox stayed full for {wait_s:g} s; retry shortly"
        )

    # ------------------------------------------------------------------ lifecycle

    async def _supervise(self, actor: RunActor) -> None:
        cancelled = False
        try:
            while True:
                try:
                    await actor.main()
                    return
                except trio.Cancelled:
                    cancelled = True
                    raise
                except Exception as exc:
                    self.restarts += 1
                    log.exception("run actor %s crashed", actor.run_id)
                    slot = actor.current.reply if actor.current is not None else None
                    if slot is not None and not slot.event.is_set():
                        slot.fail(Internal("the run's actor failed; see the server log"))
                    actor.current = None
                    if self._record_crash(actor.run_id):
                        try:
                            await self._give_up(actor, exc)
                        except Exception:
                            log.exception("could not park run %s as stuck; retrying later", actor.run_id)
                            await trio.sleep(1)
                    actor.run = None  # restart from the last checkpoint
        finally:
            if self.actors.get(actor.run_id) is actor:
                del self.actors[actor.run_id]
            if actor.run is not None and not actor.run.is_open:
                self._crashes.pop(actor.run_id, None)
            self._forget_old_crashes()
            self._strand_check(actor, shutting_down=cancelled)
            self.passivated += 1
            actor.send.close()

    def _strand_check(self, actor: RunActor, *, shutting_down: bool) -> None:
        """Messages that raced with the exit go to a fresh actor, never dropped.

        At shutdown they are refused instead (callers get 503); what they would have done is
        re-created from storage at the next start.
        """
        while True:
            try:
                envelope = actor.receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            if shutting_down or self.closed:
                if envelope.reply is not None:
                    envelope.reply.fail(Unavailable("the server is shutting down"))
                continue
            self.tell(actor.run_id, envelope)

    def _record_crash(self, run_id: str) -> bool:
        now = self.engine.clock.now()
        recent = [t for t in self._crashes.get(run_id, []) if now - t < CRASH_WINDOW_MS]
        recent.append(now)
        self._crashes[run_id] = recent
        return len(recent) >= MAX_CRASHES

    def _forget_old_crashes(self) -> None:
        """Crash records outside the window count for nothing: drop them, so the map holds only
        runs that crashed recently (kept across an actor's exit, so a crash loop through
        passivation and rehydration is still counted)."""
        if not self._crashes:
            return
        now = self.engine.clock.now()
        for run_id in [r for r, times in self._crashes.items() if now - max(times) >= CRASH_WINDOW_MS]:
            del self._crashes[run_id]

    async def _give_up(self, actor: RunActor, exc: Exception) -> None:
        """Park the run as stuck (internal_error) so an operator can look; never loop forever."""
        self._crashes.pop(actor.run_id, None)
        run = await self.engine.store.get_run(actor.run_id)
        if run is None or not run.is_open:
            return
        definition = await self.engine.definition(run.app, run.workflow, run.version)
        message = f"the run's actor crashed {MAX_CRASHES} times: {type(exc).__name__}"
        tr = machine.mark_stuck(run, definition, "internal_error", message, self.engine.context())
        await self.engine.commit(UnitOfWork(tr.run, run.seq, tr.events, tr.tasks))
        actor.run = tr.run
        actor.perform(tr)

    def _shed_load(self) -> None:
        """Past FOLIOT_MAX_LIVE_ACTORS, ask the oldest parked actors to passivate."""
        excess = len(self.actors) - self.engine.settings.max_live_actors
        if excess <= 0:
            return
        for actor in list(self.actors.values()):
            if excess <= 0:
                break
            if actor.parked and actor.mailbox_depth == 0 and not actor.stop_requested:
                actor.request_passivation()
                excess -= 1
