"""Random walks through the machine: invariants hold after every message."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from foliot.core.swf import machine
from foliot.core.swf import messages as m
from foliot.core.swf.events import DECISION_TRIGGERS
from foliot.core.swf.faults import Fault
from foliot.core.swf.history import open_counts
from foliot.core.swf.model import (
    ExecutionRef,
    TypeRef,
    WorkflowTypeInfo,
    execution_from_dict,
    execution_to_dict,
)
from foliot.core.swf.recovery import owed_effects
from foliot.core.swf.timeouts import deadlines

from .swf_kit import ACT_INFO, WF_INFO, Kit, decision, schedule, swf_model

CHILD = WorkflowTypeInfo(
    TypeRef("Child", "1"),
    default_task_start_to_close_timeout="10",
    default_execution_start_to_close_timeout="100",
    default_task_list="c",
    default_child_policy="ABANDON",
)
CATALOG = m.StaticCatalog([WF_INFO, CHILD], [ACT_INFO])

IDS = st.sampled_from(["a", "b", "c"])
DECISIONS = st.one_of(
    st.builds(
        lambda i, hb, s2s: schedule(i, heartbeatTimeout=hb, scheduleToStartTimeout=s2s),
        IDS,
        st.sampled_from(["NONE", "5"]),
        st.sampled_from(["NONE", "3", "30"]),
    ),
    st.builds(lambda i: decision("RequestCancelActivityTask", activityId=i), IDS),
    st.builds(
        lambda i, s: decision("StartTimer", timerId=i, startToFireTimeout=s), IDS, st.sampled_from(["0", "4"])
    ),
    st.builds(lambda i: decision("CancelTimer", timerId=i), IDS),
    st.just(decision("RecordMarker", markerName="m")),
    st.builds(lambda i: decision("SignalExternalWorkflowExecution", workflowId=i, signalName="s"), IDS),
    st.builds(lambda i: decision("RequestCancelExternalWorkflowExecution", workflowId=i), IDS),
    st.builds(
        lambda i: decision("StartChildWorkflowExecution", workflowType=CHILD.type.to_aws(), workflowId=i), IDS
    ),
    st.builds(lambda i: decision("ScheduleLambdaFunction", id=i, name="fn"), IDS),
)
CLOSING = st.sampled_from(
    [
        decision("CompleteWorkflowExecution"),
        decision("FailWorkflowExecution"),
        decision("CancelWorkflowExecution"),
        decision("ContinueAsNewWorkflowExecution"),
    ]
)


def _choices(k: Kit, data: st.DataObject) -> list[m.Message]:
    ex = k.ex
    out: list[m.Message] = [m.Signal("s"), m.Fire("timer:999"), m.PollActivity(999)]
    if data.draw(st.integers(0, 30)) == 0:
        out += [m.Terminate(), m.RequestCancel()]
    if ex.decision is not None:
        sid = ex.decision.scheduled_event_id
        if ex.decision.started_event_id is None:
            out.append(m.PollDecision(sid))
        else:
            batch = data.draw(st.lists(DECISIONS, max_size=4))
            if data.draw(st.integers(0, 6)) == 0:
                batch.append(data.draw(CLOSING))
            if data.draw(st.integers(0, 10)) == 0:
                batch.insert(0, {"decisionType": "Bogus"})
            out.append(m.CompleteDecision(sid, batch))
    for act in ex.activities:
        sid = act.scheduled_event_id
        if act.started_event_id is None:
            out.append(m.PollActivity(sid))
        else:
            out += [m.CompleteActivity(sid), m.FailActivity(sid), m.CancelActivity(sid), m.Heartbeat(sid)]
    for child in ex.children:
        if child.started_event_id is None:
            out += [
                m.ChildStarted(child.initiated_event_id, "r"),
                m.ChildStartFailed(child.initiated_event_id, "WORKFLOW_ALREADY_RUNNING"),
            ]
        out.append(m.ChildClosed(child.initiated_event_id, ExecutionRef(child.workflow_id, "r"), "COMPLETED"))
    for ext in ex.externals:
        ref = ExecutionRef(ext.workflow_id, "r")
        if ext.kind == "signal":
            out += [
                m.ExternalSignaled(ext.initiated_event_id, ref),
                m.ExternalSignalFailed(ext.initiated_event_id),
            ]
        else:
            out += [
                m.ExternalCancelRequested(ext.initiated_event_id, ref),
                m.ExternalCancelFailed(ext.initiated_event_id),
            ]
    for fn in ex.lambdas:
        sid = fn.scheduled_event_id
        out += (
            [m.LambdaStarted(sid)]
            if fn.started_event_id is None
            else [m.LambdaCompleted(sid), m.LambdaFailed(sid)]
        )
    for key in deadlines(ex):
        out.append(m.Fire(key))
    return out


def _replayed_open(events: list[Any]) -> tuple[set[int], set[int], int]:
    """Open activities, open timers and open decision tasks as the history tells them."""
    activities: set[int] = set()
    timers: set[int] = set()
    scheduled: int | None = None  # the decision task handed out (scheduled, maybe started)
    started: int | None = None
    held: int | None = None  # scheduled while `scheduled` was started (AWS records it at once)
    for ev in events:
        a = ev.attributes
        if ev.event_type == "ActivityTaskScheduled":
            activities.add(ev.event_id)
        elif ev.event_type in (
            "ActivityTaskCompleted",
            "ActivityTaskFailed",
            "ActivityTaskTimedOut",
            "ActivityTaskCanceled",
        ):
            activities.discard(a["scheduledEventId"])
        elif ev.event_type == "TimerStarted":
            timers.add(ev.event_id)
        elif ev.event_type in ("TimerFired", "TimerCanceled"):
            timers.discard(a["startedEventId"])
        elif ev.event_type == "DecisionTaskScheduled":
            assert scheduled is None or started is not None, "a second task only while one is started"
            if scheduled is None:
                scheduled = ev.event_id
            else:
                assert held is None, "at most one decision task held back"
                held = ev.event_id
        elif ev.event_type == "DecisionTaskStarted":
            assert started is None and a["scheduledEventId"] == scheduled
            started = ev.event_id
        elif ev.event_type in ("DecisionTaskCompleted", "DecisionTaskTimedOut"):
            assert a["scheduledEventId"] == scheduled
            scheduled, started, held = held, None, None
    decisions = 0 if scheduled is None else 1
    return activities, timers, decisions


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_walk_keeps_invariants(data: st.DataObject) -> None:
    k = Kit(catalog=CATALOG, lambda_role=data.draw(st.sampled_from([None, "arn:role"])))
    armed: dict[str, int] = {}
    tasks: set[tuple[str, int]] = set()
    for _ in range(data.draw(st.integers(1, 40))):
        # Effects, folded as the runtime would, track the machine's own view exactly.
        for effect in k.last_effects:
            if isinstance(effect, m.ArmDeadline):
                armed[effect.key] = effect.at
            elif isinstance(effect, m.CancelDeadline):
                del armed[effect.key]
            elif isinstance(effect, m.OfferDecisionTask):
                tasks.add(("decision", effect.scheduled_event_id))
            elif isinstance(effect, m.OfferActivityTask):
                tasks.add(("activity", effect.scheduled_event_id))
            elif isinstance(effect, m.RetireTask):
                tasks.remove((effect.kind, effect.scheduled_event_id))
        k.last_effects = ()
        assert armed == deadlines(k.ex)
        open_tasks = {("activity", a.scheduled_event_id) for a in k.ex.activities}
        if k.ex.decision is not None:
            open_tasks.add(("decision", k.ex.decision.scheduled_event_id))
        assert tasks == open_tasks

        activities, timers, decisions = _replayed_open(k.events)
        if k.ex.is_open:
            assert activities == {a.scheduled_event_id for a in k.ex.activities}
            assert timers == {t.started_event_id for t in k.ex.timers}
            assert decisions == open_counts(k.ex)["openDecisionTasks"]
        assert execution_from_dict(execution_to_dict(k.ex)) == k.ex
        owed = owed_effects(k.ex, lambda event_id: k.events[event_id - 1])
        if k.ex.is_open:
            offered = {
                ("decision" if isinstance(e, m.OfferDecisionTask) else "activity", e.scheduled_event_id)
                for e in owed
                if isinstance(e, m.OfferDecisionTask | m.OfferActivityTask)
            }
            unclaimed = {
                ("activity", a.scheduled_event_id) for a in k.ex.activities if a.started_event_id is None
            }
            if k.ex.decision is not None and k.ex.decision.started_event_id is None:
                unclaimed.add(("decision", k.ex.decision.scheduled_event_id))
            assert offered == unclaimed and offered <= tasks
            requests = [e for e in owed if isinstance(e, m.DeliverSignal | m.RequestCancelExternal)]
            assert [e.initiated_event_id for e in requests] == [x.initiated_event_id for x in k.ex.externals]
        else:
            assert isinstance(owed[-1], m.Closed) and owed[-1].close_status == k.ex.close_status

        if not k.ex.is_open:
            assert k.ex.decision is None and deadlines(k.ex) == {}
            for msg in (m.Signal("s"), m.Terminate(), m.PollDecision(1), m.CompleteActivity(1)):
                assert isinstance(machine.transition(k.ex, msg, k.ctx()), Fault)
            assert k.send(m.Fire("workflow")).events == ()
            break
        assert not k.ex.decision_needed  # only ever set inside a decision batch
        if k.ex.next_decision is not None:
            assert k.ex.decision is not None and k.ex.decision.started_event_id is not None

        choice = data.draw(st.sampled_from(_choices(k, data)))
        if isinstance(choice, m.Fire) and choice.key in deadlines(k.ex):
            k.now = max(k.now, deadlines(k.ex)[choice.key])
        else:
            k.advance(data.draw(st.integers(0, 2000)))
        before = k.ex
        out = machine.transition(k.ex, choice, k.ctx())
        if isinstance(out, Fault):
            assert k.ex is before
            continue
        k._take(out)


def test_decision_triggers_are_event_types() -> None:
    assert set(swf_model()["shapes"]["EventType"]["enum"]) >= DECISION_TRIGGERS
