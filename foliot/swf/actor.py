"""The SWF execution as a kind of actor (`swf`): the pure SWF machine over the generic runtime.

An execution's actor id is `swf:<region>:<runId>` (run ids are unique in a region). `handle`
calls `machine.transition`, commits one `SwfUnit` guarded by the execution's version, then
performs the effects: the timer wheel is synced with `timeouts.deadlines` before and after (the
`ArmDeadline`/`CancelDeadline` effects are exactly that difference), decision and activity
tasks are offered to, or withdrawn from, their task list's long-poll queue (`actors/queues.py`),
and signals, cancel requests and terminations go to the actors of the executions they name.
A firing of deadline `key` arrives as `Fire(key)`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..actors.messages import Envelope
from ..actors.runtime import Actor
from ..errors import StaleWrite, StorageError, UniqueViolation
from ..storage.swf import SWF_ACTOR_PREFIX, SwfExecutionStore, SwfUnit, swf_actor_id
from . import machine
from . import messages as m
from .events import HistoryEvent
from .faults import Fault, unknown
from .model import Execution
from .recovery import owed_effects
from .start import start_failure_cause
from .timeouts import deadlines

if TYPE_CHECKING:
    from ..actors.engine import Engine

log = logging.getLogger("foliot.swf")

KIND: Final = "swf"
_RECOVERY_PAGE: Final = 500
_CHILD_RETRY_S: Final = (0.1, 0.5, 2.0, 5.0)  # backoff while storage refuses a child's start
_PREFIX: Final = SWF_ACTOR_PREFIX
actor_id = swf_actor_id

CatalogSource = Callable[[str, Execution, Any], Awaitable[m.Catalog]]


def parse_actor_id(actor: str) -> tuple[str, str]:
    """(region, run id) of an SWF actor id."""
    region, _, run_id = actor[len(_PREFIX) :].partition(":")
    return region, run_id


def queue_of(region: str, domain: str, kind: str, task_list: str) -> tuple[str, str]:
    """The long-poll queue of one task list: (`swf:<region>:<domain>:<kind>`, task list)."""
    return f"{_PREFIX}{region}:{domain}:{kind}", task_list


def task_token(run_id: str, scheduled_event_id: int) -> str:
    """The queue entry of one pending task (the signed task token is made at the poll)."""
    return f"{run_id}:{scheduled_event_id}"


@attrs.frozen
class Deadline:
    """One armed deadline of an execution, as the timer wheel and the `timers` table hold it."""

    kind: str
    key: str
    due: int


@attrs.frozen
class SwfState:
    """An execution's document, its region, and its stored version (the write guard)."""

    region: str
    execution: Execution
    version: int


# Answers of other executions: no caller waits, and they must not be given up.
_FROM_OTHERS = (
    m.ChildStarted,
    m.ChildStartFailed,
    m.ChildClosed,
    m.ExternalSignaled,
    m.ExternalSignalFailed,
    m.ExternalCancelRequested,
    m.ExternalCancelFailed,
)


def transition_unit(
    region: str, tr: m.Transition, expected_version: int | None
) -> tuple[SwfUnit, m.Transition | None]:
    """The unit of work that commits `tr`, and a continued run's first transition if any
    (ContinueAsNewWorkflowExecution: its insert commits in the same unit)."""
    continued = next((e.start for e in tr.effects if isinstance(e, m.ContinuedAsNew)), None)
    after = None if continued is None else SwfUnit(region, continued.execution, None, continued.events)
    return SwfUnit(region, tr.execution, expected_version, tr.events, after), continued


