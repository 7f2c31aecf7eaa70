"""Decision batches: all-or-nothing validation, then each decision's success and failures."""

from __future__ import annotations

from typing import Any

import pytest

from foliot.core.swf import messages as m
from foliot.core.swf.decisions import SCHEMA, parse_decisions, referenced_types
from foliot.core.swf.faults import Fault
from foliot.core.swf.model import ActivityTypeInfo, TypeRef, WorkflowTypeInfo

from .swf_kit import ACT, ACT_INFO, WF, WF_INFO, Kit, decision, schedule, swf_model

# ------------------------------------------------------------------ validation, no state


def test_schema_matches_botocore() -> None:
    shapes = swf_model()["shapes"]
    assert list(SCHEMA) == shapes["DecisionType"]["enum"]
    for kind, (member, members) in SCHEMA.items():
        assert shapes["Decision"]["members"][member]["shape"] == member[0].upper() + member[1:]
        shape = shapes[member[0].upper() + member[1:]]
        assert set(members) == set(shape["members"]), kind
        assert {n for n, (_, req) in members.items() if req} == set(shape.get("required", [])), kind


def _fault(raw: Any) -> str:
    out = parse_decisions(raw)
    assert isinstance(out, Fault), out
    assert out.code == "ValidationException"
    return out.message


MINIMAL: dict[str, dict[str, Any]] = {
    "ScheduleActivityTask": {"activityType": {"name": "a", "version": "1"}, "activityId": "x"},
    "RequestCancelActivityTask": {"activityId": "x"},
    "CompleteWorkflowExecution": {},
    "FailWorkflowExecution": {},
    "CancelWorkflowExecution": {},
    "ContinueAsNewWorkflowExecution": {},
    "RecordMarker": {"markerName": "m"},
    "StartTimer": {"timerId": "t", "startToFireTimeout": "5"},
    "CancelTimer": {"timerId": "t"},
    "SignalExternalWorkflowExecution": {"workflowId": "w", "signalName": "s"},
    "RequestCancelExternalWorkflowExecution": {"workflowId": "w"},
    "StartChildWorkflowExecution": {"workflowType": {"name": "a", "version": "1"}, "workflowId": "w"},
    "ScheduleLambdaFunction": {"id": "f1", "name": "fn"},
}


@pytest.mark.parametrize("kind", list(SCHEMA))
def test_each_type_with_its_required_members_is_valid(kind: str) -> None:
    out = parse_decisions([decision(kind, **MINIMAL[kind])])
    assert not isinstance(out, Fault), out
    assert out[0].type == kind


@pytest.mark.parametrize(
    ("kind", "member"),
    [(k, n) for k, (_, members) in SCHEMA.items() for n, (_, req) in members.items() if req],
)
def test_a_missing_required_member_is_named(kind: str, member: str) -> None:
    attributes = {k: v for k, v in MINIMAL[kind].items() if k != member}
    message = _fault([decision("RecordMarker", markerName="ok"), decision(kind, **attributes)])
    attr_member = SCHEMA[kind][0]
    assert f"'decisions.2.member.{attr_member}.{member}'" in message
    assert "Member must not be null" in message


@pytest.mark.parametrize("kind", [k for k, (_, ms) in SCHEMA.items() if any(r for _, r in ms.values())])
def test_missing_attributes_structure_is_refused(kind: str) -> None:
    message = _fault([{"decisionType": kind}])
    assert f"'decisions.1.member.{SCHEMA[kind][0]}'" in message


@pytest.mark.parametrize(
    "kind", ["CompleteWorkflowExecution", "FailWorkflowExecution", "CancelWorkflowExecution"]
)
def test_attributes_optional_when_nothing_required(kind: str) -> None:
    out = parse_decisions([{"decisionType": kind}])
    assert not isinstance(out, Fault)


