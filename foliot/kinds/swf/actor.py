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

from ...actors.dispatcher import Call
from ...actors.messages import Envelope, ReplySlot, Resolve
from ...actors.pushclient import PushError, post
from ...actors.runtime import Actor
from ...core.errors import (
    CommitInDoubt,
    CommitUnknown,
    Fenced,
    Refused,
    StaleWrite,
    StorageError,
    Unavailable,
    UniqueViolation,
)
from ...core.swf import lambdas, machine
from ...core.swf import messages as m
from ...core.swf.events import HistoryEvent
from ...core.swf.faults import Fault, unknown
from ...core.swf.history import pending_offers
from ...core.swf.model import Execution
from ...core.swf.recovery import owed_effects, owes
from ...core.swf.start import start_failure_cause
from ...core.swf.timeouts import LAMBDA_DEFAULT_START_TO_CLOSE, deadlines, parse_seconds
from ...core.workflow.duration import format_timestamp
from ...core.workflow.flow import swf_level
from ...storage.swf import (
    SWF_ACTOR_PREFIX,
    SwfExecutionStore,
    SwfParked,
    SwfStored,
    SwfUnit,
    swf_actor_id,
)
from ..readback import read_back

if TYPE_CHECKING:
    from .service import Swf

log = logging.getLogger("foliot.swf")

KIND: Final = "swf"
_RECOVERY_PAGE: Final = 500
_RESOLVE_AFTER_S: Final = 1.0  # a commit in doubt: the execution is read again this soon
_CHILD_RETRY_S: Final = (0.1, 0.5, 2.0, 5.0)  # backoff while storage refuses a child's start
_ASK_ATTEMPTS: Final = 30  # an owed message not answered after this many tries waits for a restart
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
    parked: str | None = None  # why, when an operator must resume it (`SwfKind.give_up`)


# Answers of other executions: no caller waits, and they must not be given up.
_FROM_OTHERS = (
    m.ChildStarted,
    m.ChildStartFailed,
    m.ChildClosed,
    m.ExternalSignaled,
    m.ExternalSignalFailed,
    m.ExternalCancelRequested,
    m.ExternalCancelFailed,
    m.LambdaCompleted,
    m.LambdaFailed,
)


def transition_unit(
    region: str, tr: m.Transition, expected_version: int | None
) -> tuple[SwfUnit, m.Transition | None]:
    """The unit of work that commits `tr`, and a continued run's first transition if any
    (ContinueAsNewWorkflowExecution: its insert commits in the same unit)."""
    continued = next((e.start for e in tr.effects if isinstance(e, m.ContinuedAsNew)), None)
    after = None if continued is None else SwfUnit(region, continued.execution, None, continued.events)
    unit = SwfUnit(region, tr.execution, expected_version, tr.events, after, owes(tr.effects))
    return unit, continued