class SwfKind:
    """`Kind[SwfState]`."""

    name = KIND

    def __init__(self, engine: Engine, store: SwfExecutionStore, catalog: CatalogSource) -> None:
        self.engine = engine
        self.store = store
        self.catalog = catalog  # the types a message may need, looked up before the machine

    async def load(self, actor: str) -> SwfState | None:
        region, run_id = parse_actor_id(actor)
        stored = await self.store.swf_load(region, run_id)
        return None if stored is None else SwfState(region, stored.execution, stored.version)

    def timers(self, state: SwfState) -> Sequence[tuple[str, Deadline]]:
        return [(key, Deadline("deadline", key, due)) for key, due in deadlines(state.execution).items()]

    def firing(self, slot: str, kind: str, key: str) -> m.Fire:
        return m.Fire(key)

    def fired(self, message: Any) -> tuple[str, str] | None:
        return (message.key, message.key) if type(message) is m.Fire else None

    def parked(self, state: SwfState) -> bool:
        return True  # everything in flight is durable: task rows, deadlines, history

    def is_open(self, state: SwfState) -> bool:
        return state.execution.is_open

    def unknown(self, actor: str) -> Fault:
        return unknown(f"Unknown execution: runId={parse_actor_id(actor)[1]}")

    def persistent(self, message: Any) -> bool:
        return isinstance(message, _FROM_OTHERS)

    async def give_up(self, actor: Actor[SwfState], exc: Exception) -> None:
        """A crashing execution is left open for an operator (terminate it); its crash records
        are dropped, so the next message tries again."""

    async def handle(self, actor: Actor[SwfState], envelope: Envelope) -> bool:
        state = actor.state
        assert state is not None
        msg = envelope.message
        ctx = m.Context(
            now=self.engine.clock.now(),
            catalog=await self.catalog(state.region, state.execution, msg),
            new_run_id=self.engine.swf_run_id(),
        )
        tr = machine.transition(state.execution, msg, ctx)
        if isinstance(tr, Fault):
            if envelope.reply is not None:
                envelope.reply.put(tr)
            return False
        unit, continued = transition_unit(state.region, tr, state.version)
        try:
            await self.engine.shielded(partial(self.store.swf_commit, unit))
        except StaleWrite:
            return True
        actor.state = SwfState(state.region, tr.execution, unit.version)
        self.perform(actor.id, state, actor.state, tr)
        if continued is not None:
            self.adopt(state.region, continued)
        if envelope.reply is not None:
            envelope.reply.put(tr, actor.state)
        return False

    def adopt(self, region: str, tr: m.Transition) -> None:
        """An execution just created and committed (a start, a continued run): its actor holds
        the document and its first effects run."""
        state = SwfState(region, tr.execution, 1)
        actor = actor_id(region, tr.execution.run_id)
        self.engine.supervisor.adopt(self, actor, state)
        self.perform(actor, None, state, tr)

    # ------------------------------------------------------------------ effects

    def perform(self, actor: str, before: SwfState | None, after: SwfState, tr: m.Transition) -> None:
        self.engine.timers.sync(
            self.name, actor, () if before is None else self.timers(before), self.timers(after)
        )
        for effect in tr.effects:
            self._effect(after.region, after.execution, effect)

    def _effect(self, region: str, ex: Execution, effect: m.Effect) -> None:
        """Carry out one effect of a committed transition (deadlines are synced apart)."""
        if isinstance(effect, (m.OfferDecisionTask, m.OfferActivityTask)):
            self._offer(region, ex, effect)
        elif isinstance(effect, m.RetireTask):
            self.engine.queues.withdraw(task_token(ex.run_id, effect.scheduled_event_id))
        elif isinstance(effect, (m.DeliverSignal, m.RequestCancelExternal, m.ApplyChildPolicy)):
            self._to_other(region, ex, effect.workflow_id, effect.run_id, effect)
        elif isinstance(effect, m.StartChild):
            self._start_child(region, ex, effect)
        elif isinstance(effect, m.Closed) and effect.parent is not None and effect.notify_parent is not None:
            parent = actor_id(region, effect.parent.run_id)
            self.engine.tell_or_retry(self, parent, Envelope(effect.notify_parent))

    def _start_child(self, region: str, ex: Execution, effect: m.StartChild) -> None:
        """Start a child execution (StartChildWorkflowExecution) and tell the parent how it went:
        `ChildStarted` with the child's run id, or `ChildStartFailed` with SWF's cause. A start
        refused because the workflow id is open is this very child when that open run names
        this parent and initiating event (a retry whose first attempt committed): started."""
        parent = actor_id(region, ex.run_id)
        request = effect.request

        async def attempt() -> Any:
            try:
                started = await self.engine.swf_start(region, request)
            except UniqueViolation:
                found = await self.store.swf_find(region, request.domain, request.workflow_id)
                if found is not None and _child_of(found.execution, ex, effect.initiated_event_id):
                    return m.ChildStarted(effect.initiated_event_id, found.execution.run_id)
                return m.ChildStartFailed(effect.initiated_event_id, "WORKFLOW_ALREADY_RUNNING")
            if isinstance(started, Fault):
                return m.ChildStartFailed(effect.initiated_event_id, start_failure_cause(started))
            return m.ChildStarted(effect.initiated_event_id, started.execution.run_id)

        async def start() -> None:
            delays = iter(_CHILD_RETRY_S)
            while True:
                try:
                    answer = await attempt()
                except StorageError as exc:  # down for now: the parent waits, the start is retried
                    log.warning("SWF: starting a child of %s failed (%s); retrying", ex.run_id, exc)
                    await trio.sleep(next(delays, _CHILD_RETRY_S[-1]))
                    continue
                self.engine.tell_or_retry(self, parent, Envelope(answer))
                return

        self.engine.spawn(start)

    def _offer(self, region: str, ex: Execution, offer: m.OfferDecisionTask | m.OfferActivityTask) -> None:
        kind = "decision" if isinstance(offer, m.OfferDecisionTask) else "activity"
        app, queue = queue_of(region, ex.domain, kind, offer.task_list)
        token = task_token(ex.run_id, offer.scheduled_event_id)
        self.engine.queues.offer(app, queue, token, actor_id(region, ex.run_id))

    async def recover(self) -> int:
        """After a restart, what every open execution is still owed (`recovery.owed_effects`):
        its tasks offered again (the queues are in memory; the document says what is pending),
        children not yet started started, signals and cancel requests not yet answered sent
        again. Returns how many executions are open."""
        after: tuple[str, str] | None = None
        count = 0
        while True:
            page = await self.store.swf_open_executions(after, _RECOVERY_PAGE)
            for stored in page:
                ex = stored.execution
                events: dict[int, HistoryEvent] = {}
                if ex.externals or ex.lambdas or any(c.started_event_id is None for c in ex.children):
                    history = await self.store.swf_events(
                        stored.region, ex.run_id, None, False, ex.last_event_id
                    )
                    events = {e.event_id: e for e in history}
                for effect in owed_effects(ex, events.__getitem__):
                    self._effect(stored.region, ex, effect)
            count += len(page)
            if len(page) < _RECOVERY_PAGE:
                return count
            after = (page[-1].region, page[-1].execution.run_id)

    def _to_other(
        self,
        region: str,
        ex: Execution,
        workflow_id: str,
        run_id: str | None,
        effect: m.DeliverSignal | m.RequestCancelExternal | m.ApplyChildPolicy,
    ) -> None:
        """Find the execution an effect names (its open run when `run_id` is None), then send
        it the message; the sender hears back when it named one (signal or cancel request)."""
        me = actor_id(region, ex.run_id)

        async def deliver() -> None:
            found = await self.store.swf_find(region, ex.domain, workflow_id, run_id)
            target = found.execution if found is not None and found.execution.is_open else None
            if isinstance(effect, m.ApplyChildPolicy):
                if target is not None:
                    cause = "CHILD_POLICY_APPLIED"
                    out: Any = (
                        m.Terminate(cause=cause)
                        if effect.policy == "TERMINATE"
                        else m.RequestCancel(cause=cause)
                    )
                    self.engine.tell_or_retry(self, actor_id(region, target.run_id), Envelope(out))
                return
            if target is None:
                cause = "UNKNOWN_EXTERNAL_WORKFLOW_EXECUTION"
                answer: Any = (
                    m.ExternalSignalFailed(effect.initiated_event_id, cause)
                    if isinstance(effect, m.DeliverSignal)
                    else m.ExternalCancelFailed(effect.initiated_event_id, cause)
                )
                self.engine.tell_or_retry(self, me, Envelope(answer))
                return
            if isinstance(effect, m.DeliverSignal):
                out = m.Signal(
                    effect.signal_name,
                    effect.input,
                    external=ex.ref,
                    external_initiated_event_id=effect.initiated_event_id,
                )
                back: Any = m.ExternalSignaled(effect.initiated_event_id, target.ref)
            else:
                out = m.RequestCancel(
                    external=ex.ref,
                    external_initiated_event_id=effect.initiated_event_id,
                )
                back = m.ExternalCancelRequested(effect.initiated_event_id, target.ref)
            self.engine.tell_or_retry(self, actor_id(region, target.run_id), Envelope(out))
            self.engine.tell_or_retry(self, me, Envelope(back))

        self.engine.spawn(deliver)

    def describe(self, actor: Actor[SwfState]) -> dict[str, Any]:
        state = actor.state
        ex = state.execution if state is not None else None
        return {
            "region": state.region if state is not None else None,
            "domain": ex.domain if ex is not None else None,
            "workflowId": ex.workflow_id if ex is not None else None,
            "runId": ex.run_id if ex is not None else parse_actor_id(actor.id)[1],
            "status": (ex.close_status or "OPEN") if ex is not None else None,
        }


def _child_of(child: Execution, parent: Execution, initiated_event_id: int) -> bool:
    return (
        child.parent is not None
        and child.parent.run_id == parent.run_id
        and child.parent_initiated_event_id == initiated_event_id
    )