@pytest.mark.parametrize(
    ("raw", "where", "why"),
    [
        ([{"decisionType": "Dance"}], "decisions.1.member.decisionType", "enum value set"),
        ([{}], "decisions.1.member.decisionType", "must not be null"),
        (["x"], "decisions.1.member'", "structure"),
        ([decision("RecordMarker", markerName="")], "markerName", "greater than or equal to 1"),
        ([decision("RecordMarker", markerName="m" * 257)], "markerName", "less than or equal to 256"),
        ([decision("RecordMarker", markerName=5)], "markerName", "must be a string"),
        ([decision("RecordMarker", markerName="m", details="d" * 32769)], "details", "less than or equal"),
        ([decision("StartTimer", timerId="t", startToFireTimeout="NONE")], "startToFireTimeout", "integer"),
        ([decision("StartTimer", timerId="t", startToFireTimeout="")], "startToFireTimeout", "greater than"),
        ([decision("StartTimer", timerId="t", startToFireTimeout="1.5")], "startToFireTimeout", "integer"),
        ([decision("StartTimer", timerId="t", startToFireTimeout="123456789")], "startToFireTimeout", "less"),
        ([decision("StartTimer", timerId="t", startToFireTimeout="\u0663")], "startToFireTimeout", "integer"),
        ([schedule(heartbeatTimeout="soon")], "heartbeatTimeout", "integer number of seconds or NONE"),
        ([schedule(taskList={})], "taskList.name", "must not be null"),
        ([schedule(taskList="q")], "taskList", "structure"),
        ([schedule(taskPriority="high")], "taskPriority", "integer between"),
        ([schedule(taskPriority="2147483648")], "taskPriority", "integer between"),
        (
            [decision("ScheduleActivityTask", activityId="x", activityType={"name": "a"})],
            "activityType.version",
            "must not be null",
        ),
        ([decision("ContinueAsNewWorkflowExecution", childPolicy="KEEP")], "childPolicy", "enum value set"),
        (
            [decision("ContinueAsNewWorkflowExecution", executionStartToCloseTimeout="1.5")],
            "executionStart",
            "int",
        ),
        (
            [decision("ContinueAsNewWorkflowExecution", tagList=["a"] * 6)],
            "tagList",
            "less than or equal to 5",
        ),
        ([decision("ContinueAsNewWorkflowExecution", tagList=["a", 1])], "tagList.2.member", "string"),
        ([decision("ContinueAsNewWorkflowExecution", tagList="a")], "tagList", "list"),
        ([decision("ScheduleLambdaFunction", id="f", name="n" * 65)], "name", "less than or equal to 64"),
        (
            [decision("ScheduleLambdaFunction", id="f", name="n", startToCloseTimeout="901")],
            "startTo",
            "1 and 900",
        ),
        (
            [decision("ScheduleLambdaFunction", id="f", name="n", startToCloseTimeout="0")],
            "startTo",
            "1 and 900",
        ),
        (
            [decision("ScheduleLambdaFunction", id="f", name="n", startToCloseTimeout="NONE")],
            "startTo",
            "seconds",
        ),
        (
            [decision("SignalExternalWorkflowExecution", workflowId="w", signalName="s", runId="r" * 65)],
            "runId",
            "",
        ),
        (
            [{"decisionType": "RecordMarker", "recordMarkerDecisionAttributes": "m"}],
            "recordMarker",
            "structure",
        ),
    ],
)
def test_invalid_members_are_named(raw: list[Any], where: str, why: str) -> None:
    message = _fault(raw)
    assert where in message and why in message
    assert message.startswith("1 validation error detected: Value ")


def test_closing_decision_must_be_last() -> None:
    assert _fault([decision("CompleteWorkflowExecution"), decision("RecordMarker", markerName="m")]) == (
        "Close must be last decision in list"
    )
    assert _fault([decision("FailWorkflowExecution"), decision("CancelWorkflowExecution")]) == (
        "Close must be last decision in list"
    )
    out = parse_decisions([decision("RecordMarker", markerName="m"), decision("CompleteWorkflowExecution")])
    assert not isinstance(out, Fault) and len(out) == 2


def test_not_a_list_and_empty() -> None:
    assert "must be a list" in _fault("x")
    assert parse_decisions(None) == ()
    assert parse_decisions([]) == ()


def test_unknown_members_are_ignored() -> None:
    out = parse_decisions([{**decision("RecordMarker", markerName="m", extra=1), "other": 2}])
    assert not isinstance(out, Fault)
    assert dict(out[0].attributes) == {"markerName": "m"}


def test_referenced_types() -> None:
    out = parse_decisions(
        [
            schedule(),
            decision(
                "StartChildWorkflowExecution", workflowType={"name": "c", "version": "2"}, workflowId="w"
            ),
        ]
    )
    assert not isinstance(out, Fault)
    assert referenced_types(out) == ({("Charge", "1")}, {("c", "2")})