class SwfKind:
    """`Kind[SwfState]`."""

    name = KIND

    def __init__(self, swf: Swf, store: SwfExecutionStore, catalog: CatalogSource) -> None:
        self.swf = swf
        self.host = swf.host
        self.store = store
        self.catalog = catalog  # the types a message may need, looked up before the machine
        self._doubts: dict[str, int] = {}  # actor id -> the version of its commit in doubt

    async def load(self, actor: str) -> SwfState | None:
        region, run_id = parse_actor_id(actor)
        stored = await self.store.swf_load(region, run_id)
        if stored is None:
            self._doubts.pop(actor, None)
            return None
        parked = await self.store.swf_get_parked(region, run_id) if stored.execution.is_open else None
        state = SwfState(region, stored.execution, stored.version, None if parked is None else parked.reason)
        doubt = self._doubts.get(actor)
        if doubt is not None:
            if stored.version == doubt:
                # The commit in doubt landed: its deadlines and effects are owed, before
                # anything else (offers are once per token; what it owes others is re-derived
                # from the document, as a restart's recovery does).
                self.host.timers.sync(self.name, actor, (), self.timers(state))
                if state.parked is None:
                    await self._recover_one(stored)
            del self._doubts[actor]
        return state

    def timers(self, state: SwfState) -> Sequence[tuple[str, Deadline]]:
        if state.parked is not None:
            return []  # a parked execution's deadlines wait in storage until it is resumed
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
        return isinstance(message, _FROM_OTHERS) or type(message) is Resolve

    async def give_up(self, actor: Actor[SwfState], exc: Exception) -> None:
        """The execution's actor crashed `MAX_CRASHES` times: park it (an `swf_parked` row, listed
        by `GET /admin/swf/parked`) rather than crash forever. A parked execution stays open
        and loses nothing: its tasks leave the task lists, its deadlines wait in storage, every
        message but a termination is refused (`ServiceUnavailable`) or dropped (answers of
        other executions are re-derived when it is resumed). An operator resumes it
        (`POST /admin/swf/parked/{region}/{runId}/resume`) or terminates it."""
        region, run_id = parse_actor_id(actor.id)
        stored = await self.store.swf_load(region, run_id)
        if stored is None or not stored.execution.is_open:
            return
        reason = (
            f"the execution's actor crashed {self.host.supervisor.max_crashes} times: {type(exc).__name__}"
        )
        await self.store.swf_park(SwfParked(region, run_id, reason[:1000], self.host.clock.now()))
        log.error("SWF execution %s parked: %s", actor.id, reason)
        before = SwfState(region, stored.execution, stored.version)
        self.host.timers.sync(self.name, actor.id, self.timers(before), ())
        for offer in pending_offers(stored.execution):
            self.host.queues.withdraw(task_token(run_id, offer.scheduled_event_id))

    async def resume(self, region: str, run_id: str) -> bool:
        """An operator's resume of a parked execution: it is loaded afresh, its deadlines armed
        and what it is owed performed, as after a restart. False when it was not parked."""
        if not await self.store.swf_unpark(region, run_id):
            return False
        actor = self.host.supervisor.actors.get(actor_id(region, run_id))
        if actor is not None and actor.state is not None:
            actor.state = None  # reloaded by its next message
        stored = await self.store.swf_load(region, run_id)
        if stored is not None and stored.execution.is_open:
            state = SwfState(region, stored.execution, stored.version)
            self.host.timers.sync(self.name, actor_id(region, run_id), (), self.timers(state))
            await self._recover_one(stored)
        return True

    async def handle(self, actor: Actor[SwfState], envelope: Envelope) -> bool:
        state = actor.state
        assert state is not None
        msg = envelope.message
        if actor.id in self._doubts:
            return True  # a commit in doubt: the execution is read again first (`load`)
        if type(msg) is Resolve:
            return False  # read again already
        if state.parked is not None and not isinstance(msg, m.Terminate):
            if envelope.reply is not None:
                envelope.reply.fail(
                    Unavailable(f"this SWF execution is parked ({state.parked}); an operator must resume it")
                )
            return False
        ctx = m.Context(
            now=self.host.clock.now(),
            catalog=await self.catalog(state.region, state.execution, msg),
            new_run_id=self.swf.run_id(state.region),
        )
        tr = machine.transition(state.execution, msg, ctx)
        if isinstance(tr, Fault):
            if envelope.reply is not None:
                envelope.reply.put(tr)
            return False
        unit, continued = transition_unit(state.region, tr, state.version)
        try:
            await self.swf.commit(unit)
        except Fenced:
            raise  # another node owns the execution now: the runtime drops the actor
        except StaleWrite:
            return True
        except CommitUnknown as exc:
            if not await self.landed(state.region, tr.execution.run_id, unit.version, exc):
                raise  # not applied: nothing changed
        actor.state = SwfState(state.region, tr.execution, unit.version)
        decided = msg.decisions if isinstance(msg, m.CompleteDecision) and msg.decisions else ()
        self.swf.meter.swf_committed(tr.events, (d.get("decisionType", "") for d in decided))
        if state.parked is not None:  # terminated by an operator: nothing to resume any more
            await self.store.swf_unpark(state.region, tr.execution.run_id)
        self.perform(actor.id, state, actor.state, tr)
        if continued is not None:
            self.adopt(state.region, continued)
        if envelope.reply is not None:
            envelope.reply.put(tr, actor.state)
        return False

    async def landed(self, region: str, run_id: str, version: int, error: CommitUnknown) -> bool:
        """After a commit whose answer was lost: the execution read back. True, it landed (go
        on as committed: effects and answer); False, it did not (the error stands: nothing was
        changed). Unreadable, or the database perhaps still applying it (`error.settled`
        false): `CommitInDoubt` (the caller is told the change may have been made) and the
        actor reads the execution again before it does anything else (`load`, through a
        `Resolve` within a second if no other message comes), performing the commit's
        deadlines and effects then if it landed."""
        read, stored = await read_back(lambda: self.store.swf_load(region, run_id), error)
        if read:
            # One writer per execution (its actor), and every commit moves the version.
            return stored is not None and stored.version == version
        actor = actor_id(region, run_id)
        self._doubts[actor] = version
        self.host.later(_RESOLVE_AFTER_S, self, actor, Envelope(Resolve()))
        raise CommitInDoubt()

    def adopt(self, region: str, tr: m.Transition) -> None:
        """An execution just created and committed (a start, a continued run): its actor holds
        the document and its first effects run."""
        state = SwfState(region, tr.execution, 1)
        actor = actor_id(region, tr.execution.run_id)
        self.swf.meter.swf_committed(tr.events)
        if self.host.accepts(actor):  # else its partition left during the commit: see `perform`
            self.host.supervisor.adopt(self, actor, state)
        self.perform(actor, None, state, tr)

    # ------------------------------------------------------------------ effects

    def perform(self, actor: str, before: SwfState | None, after: SwfState, tr: m.Transition) -> None:
        """After the commit: deadlines and effects. A commit that was under way when the
        execution's partition left this node (it was fenced in time) arms no deadline here and
        offers or invokes nothing: the next owner recovers those from storage (as for runs,
        `RunKind.perform`); what it owes other executions still goes out."""
        if not self.host.accepts(actor):
            lasting = (m.OfferDecisionTask, m.OfferActivityTask, m.InvokeLambda)
            self._effects(
                after.region, after.execution, [e for e in tr.effects if not isinstance(e, lasting)]
            )
            return
        self.host.timers.sync(
            self.name, actor, () if before is None else self.timers(before), self.timers(after)
        )
        self._effects(after.region, after.execution, tr.effects)

    def _effects(self, region: str, ex: Execution, effects: Sequence[m.Effect]) -> None:
        """Carry out the effects of a committed transition (deadlines are synced apart). What a
        close owes other executions goes out together and is acknowledged (`_settle_close`)."""
        owed: list[m.ApplyChildPolicy | m.Closed] = []
        for effect in effects:
            if isinstance(effect, (m.OfferDecisionTask, m.OfferActivityTask)):
                self._offer(region, ex, effect)
            elif isinstance(effect, m.RetireTask):
                self.host.queues.withdraw(task_token(ex.run_id, effect.scheduled_event_id))
            elif isinstance(effect, (m.DeliverSignal, m.RequestCancelExternal)):
                self._to_other(region, ex, effect.workflow_id, effect.run_id, effect)
            elif isinstance(effect, m.StartChild):
                self._start_child(region, ex, effect)
            elif isinstance(effect, m.InvokeLambda):
                self._invoke_lambda(region, ex, effect)
            elif isinstance(effect, m.ApplyChildPolicy) or (
                isinstance(effect, m.Closed)
                and effect.parent is not None
                and effect.notify_parent is not None
            ):
                owed.append(effect)
        if owed:
            self.host.spawn(partial(self._settle_close, region, ex, owed))

    async def _settle_close(
        self, region: str, ex: Execution, owed: list[m.ApplyChildPolicy | m.Closed]
    ) -> None:
        """Apply the child policy to each open child and tell the parent, waiting for each
        receiver's answer (committed, or refused because it is closed); then forget the
        `swf_owed` row. Until then a restart performs them again (at-least-once)."""
        results: list[bool] = []

        async def one(effect: m.ApplyChildPolicy | m.Closed) -> None:
            if isinstance(effect, m.ApplyChildPolicy):
                found = await self._retrying(
                    partial(self.store.swf_find, region, ex.domain, effect.workflow_id, effect.run_id)
                )
                if found is None or not found.execution.is_open:
                    results.append(True)
                    return
                cause = "CHILD_POLICY_APPLIED"
                out: Any = (
                    m.Terminate(cause=cause) if effect.policy == "TERMINATE" else m.RequestCancel(cause=cause)
                )
                results.append(await self._answered(actor_id(region, found.execution.run_id), out))
            else:
                assert effect.parent is not None
                results.append(
                    await self._answered(actor_id(region, effect.parent.run_id), effect.notify_parent)
                )

        async with trio.open_nursery() as nursery:
            for effect in owed:
                nursery.start_soon(one, effect)
        if all(results):
            await self._retrying(partial(self.store.swf_settle_owed, region, ex.run_id))

    async def _answered(self, actor: str, message: Any) -> bool:
        """Send `message` to an execution's actor until it answers (a transition or a fault:
        either way it was handled); False after `_ASK_ATTEMPTS` refusals (busy, storage down,
        crashing): the `swf_owed` row stays for the next start."""
        for attempt in range(_ASK_ATTEMPTS):
            slot = ReplySlot()
            try:
                await self.host.supervisor.ask(self, actor, Envelope(message, slot))
                await slot.wait()
                return True
            except Refused as exc:
                log.warning("SWF: %s did not take %s (%s); retrying", actor, type(message).__name__, exc)
                await trio.sleep(_CHILD_RETRY_S[min(attempt, len(_CHILD_RETRY_S) - 1)])
        return False

    @staticmethod
    async def _retrying(read: Callable[[], Awaitable[Any]]) -> Any:
        """A storage call, retried with backoff while storage is down."""
        delays = iter(_CHILD_RETRY_S)
        while True:
            try:
                return await read()
            except StorageError as exc:
                log.warning("SWF: storage failed (%s); retrying", exc)
                await trio.sleep(next(delays, _CHILD_RETRY_S[-1]))

    # ------------------------------------------------------------------ Lambda functions

    def _invoke_lambda(self, region: str, ex: Execution, effect: m.InvokeLambda) -> None:
        """Record `LambdaFunctionStarted` (the function is invoked only once that committed),
        then queue the call with the dispatcher's senders (`_call_lambda`)."""
        me = actor_id(region, ex.run_id)
        scheduled = effect.scheduled_event_id

        async def start() -> None:
            started_at = effect.started_at
            if started_at is None:
                slot = ReplySlot()
                try:
                    await self.host.supervisor.ask(self, me, Envelope(m.LambdaStarted(scheduled), slot))
                    tr = await slot.wait()
                except Refused as exc:  # the call stays owed: performed at the next start
                    log.warning("SWF: could not start Lambda %s of %s (%s)", effect.name, ex.run_id, exc)
                    return
                fn = tr.execution.lambda_call(scheduled) if isinstance(tr, m.Transition) else None
                if fn is None or fn.started_at is None:
                    return  # started already, or no longer open
                started_at = fn.started_at
            self.host.dispatcher.call(
                Call(
                    f"swf-lambda:{region}",
                    f"swf-lambda:{region}:{ex.run_id}:{scheduled}",
                    partial(self._call_lambda, region, ex, effect, started_at),
                    me,
                )
            )

        self.host.spawn(start)

    async def _call_lambda(self, region: str, ex: Execution, effect: m.InvokeLambda, started_at: int) -> None:
        """POST the input to the function's URL within what is left of its start-to-close
        timeout and tell the execution the outcome (`lambdas.outcome`); past the timeout the
        call is dropped and the deadline records `LambdaFunctionTimedOut`."""
        host = self.host
        scheduled = effect.scheduled_event_id
        seconds = parse_seconds(effect.start_to_close_timeout) or int(LAMBDA_DEFAULT_START_TO_CLOSE)
        due = started_at + seconds * 1000
        with trio.move_on_after(max(0, due - host.clock.now()) / 1000):
            name = lambdas.function_name(effect.name)
            function = await self._retrying(partial(self.store.swf_get_lambda, region, name))
            answer: m.LambdaCompleted | m.LambdaFailed
            if function is None:
                answer = lambdas.not_found(scheduled, region, name)
            else:
                headers = {
                    "content-type": "application/json",
                    "user-agent": "foliot",
                    "foliot-idempotency-key": f"swf:{region}:{ex.run_id}:{scheduled}",
                    "foliot-deadline": format_timestamp(due) or "",
                }
                try:
                    got = await post(
                        host.http,
                        function.url,
                        effect.input.encode(),
                        headers,
                        host.settings.body_max_bytes,
                    )
                except PushError as exc:
                    answer = lambdas.unreachable(scheduled, str(exc))
                else:
                    answer = lambdas.outcome(scheduled, got.status, got.body, got.function_error)
            host.tell_or_retry(self, actor_id(region, ex.run_id), Envelope(answer))

    def _start_child(self, region: str, ex: Execution, effect: m.StartChild) -> None:
        """Start a child execution (StartChildWorkflowExecution) and tell the parent how it went:
        `ChildStarted` with the child's run id, or `ChildStartFailed` with SWF's cause. A start
        refused because the workflow id is open is this very child when that open run names
        this parent and initiating event (a retry whose first attempt committed): started."""
        parent = actor_id(region, ex.run_id)
        request = effect.request

        async def attempt() -> Any:
            try:
                started = await self.swf.start(region, request)
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
                self.host.tell_or_retry(self, parent, Envelope(answer))
                return

        self.host.spawn(start)

    def _offer(self, region: str, ex: Execution, offer: m.OfferDecisionTask | m.OfferActivityTask) -> None:
        kind = "decision" if isinstance(offer, m.OfferDecisionTask) else "activity"
        app, queue = queue_of(region, ex.domain, kind, offer.task_list)
        token = task_token(ex.run_id, offer.scheduled_event_id)
        priority = swf_level(offer.task_priority)  # SWF's taskPriority as a level 1..5
        self.host.queues.offer(app, queue, token, actor_id(region, ex.run_id), priority)

    async def recover(self, only: Callable[[str], bool] | None = None) -> int:
        """After a restart, what executions are still owed (`recovery.owed_effects`): every
        open one's tasks offered again (the queues are in memory; the document says what is
        pending), children not yet started started, signals and cancel requests not yet
        answered sent again, Lambda calls made (again); and every closed one with an `swf_owed`
        row gets its child policy applied and its parent told. `only`: the actor ids to recover
        (a node's gained partitions), else all; an actor this node does not own is skipped.
        Returns how many open ones were recovered."""
        count = await self._recover_pages(self.store.swf_open_executions, only)
        await self._recover_pages(self.store.swf_owed_executions, only)
        return count

    async def _recover_pages(
        self,
        page_of: Callable[[tuple[str, str] | None, int], Awaitable[list[SwfStored]]],
        only: Callable[[str], bool] | None,
    ) -> int:
        after: tuple[str, str] | None = None
        count = 0
        while True:
            page = await page_of(after, _RECOVERY_PAGE)
            for stored in page:
                actor = actor_id(stored.region, stored.execution.run_id)
                if (only is not None and not only(actor)) or not self.host.accepts(actor):
                    continue
                await self._recover_one(stored)
                count += 1
            if len(page) < _RECOVERY_PAGE:
                return count
            after = (page[-1].region, page[-1].execution.run_id)

    async def _recover_one(self, stored: SwfStored) -> None:
        ex = stored.execution
        events: dict[int, HistoryEvent] = {}
        if not ex.is_open:  # the closing event is the last one
            history = await self.store.swf_events(stored.region, ex.run_id, ex.last_event_id - 1, False, 1)
            events = {e.event_id: e for e in history}
        elif ex.externals or ex.lambdas or any(c.started_event_id is None for c in ex.children):
            history = await self.store.swf_events(stored.region, ex.run_id, None, False, ex.last_event_id)
            events = {e.event_id: e for e in history}
        effects = owed_effects(ex, events.__getitem__)
        if not ex.is_open and not owes(effects):
            await self.store.swf_settle_owed(stored.region, ex.run_id)
            return
        self._effects(stored.region, ex, effects)

    def _to_other(
        self,
        region: str,
        ex: Execution,
        workflow_id: str,
        run_id: str | None,
        effect: m.DeliverSignal | m.RequestCancelExternal,
    ) -> None:
        """Find the execution an effect names (its open run when `run_id` is None), then send
        it the message; the sender hears back when it named one (signal or cancel request)."""
        me = actor_id(region, ex.run_id)

        async def deliver() -> None:
            found = await self.store.swf_find(region, ex.domain, workflow_id, run_id)
            target = found.execution if found is not None and found.execution.is_open else None
            if target is None:
                cause = "UNKNOWN_EXTERNAL_WORKFLOW_EXECUTION"
                answer: Any = (
                    m.ExternalSignalFailed(effect.initiated_event_id, cause)
                    if isinstance(effect, m.DeliverSignal)
                    else m.ExternalCancelFailed(effect.initiated_event_id, cause)
                )
                self.host.tell_or_retry(self, me, Envelope(answer))
                return
            out: Any
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
            self.host.tell_or_retry(self, actor_id(region, target.run_id), Envelope(out))
            self.host.tell_or_retry(self, me, Envelope(back))

        self.host.spawn(deliver)

    def describe(self, actor: Actor[SwfState]) -> dict[str, Any]:
        state = actor.state
        ex = state.execution if state is not None else None
        return {
            "region": state.region if state is not None else None,
            "domain": ex.domain if ex is not None else None,
            "workflowId": ex.workflow_id if ex is not None else None,
            "runId": ex.run_id if ex is not None else parse_actor_id(actor.id)[1],
            "status": (ex.close_status or "OPEN") if ex is not None else None,
            "parked": state.parked if state is not None else None,
        }


def _child_of(child: Execution, parent: Execution, initiated_event_id: int) -> bool:
    return (
        child.parent is not None
        and child.parent.run_id == parent.run_id
        and child.parent_initiated_event_id == initiated_event_id
    )
