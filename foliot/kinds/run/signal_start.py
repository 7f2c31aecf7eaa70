"""Signal-with-start: deliver a signal to the open run with a business key, or start that run
with the signal already in it, atomically.

The unique index on open runs' business keys decides who starts: a caller whose start loses
the race delivers to the winner instead, so any number of concurrent calls make one run. A
start and its signal are one unit of work (the run row, `run_started`, the first step and
`signal_received` commit together); a delivery to an existing run goes through its actor like
any signal. With an `Idempotency-Key`, the answer is stored in the same unit of work as the
change it reports, so a retry replays it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import attrs

from ...actors.messages import Envelope, ReplySlot
from ...actors.placement import check_local
from ...core.errors import (
    Conflict,
    Refused,
    RejectedMessage,
    StaleWrite,
    StorageError,
    Unavailable,
    UniqueViolation,
)
from ...core.workflow import machine
from ...core.workflow.model import Run
from ...storage.base import IdempotencyRecord, UnitOfWork, json_dumps
from .actor import first_slot

if TYPE_CHECKING:
    from ...actors.admission import Ticket
    from .service import Runs

# A start that loses the business-key race delivers to the winner; the winner may close before
# the delivery lands (then a new run is started). More rounds than this is a pathological churn.
_ROUNDS: Final = 8


@attrs.frozen
class SignalStart:
    app: str
    workflow: str
    business_key: str
    signal: machine.SignalIn
    input: Any = None
    version: int | None = None
    idempotency_key: str | None = None
    request_hash: str = ""


def _error(reply: machine.Rejected) -> Refused:
    return RejectedMessage(reply.status, reply.code, reply.message, reply.field)


async def signal_with_start(runs: Runs, req: SignalStart, ticket: Ticket | None = None) -> dict[str, Any]:
    """`{runId, status, started}`: the signal's status (`delivered`, `buffered`, `duplicate`).

    `ticket`, the caller's admission, is told when the call contends with others for one run
    (it waits behind that run's messages, or lost the race to start it): not timed by the gate."""
    if not runs.host.ready:
        raise Unavailable("the engine is starting; retry shortly")
    replayed = await _replay(runs, req)
    if replayed is not None:
        return replayed
    for _ in range(_ROUNDS):
        run = await runs.host.store.find_open_run(req.app, req.workflow, req.business_key)
        if run is not None:
            if ticket is not None and runs.busy(run.run_id):
                ticket.timed = False
            answer = await _deliver(runs, req, run)
        else:
            answer = await _start(runs, req)
        if answer is not None:
            return answer
        if ticket is not None:
            ticket.timed = False  # lost the race for this business key: contention on one run
    raise Conflict(
        f"the run with businessKey {req.business_key!r} kept closing and starting; retry",
        code="conflict",
    )


async def _replay(runs: Runs, req: SignalStart) -> dict[str, Any] | None:
    if req.idempotency_key is None:
        return None
    return await runs.replay(req.app, req.idempotency_key, req.request_hash)


def _record(runs: Runs, req: SignalStart, run_id: str, body: dict[str, Any]) -> IdempotencyRecord | None:
    if req.idempotency_key is None:
        return None
    return IdempotencyRecord(
        req.app, req.idempotency_key, req.request_hash, run_id, json_dumps(body), runs.host.clock.now()
    )


async def _deliver(runs: Runs, req: SignalStart, run: Run) -> dict[str, Any] | None:
    """Signal the open run through its actor; None when it closed meanwhile."""

    def record(reply: machine.Reply) -> IdempotencyRecord | None:
        if not isinstance(reply, machine.Ok):
            return None
        return _record(runs, req, run.run_id, _body(run.run_id, reply.value, False))

    check_local(runs.host.placement, run.run_id)  # owned elsewhere: the request is forwarded
    slot = ReplySlot()
    await runs.host.supervisor.ask(runs.kind, run.run_id, Envelope(req.signal, slot, idempotency=record), run)
    reply = await slot.wait()
    if isinstance(reply, machine.Rejected):
        if reply.code == "run_closed" or (reply.code == "not_found" and reply.status == 404):
            return None  # it closed (or was pruned) since we found it: start a new one
        if reply.code == "idempotency_replay":
            replayed = await _replay(runs, req)
            if replayed is not None:
                return replayed
        raise _error(reply)
    return _body(run.run_id, reply.value, False)


async def _start(runs: Runs, req: SignalStart) -> dict[str, Any] | None:
    """Start the run with the signal in it; None when another caller's run took the key first."""
    definition, version = await runs.definition_of(req.app, req.workflow, req.version)
    await runs.within_open_runs(req.app)
    ctx = runs.context()
    started = runs.begin(
        app=req.app,
        definition=definition,
        version=version,
        input=req.input,
        business_key=req.business_key,
        ctx=ctx,
        tree=await runs.tree_budget(req.app),
    )
    run_id = started.run.run_id
    signalled = machine.transition(started.run, definition, req.signal, ctx)
    if isinstance(signalled.reply, machine.Rejected):
        raise _error(signalled.reply)  # nothing stored: the signal itself is refused
    body = _body(run_id, signalled.reply.value, True)
    both = attrs.evolve(machine.chain(started, signalled), reply=signalled.reply)
    both, children_units, children = await runs.settle(both, definition)
    unit = UnitOfWork(
        both.run,
        None,
        both.events,
        both.tasks,
        _record(runs, req, run_id, body),
        signal_ids=both.signal_ids,
        idempotency_expired_before=runs.idempotency_cutoff(),
        children=children_units,
        slot=first_slot(both.run),
    )

    async def commit_and_perform() -> None:
        try:
            await runs.commit(unit)
        except (UniqueViolation, StaleWrite):
            raise
        except StorageError as exc:
            if not await runs.kind.applied(run_id, None, both, children, exc):
                raise  # not applied: nothing changed
        runs.adopt(both)
        runs.adopt_children(children)

    try:
        await runs.host.outlive_caller(commit_and_perform)
    except UniqueViolation as exc:
        replayed = await _replay(runs, req)
        if replayed is not None:
            return replayed
        if exc.constraint == "business_key":
            return None  # another caller's run holds the key now: deliver to it
        raise Conflict(str(exc)) from exc
    return body


def _body(run_id: str, status: Any, started: bool) -> dict[str, Any]:
    return {"runId": run_id, "status": status, "started": started}