# ------------------------------------------------------------------ all or nothing on an execution


@pytest.mark.parametrize(
    "batch",
    [
        [schedule("a1"), {"decisionType": "Nope"}],
        [decision("CompleteWorkflowExecution"), schedule("a1")],
        [schedule("a1"), decision("StartTimer", timerId="t")],
    ],
)
def test_a_rejected_batch_changes_nothing_and_the_task_stays_open(batch: list[Any]) -> None:
    k = Kit()
    k.poll_decision()
    task = k.ex.decision
    fault = k.refuse(m.CompleteDecision(task.scheduled_event_id, batch))  # type: ignore[union-attr]
    assert fault.code == "ValidationException"
    assert k.ex.decision == task and len(k.events) == 3
    k.complete_decision([schedule("a1")])
    assert k.last(2) == ["DecisionTaskCompleted", "ActivityTaskScheduled"]


def test_bad_response_members_reject_the_batch() -> None:
    k = Kit()
    k.poll_decision()
    sid = k.ex.decision.scheduled_event_id  # type: ignore[union-attr]
    assert "executionContext" in k.refuse(m.CompleteDecision(sid, [], execution_context="x" * 32769)).message
    bad_timeout = m.CompleteDecision(sid, [], task_list="t", task_list_schedule_to_start_timeout="x")
    assert "taskListScheduleToStartTimeout" in k.refuse(bad_timeout).message
    assert "taskList.name" in k.refuse(m.CompleteDecision(sid, [], task_list="")).message


def test_unknown_or_unstarted_decision_task_is_refused() -> None:
    k = Kit()
    sid = k.ex.decision.scheduled_event_id  # type: ignore[union-attr]
    assert k.refuse(m.CompleteDecision(sid, [])).code == "UnknownResourceFault"  # not started
    k.poll_decision()
    assert k.refuse(m.PollDecision(sid)).code == "UnknownResourceFault"  # already started
    assert k.refuse(m.CompleteDecision(sid + 100, [])).message == (
        f"Unknown decision task, scheduledEventId = {sid + 100}"
    )
    k.complete_decision([])
    assert k.refuse(m.CompleteDecision(sid, [])).code == "UnknownResourceFault"  # answered twice


def test_an_empty_batch_completes_the_task_and_waits() -> None:
    k = Kit()
    k.decide()
    assert k.last(1) == ["DecisionTaskCompleted"]
    assert k.ex.decision is None and k.ex.is_open


# ------------------------------------------------------------------ activities


def test_schedule_activity_resolves_defaults_and_echoes_given_members() -> None:
    k = Kit()
    k.decide(
        schedule("a1"),
        schedule(
            "a2",
            input="in",
            control="c",
            taskList={"name": "special"},
            taskPriority="5",
            scheduleToStartTimeout="10",
            scheduleToCloseTimeout="100",
            startToCloseTimeout="20",
            heartbeatTimeout="3",
        ),
    )
    a1, a2 = k.attrs(5), k.attrs(6)
    assert a1 == {
        "activityType": {"name": "Charge", "version": "1"},
        "activityId": "a1",
        "scheduleToStartTimeout": "60",
        "scheduleToCloseTimeout": "NONE",
        "startToCloseTimeout": "300",
        "taskList": {"name": "workers"},
        "decisionTaskCompletedEventId": 4,
        "heartbeatTimeout": "NONE",
    }
    assert a2["taskList"] == {"name": "special"} and a2["taskPriority"] == "5" and a2["input"] == "in"
    assert a2["control"] == "c" and a2["heartbeatTimeout"] == "3" and a2["scheduleToCloseTimeout"] == "100"
    assert [a.activity_id for a in k.ex.activities] == ["a1", "a2"]
    assert k.ex.latest_activity_task_at == k.now
    assert m.OfferActivityTask("special", 6, "a2", "5") in k.last_effects


_NO_DEFAULTS = ActivityTypeInfo(ACT)


