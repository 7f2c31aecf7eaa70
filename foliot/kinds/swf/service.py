"""The SWF kind's entry points: start an execution, ask its actor, long-poll a task list.

The SWF face (`foliot.http.swf` and the write handlers in `writes`) calls these; the
execution's actor (`actor.SwfKind`) does the rest.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from functools import partial
from typing import Any, Protocol

import attrs
import trio

from ...actors.messages import Envelope, ReplySlot
from ...actors.placement import check_local
from ...actors.pull import Pull
from ...actors.queues import Reservation
from ...core.errors import CommitUnknown, Fenced, StorageUnavailable, Unavailable
from ...core.swf import machine as swf_machine
from ...core.swf import messages as swf_messages
from ...core.swf.faults import Fault
from ...storage.swf import SwfUnit, units_of
from ..host import KindHost
from . import catalog as swf_catalog
from .actor import SwfKind, SwfState, actor_id, queue_of


class SwfMeter(Protocol):
    """What the SWF kind counts (`foliot.observe.metrics.Metrics` is one)."""

    def swf_committed(self, events: Iterable[Any], decisions: Iterable[str] = ()) -> None: ...

    def swf_polled(self, kind: str, result: str, seconds: float) -> None: ...


class Swf:
    """SWF executions on one node: the kind the runtime drives, and what the SWF face asks."""

    def __init__(self, host: KindHost, meter: SwfMeter) -> None:
        self.host = host
        self.meter = meter
        self._token_key: bytes | None = None
        self.kind = SwfKind(self, host.store, partial(swf_catalog.for_message, host.store))

    @property
    def pull(self) -> Pull | None:
        """Several nodes: the pull queues across them, else None."""
        return self.host.pull

    def run_id(self, region: str) -> str:
        """A fresh SWF run id: 44 URL-safe characters, as long as AWS's; in a partition this
        node owns, so the execution starts here."""
        return self.host.new_id(lambda: secrets.token_urlsafe(33), partial(actor_id, region))

    def token_key(self) -> bytes:
        """The key SWF task tokens are signed with (stable across restarts: from the vault)."""
        if self._token_key is None:
            self._token_key = self.host.vault.derive_key("swf-task-token")
        return self._token_key

    async def commit(self, unit: SwfUnit) -> None:
        """Commit an SWF unit shielded, fenced by its executions' leases."""
        fences = self.host.fences(*(actor_id(u.region, u.execution.run_id) for u in units_of(unit)))
        if fences is not None:
            unit = attrs.evolve(unit, fences=fences)
        await self.host.shielded(partial(self.host.store.swf_commit, unit))

    def _check_ready(self) -> None:
        if not self.host.ready:
            raise Unavailable("the engine is starting; retry shortly")

    async def start(self, region: str, request: swf_messages.StartRequest) -> swf_messages.Transition | Fault:
        """Start an SWF execution: resolve its type, commit the first transition, adopt its
        actor. `UniqueViolation` when the workflow id is open in the domain."""
        t = request.workflow_type
        catalog = await swf_catalog.lookup(
            self.host.store, region, request.domain, {(t.name, t.version)}, set()
        )
        run_id = self.run_id(region)
        tr = swf_machine.start(request, catalog.workflow_type(t), run_id, self.host.clock.now())
        if isinstance(tr, Fault):
            return tr
        unit = SwfUnit(region, tr.execution, None, tr.events)
        try:
            await self.commit(unit)
        except Fenced as exc:  # the partition moved to another node between the id and the commit
            raise StorageUnavailable("this node no longer owns the new execution's partition") from exc
        except CommitUnknown as exc:  # read back; in doubt, `CommitInDoubt` and resolved later
            if not await self.kind.landed(region, run_id, unit.version, exc):
                raise StorageUnavailable("storage is unavailable; nothing was changed") from exc
        self.kind.adopt(region, tr)
        return tr

    async def ask(
        self, region: str, run_id: str, message: Any
    ) -> tuple[swf_messages.Transition | Fault, SwfState | None]:
        """Send a message to an SWF execution's actor; its transition (or fault) once committed."""
        self._check_ready()
        actor = actor_id(region, run_id)
        check_local(self.host.placement, actor)  # owned elsewhere: the request is forwarded
        slot = ReplySlot()
        await self.host.supervisor.ask(self.kind, actor, Envelope(message, slot))
        reply: swf_messages.Transition | Fault = await slot.wait()
        return reply, slot.value

    async def poll(
        self, region: str, domain: str, kind: str, task_list: str, identity: str | None, wait_until: float
    ) -> tuple[swf_messages.Transition, SwfState] | None:
        """Long-poll an SWF task list: the first pending task whose execution's actor starts
        it (`PollDecision`/`PollActivity` committed), or None once `wait_until` (Trio time)
        passed with no task. As for `Runs.claim_queued`, the queue entry is settled by the
        actor's answer (kept if the actor failed, dropped once started or no longer pending)."""
        self._check_ready()
        app, queue = queue_of(region, domain, kind, task_list)
        waited_from = trio.current_time()
        while True:
            async with self.host.queues.reserve(app, queue, 1, wait_until) as held:
                if not held.offers:
                    self.meter.swf_polled(kind, "empty", trio.current_time() - waited_from)
                    return None
                token, actor = held.offers[0]
                scheduled = int(token.rsplit(":", 1)[1])
                message = (
                    swf_messages.PollDecision(scheduled, identity)
                    if kind == "decision"
                    else swf_messages.PollActivity(scheduled, identity)
                )
                slot = ReplySlot(on_settle=partial(_settle_swf_claim, held, token))
                await self.host.supervisor.ask(self.kind, actor, Envelope(message, slot))
                held.hand_over(token)
                await slot.event.wait()
            if slot.error is not None:
                raise slot.error
            if isinstance(slot.reply, swf_messages.Transition):
                self.meter.swf_polled(kind, "task", trio.current_time() - waited_from)
                return slot.reply, slot.value
            # No longer pending (timed out, canceled, the execution closed): wait for the next.


def _settle_swf_claim(held: Reservation, token: str, slot: ReplySlot) -> None:
    """An SWF task's start answered: drop the entry once started or gone, else put it back."""
    if slot.error is not None:
        held.settle(token, claimed=False)
    else:
        held.settle(token, claimed=isinstance(slot.reply, swf_messages.Transition), gone=True)
