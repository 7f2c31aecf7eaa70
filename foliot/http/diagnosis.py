"""`GET /apps/{app}/runs/{runId}/diagnosis`: why a run is not moving (see foliot/diagnosis.py).

`observe` gathers what the pure `diagnose` needs from the engine (live actor, dispatcher, pull
queue) and from storage (the open attempt's row, the run's stored timers, its last failure);
the console's run page uses it too.
"""

from __future__ import annotations

from quart import Blueprint, Response

from ..core.workflow.advice import over_sync_cap
from ..core.workflow.model import Run
from ..kinds.run.signals import reachable_signals
from ..observe.diagnosis import Diagnosis, Observation, QueueSeen, SlotSeen, StoredTimer, diagnose
from .app import check_query, engine, json_response, require_app
from .runs import owned_run
from .services import Services

blueprint = Blueprint("diagnosis", __name__)

_RECENT_EVENTS = 20


async def observe(eng: Services, run: Run) -> Observation:
    """Everything the diagnosis looks at for this run, read now."""
    now = eng.clock.now()
    task = run.task
    task_row = await eng.store.get_task(task.token) if task is not None else None
    push = None
    if task is not None and task.queue is None:
        if eng.dispatcher.is_inflight(task.token):
            push = "sending"
        elif eng.dispatcher.is_queued(task.token):
            push = "queued"
    queue = None
    if task is not None and task.queue is not None:
        last, pollers = eng.queues.last_polled(run.app, task.queue)
        queue = QueueSeen(
            name=task.queue,
            backlog=eng.queues.depth(run.app, task.queue),
            waiting_pollers=eng.queues.waiting_on(run.app, task.queue),
            last_poll_at=last,
            tracked_since=eng.started_at,
            pollers=pollers,
        )
    timers: tuple[StoredTimer, ...] = ()
    last_failure = None
    if run.is_open:
        stored = await eng.store.timers_for_run(run.run_id)
        timers = tuple(StoredTimer(t.slot, t.kind, t.key, t.due_at) for t in stored)
        recent = await eng.store.list_events(run.run_id, max(0, run.seq - _RECENT_EVENTS), _RECENT_EVENTS)
        failures = [e for e in recent if e.type == "task_failed"]
        last_failure = dict(failures[-1].data) if failures else None
    awaitable = None
    if run.is_open and run.buffer:
        awaitable = (await reachable_signals(eng.directory, run)).names
    actor = eng.supervisor.actors.get(run.run_id)
    slot = await _slot_seen(eng, run) if run.waits_for_slot else None
    over_cap = None
    if run.is_open and run.current_step is not None:
        definition = await eng.directory.maybe_definition(run.app, run.workflow, run.version)
        step = definition.index.get(run.current_step) if definition is not None else None
        cap = eng.settings.sync_task_max_ms
        if step is not None and step.timeout_ms is not None and over_sync_cap(step, cap):
            over_cap = (step.timeout_ms, cap)
    return Observation(
        slot=slot,
        run=run,
        now=now,
        task_row=task_row,
        push=push,
        push_backlog=eng.dispatcher.app_backlog(run.app),
        timers=timers,
        live=actor is not None,
        mailbox=actor.mailbox_depth if actor is not None else 0,
        queue=queue,
        last_failure=last_failure,
        rate_wait=eng.dispatcher.delayed_until(task.token) if task is not None else None,
        awaitable_signals=awaitable,
        over_sync_cap=over_cap,
    )


async def _slot_seen(eng: Services, run: Run) -> SlotSeen | None:
    definition = await eng.directory.maybe_definition(run.app, run.workflow, run.version)
    if definition is None or run.concurrency_key is None:
        return None
    concurrency = definition.concurrency_for(run.concurrency_key)
    if concurrency is None:
        return None
    ahead, held = await eng.store.queue_ahead(run)
    value = run.concurrency_key.partition("/")[2]
    path = concurrency.key
    key = f"{path[-1]}={value}" if path is not None else ""
    return SlotSeen(key, ahead, held, concurrency.limit)


async def run_diagnosis(eng: Services, run: Run) -> Diagnosis:
    return diagnose(await observe(eng, run))


@blueprint.get("/apps/<app_name>/runs/<run_id>/diagnosis")
async def diagnosis(app_name: str, run_id: str) -> Response:
    await require_app(app_name)
    check_query(set())
    run = await owned_run(app_name, run_id)
    return json_response((await run_diagnosis(engine(), run)).to_json(run))