@pytest.mark.parametrize(
    ("info", "given", "cause"),
    [
        (None, {}, "ACTIVITY_TYPE_DOES_NOT_EXIST"),
        (ActivityTypeInfo(ACT, status="DEPRECATED", default_task_list="w"), {}, "ACTIVITY_TYPE_DEPRECATED"),
        (_NO_DEFAULTS, {}, "DEFAULT_TASK_LIST_UNDEFINED"),
        (_NO_DEFAULTS, {"taskList": {"name": "w"}}, "DEFAULT_SCHEDULE_TO_START_TIMEOUT_UNDEFINED"),
        (
            _NO_DEFAULTS,
            {"taskList": {"name": "w"}, "scheduleToStartTimeout": "1"},
            "DEFAULT_SCHEDULE_TO_CLOSE_TIMEOUT_UNDEFINED",
        ),
        (
            _NO_DEFAULTS,
            {"taskList": {"name": "w"}, "scheduleToStartTimeout": "1", "scheduleToCloseTimeout": "NONE"},
            "DEFAULT_START_TO_CLOSE_TIMEOUT_UNDEFINED",
        ),
        (
            _NO_DEFAULTS,
            {
                "taskList": {"name": "w"},
                "scheduleToStartTimeout": "1",
                "scheduleToCloseTimeout": "NONE",
                "startToCloseTimeout": "1",
            },
            "DEFAULT_HEARTBEAT_TIMEOUT_UNDEFINED",
        ),
    ],
)
def test_schedule_activity_failures(info: ActivityTypeInfo | None, given: dict[str, Any], cause: str) -> None:
    k = Kit(catalog=m.StaticCatalog([WF_INFO], [info] if info else []))
    k.decide(schedule("a1", **given), decision("RecordMarker", markerName="after"))
    assert k.types[3:] == [
        "DecisionTaskCompleted",
        "ScheduleActivityTaskFailed",
        "MarkerRecorded",
        "DecisionTaskScheduled",
    ]
    assert k.attrs(5) == {
        "activityType": ACT.to_aws(),
        "activityId": "a1",
        "cause": cause,
        "decisionTaskCompletedEventId": 4,
    }
    assert k.ex.activities == () and k.ex.decision is not None


def test_activity_id_in_use_and_open_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from foliot.core.swf import apply

    k = Kit()
    k.decide(schedule("a1"), schedule("a1"))
    assert k.attrs(6)["cause"] == "ACTIVITY_ID_ALREADY_IN_USE"
    monkeypatch.setattr(apply, "OPEN_ACTIVITIES_LIMIT", 1)
    k.decide(schedule("a2"))
    assert k.events[-2].attributes["cause"] == "OPEN_ACTIVITIES_LIMIT_EXCEEDED"


def test_an_activity_id_can_be_reused_once_closed() -> None:
    k = Kit()
    k.decide(schedule("a1"))
    k.poll_activity("a1")
    k.send(m.CompleteActivity(5))
    k.decide(schedule("a1"))
    assert k.last(1) == ["ActivityTaskScheduled"]


def test_request_cancel_of_a_queued_activity_cancels_it_at_once() -> None:
    k = Kit()
    k.decide(schedule("a1"))
    k.send(m.Signal("go"))
    k.decide(decision("RequestCancelActivityTask", activityId="a1"))
    assert k.types[9:] == ["ActivityTaskCancelRequested", "ActivityTaskCanceled", "DecisionTaskScheduled"]
    assert k.attrs(10) == {"decisionTaskCompletedEventId": 9, "activityId": "a1"}
    assert k.attrs(11) == {"scheduledEventId": 5, "startedEventId": 0, "latestCancelRequestedEventId": 10}
    assert k.ex.activities == ()
    assert m.RetireTask("activity", "workers", 5) in k.last_effects
    assert k.refuse(m.PollActivity(5)).message == "Unknown activity, scheduledEventId = 5"


def test_request_cancel_of_a_started_activity_reaches_the_worker() -> None:
    k = Kit()
    k.decide(schedule("a1"))
    k.poll_activity("a1")
    assert k.send(m.Heartbeat(5)).reply == m.HeartbeatAnswer(False)
    k.send(m.Signal("go"))
    k.decide(decision("RequestCancelActivityTask", activityId="a1"))
    assert k.last(1) == ["ActivityTaskCancelRequested"]
    assert k.ex.decision is None
    assert k.send(m.Heartbeat(5, "50%")).reply == m.HeartbeatAnswer(True)
    k.send(m.CancelActivity(5, details="stopped"))
    assert k.last(2) == ["ActivityTaskCanceled", "DecisionTaskScheduled"]
    assert k.events[-2].attributes == {
        "details": "stopped",
        "scheduledEventId": 5,
        "startedEventId": 6,
        "latestCancelRequestedEventId": 11,
    }


def test_request_cancel_of_an_unknown_activity() -> None:
    k = Kit()
    k.decide(decision("RequestCancelActivityTask", activityId="zz"))
    assert k.types[3:] == [
        "DecisionTaskCompleted",
        "RequestCancelActivityTaskFailed",
        "DecisionTaskScheduled",
    ]
    assert k.attrs(5) == {
        "activityId": "zz",
        "cause": "ACTIVITY_ID_UNKNOWN",
        "decisionTaskCompletedEventId": 4,
    }


def test_activity_failed_and_answers_to_closed_tasks() -> None:
    k = Kit()
    k.decide(schedule("a1"))
    assert k.refuse(m.CompleteActivity(5)).message == "Unknown activity, scheduledEventId = 5"  # not started
    assert k.refuse(m.Heartbeat(5)).code == "UnknownResourceFault"
    k.poll_activity("a1")
    assert k.refuse(m.PollActivity(5)).code == "UnknownResourceFault"  # handed out once
    k.send(m.FailActivity(5, reason="card", details="declined"))
    assert k.events[-2].event_type == "ActivityTaskFailed"
    assert k.events[-2].attributes == {
        "reason": "card",
        "details": "declined",
        "scheduledEventId": 5,
        "startedEventId": 6,
    }
    for msg in (m.CompleteActivity(5), m.FailActivity(5), m.CancelActivity(5), m.Heartbeat(5)):
        assert k.refuse(msg).code == "UnknownResourceFault"


# ------------------------------------------------------------------ closing decisions


@pytest.mark.parametrize(
    ("kind", "attributes", "event", "status"),
    [
        ("CompleteWorkflowExecution", {"result": "r"}, "WorkflowExecutionCompleted", "COMPLETED"),
        ("FailWorkflowExecution", {"reason": "bad", "details": "d"}, "WorkflowExecutionFailed", "FAILED"),
        ("CancelWorkflowExecution", {"details": "d"}, "WorkflowExecutionCanceled", "CANCELED"),
    ],
)
def test_closing_decisions(kind: str, attributes: dict[str, str], event: str, status: str) -> None:
    k = Kit()
    k.decide(schedule("a1"), decision("StartTimer", timerId="t", startToFireTimeout="10"))
    k.send(m.Signal("go"))
    k.decide(decision(kind, **attributes))
    assert k.last(1) == [event]
    assert k.events[-1].attributes == {**attributes, "decisionTaskCompletedEventId": 10}
    assert k.ex.close_status == status and not k.ex.is_open
    assert k.ex.activities == () and k.ex.timers == ()
    retired = [e for e in k.last_effects if isinstance(e, m.RetireTask)]
    assert retired == [m.RetireTask("decision", "deciders", 8), m.RetireTask("activity", "workers", 5)]
    cancelled = {e.key for e in k.last_effects if isinstance(e, m.CancelDeadline)}
    assert cancelled == {"workflow", "decision:8:START_TO_CLOSE", "activity:5:SCHEDULE_TO_START", "timer:6"}


@pytest.mark.parametrize(
    "kind",
    [
        "CompleteWorkflowExecution",
        "FailWorkflowExecution",
        "CancelWorkflowExecution",
        "ContinueAsNewWorkflowExecution",
    ],
)
def test_closing_decisions_fail_when_events_arrived_meanwhile(kind: str) -> None:
    k = Kit()
    k.poll_decision()
    k.send(m.Signal("poke"))
    assert k.ex.next_decision is not None
    assert k.last(2) == ["WorkflowExecutionSignaled", "DecisionTaskScheduled"]
    k.complete_decision([decision("RecordMarker", markerName="m"), decision(kind)])
    assert k.types[5:] == ["DecisionTaskCompleted", "MarkerRecorded", kind + "Failed"]
    assert k.attrs(8) == {"cause": "UNHANDLED_DECISION", "decisionTaskCompletedEventId": 6}
    # The failure asks the decider nothing more: the held task (event 5) is the next one.
    assert k.ex.decision is not None and k.ex.decision.scheduled_event_id == 5
    assert k.ex.is_open
    k.decide(decision(kind))
    assert not k.ex.is_open


# ------------------------------------------------------------------ markers and timers


def test_record_marker() -> None:
    k = Kit()
    k.decide(
        decision("RecordMarker", markerName="m1", details="x"), decision("RecordMarker", markerName="m1")
    )
    assert k.attrs(5) == {"markerName": "m1", "details": "x", "decisionTaskCompletedEventId": 4}
    assert k.attrs(6) == {"markerName": "m1", "decisionTaskCompletedEventId": 4}
    assert k.ex.decision is None  # a marker asks the decider nothing


def test_start_fire_and_cancel_timers(monkeypatch: pytest.MonkeyPatch) -> None:
    k = Kit()
    k.decide(
        decision("StartTimer", timerId="t1", startToFireTimeout="30", control="c"),
        decision("StartTimer", timerId="t2", startToFireTimeout="0"),
        decision("StartTimer", timerId="t1", startToFireTimeout="5"),
    )
    assert k.attrs(5) == {
        "timerId": "t1",
        "control": "c",
        "startToFireTimeout": "30",
        "decisionTaskCompletedEventId": 4,
    }
    assert k.attrs(7) == {
        "timerId": "t1",
        "cause": "TIMER_ID_ALREADY_IN_USE",
        "decisionTaskCompletedEventId": 4,
    }
    assert m.ArmDeadline("timer:5", k.now + 30_000) in k.last_effects
    assert m.ArmDeadline("timer:6", k.now) in k.last_effects
    k.poll_decision()
    k.send(m.Fire("timer:6"))
    assert k.last(2) == ["TimerFired", "DecisionTaskScheduled"]
    assert k.events[-2].attributes == {"timerId": "t2", "startedEventId": 6}
    assert k.ex.next_decision is not None  # a decision task is started: the next one is held
    k.complete_decision([decision("CancelTimer", timerId="t1"), decision("CancelTimer", timerId="t9")])
    assert k.last(3) == ["DecisionTaskCompleted", "TimerCanceled", "CancelTimerFailed"]
    completed = len(k.events) - 2
    assert k.events[-2].attributes == {
        "timerId": "t1",
        "startedEventId": 5,
        "decisionTaskCompletedEventId": completed,
    }
    assert k.events[-1].attributes == {
        "timerId": "t9",
        "cause": "TIMER_ID_UNKNOWN",
        "decisionTaskCompletedEventId": completed,
    }
    assert m.CancelDeadline("timer:5") in k.last_effects
    k.advance(30_000)
    assert k.send(m.Fire("timer:5")).events == ()  # canceled: stale
    from foliot.core.swf import apply

    monkeypatch.setattr(apply, "OPEN_TIMERS_LIMIT", 0)
    k.decide(decision("StartTimer", timerId="t3", startToFireTimeout="1"))
    assert k.events[-2].attributes["cause"] == "OPEN_TIMERS_LIMIT_EXCEEDED"


def test_a_timer_id_can_be_reused_after_it_fired() -> None:
    k = Kit()
    k.decide(decision("StartTimer", timerId="t", startToFireTimeout="1"))
    k.advance(1000)
    k.send(m.Fire("timer:5"))
    k.decide(decision("StartTimer", timerId="t", startToFireTimeout="1"))
    assert k.last(1) == ["TimerStarted"]
    new_key = f"timer:{len(k.events)}"
    assert k.send(m.Fire("timer:5")).events == ()  # the first arming's key is stale for good
    k.advance(1000)
    k.send(m.Fire(new_key))
    assert k.last(2) == ["TimerFired", "DecisionTaskScheduled"]


# ------------------------------------------------------------------ continue as new


def test_continue_as_new_starts_the_next_run() -> None:
    v2 = WorkflowTypeInfo(
        TypeRef(WF.name, "2"),
        default_task_start_to_close_timeout="30",
        default_execution_start_to_close_timeout="600",
        default_task_list="deciders-2",
        default_child_policy="ABANDON",
        default_lambda_role="arn:role",
    )
    k = Kit(catalog=m.StaticCatalog([WF_INFO, v2], [ACT_INFO]), tag_list=("old",))
    k.decide(
        decision("ContinueAsNewWorkflowExecution", input="again", workflowTypeVersion="2", tagList=["t1"]),
    )
    assert k.last(1) == ["WorkflowExecutionContinuedAsNew"]
    assert k.attrs(5) == {
        "input": "again",
        "decisionTaskCompletedEventId": 4,
        "newExecutionRunId": "run-3",
        "executionStartToCloseTimeout": "600",
        "taskList": {"name": "deciders-2"},
        "taskStartToCloseTimeout": "30",
        "childPolicy": "ABANDON",
        "tagList": ["t1"],
        "workflowType": {"name": "Order", "version": "2"},
        "lambdaRole": "arn:role",
    }
    assert k.ex.close_status == "CONTINUED_AS_NEW"
    (cont,) = [e for e in k.last_effects if isinstance(e, m.ContinuedAsNew)]
    nxt = cont.start
    assert nxt.execution.run_id == "run-3" and nxt.execution.workflow_id == "wf-1"
    assert nxt.execution.tags == ("t1",) and nxt.execution.input == "again"
    assert [e.event_type for e in nxt.events] == ["WorkflowExecutionStarted", "DecisionTaskScheduled"]
    assert nxt.events[0].attributes["continuedExecutionRunId"] == "run-1"
    assert m.OfferDecisionTask("deciders-2", 2) in nxt.effects
    assert k.last_effects[-1] == m.Closed("CONTINUED_AS_NEW")


@pytest.mark.parametrize(
    ("types", "attributes", "cause"),
    [
        ([], {}, "WORKFLOW_TYPE_DOES_NOT_EXIST"),
        ([WorkflowTypeInfo(WF, status="DEPRECATED")], {}, "WORKFLOW_TYPE_DEPRECATED"),
        ([WorkflowTypeInfo(WF)], {}, "DEFAULT_EXECUTION_START_TO_CLOSE_TIMEOUT_UNDEFINED"),
        (
            [WorkflowTypeInfo(WF)],
            {"executionStartToCloseTimeout": "5"},
            "DEFAULT_TASK_START_TO_CLOSE_TIMEOUT_UNDEFINED",
        ),
        (
            [WorkflowTypeInfo(WF)],
            {"executionStartToCloseTimeout": "5", "taskStartToCloseTimeout": "NONE"},
            "DEFAULT_TASK_LIST_UNDEFINED",
        ),
        (
            [WorkflowTypeInfo(WF)],
            {
                "executionStartToCloseTimeout": "5",
                "taskStartToCloseTimeout": "NONE",
                "taskList": {"name": "q"},
            },
            "DEFAULT_CHILD_POLICY_UNDEFINED",
        ),
    ],
)
def test_continue_as_new_failures(
    types: list[WorkflowTypeInfo], attributes: dict[str, Any], cause: str
) -> None:
    k = Kit()
    k.catalog = m.StaticCatalog(types, [ACT_INFO])
    k.decide(decision("ContinueAsNewWorkflowExecution", **attributes))
    assert k.types[3:] == [
        "DecisionTaskCompleted",
        "ContinueAsNewWorkflowExecutionFailed",
        "DecisionTaskScheduled",
    ]
    assert k.attrs(5) == {"cause": cause, "decisionTaskCompletedEventId": 4}
    assert k.ex.is_open


def test_an_empty_batch_after_new_events_gets_a_new_task() -> None:
    k = Kit()
    k.poll_decision()
    k.send(m.Signal("s"))
    assert k.last(2) == ["WorkflowExecutionSignaled", "DecisionTaskScheduled"]
    k.complete_decision([])
    assert k.last(1) == ["DecisionTaskCompleted"]
    assert k.ex.decision is not None and k.ex.decision.scheduled_event_id == 5
    assert k.ex.next_decision is None and not k.ex.decision_needed


def test_continue_as_new_needs_a_run_id_from_the_runtime() -> None:
    from foliot.core.swf import machine

    k = Kit()
    k.poll_decision()
    batch = m.CompleteDecision(2, [decision("ContinueAsNewWorkflowExecution")])
    with pytest.raises(ValueError, match="new_run_id"):
        machine.transition(k.ex, batch, m.Context(now=k.now, catalog=k.catalog))
