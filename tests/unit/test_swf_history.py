"""Starting, history pages, the decision-task window, descriptions, storage round trips."""

from __future__ import annotations

import json

import pytest

from foliot.core.swf import machine
from foliot.core.swf import messages as m
from foliot.core.swf.events import HistoryEvent, attributes_member, event_from_dict, event_to_dict
from foliot.core.swf.faults import Fault
from foliot.core.swf.history import (
    Page,
    activity_task,
    decision_task,
    decision_task_events,
    decode_token,
    describe,
    encode_token,
    execution_info,
    open_counts,
    paginate,
    pending_offers,
)
from foliot.core.swf.model import WorkflowTypeInfo, execution_from_dict, execution_to_dict

from .swf_kit import WF, Kit, decision, schedule, shape_errors

# ------------------------------------------------------------------ start


def test_start_with_every_member_given() -> None:
    request = m.StartRequest(
        domain="d",
        workflow_id="w",
        workflow_type=WF,
        task_list="mine",
        task_priority="3",
        input="in",
        execution_start_to_close_timeout="99",
        tag_list=("a", "b"),
        task_start_to_close_timeout="NONE",
        child_policy="ABANDON",
        lambda_role="arn:role",
    )
    tr = machine.start(request, WorkflowTypeInfo(WF), "r", 1000)
    assert isinstance(tr, m.Transition)
    assert tr.events[0].attributes == {
        "input": "in",
        "executionStartToCloseTimeout": "99",
        "taskStartToCloseTimeout": "NONE",
        "childPolicy": "ABANDON",
        "taskList": {"name": "mine"},
        "taskPriority": "3",
        "workflowType": WF.to_aws(),
        "tagList": ["a", "b"],
        "lambdaRole": "arn:role",
        "parentInitiatedEventId": 0,  # no parent: 0, as AWS sends it (issue 26, point 16)
    }
    assert tr.events[1].attributes == {
        "taskList": {"name": "mine"},
        "taskPriority": "3",
        "startToCloseTimeout": "NONE",
    }
    assert tr.effects == (m.OfferDecisionTask("mine", 2, "3"), m.ArmDeadline("workflow", 1000 + 99_000))
    assert tr.execution.started_at == 1000 and tr.execution.tags == ("a", "b")


@pytest.mark.parametrize(
    ("info", "request_members", "code", "words"),
    [
        (None, {}, "UnknownResourceFault", "Unknown type: WorkflowType=[name=Order, version=1]"),
        (WorkflowTypeInfo(WF, status="DEPRECATED"), {}, "TypeDeprecatedFault", "WorkflowType=[name=Order"),
        (WorkflowTypeInfo(WF), {}, "DefaultUndefinedFault", "executionStartToCloseTimeout"),
        (
            WorkflowTypeInfo(WF),
            {"execution_start_to_close_timeout": "1"},
            "DefaultUndefinedFault",
            "taskStartTo",
        ),
        (
            WorkflowTypeInfo(WF),
            {"execution_start_to_close_timeout": "1", "task_start_to_close_timeout": "1"},
            "DefaultUndefinedFault",
            "taskList",
        ),
        (
            WorkflowTypeInfo(WF),
            {"execution_start_to_close_timeout": "1", "task_start_to_close_timeout": "1", "task_list": "q"},
            "DefaultUndefinedFault",
            "childPolicy",
        ),
    ],
)
def test_start_refusals(
    info: WorkflowTypeInfo | None, request_members: dict[str, str], code: str, words: str
) -> None:
    out = machine.start(m.StartRequest("d", "w", WF, **request_members), info, "r", 0)  # type: ignore[arg-type]
    assert isinstance(out, Fault)
    assert out.code == code and words in out.message


# ------------------------------------------------------------------ pages


def _events(n: int) -> list[HistoryEvent]:
    return [HistoryEvent(i, i, "MarkerRecorded", {"markerName": str(i)}) for i in range(1, n + 1)]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize(("n", "size"), [(0, 3), (1, 1), (7, 3), (6, 3), (5, 1000), (2500, None)])
def test_pages_cover_everything_once_in_order(n: int, size: int | None, reverse: bool) -> None:
    events = _events(n)
    seen: list[int] = []
    token = None
    pages = 0
    while True:
        page = paginate(events, maximum_page_size=size, reverse_order=reverse, next_page_token=token)
        assert isinstance(page, Page)
        assert len(page.events) <= (size or 1000)
        seen += [e.event_id for e in page.events]
        pages += 1
        token = page.next_page_token
        if token is None:
            break
    expected = list(range(1, n + 1))
    assert seen == (expected[::-1] if reverse else expected)
    assert pages == max(1, -(-n // (size or 1000)))


def test_page_size_and_token_refusals() -> None:
    events = _events(5)
    for bad_size in (1001, -1):
        out = paginate(events, maximum_page_size=bad_size)
        assert (
            isinstance(out, Fault) and out.code == "ValidationException" and "maximumPageSize" in out.message
        )
    forward = paginate(events, maximum_page_size=2)
    assert isinstance(forward, Page) and forward.next_page_token is not None
    flipped = paginate(
        events, maximum_page_size=2, reverse_order=True, next_page_token=forward.next_page_token
    )
    assert isinstance(flipped, Fault)  # a token continues its own direction only
    for junk in ("", "!!!", "eyJ4IjoxfQ", encode_token(1, True)[:-2], "a" * 3000, "é"):
        assert isinstance(decode_token(junk, False), Fault)
    assert decode_token(encode_token(4, False), False) == 4
    assert isinstance(decode_token(encode_token(0, False), False), Fault)


def test_decision_task_events_window() -> None:
    events = _events(12)
    assert [e.event_id for e in decision_task_events(events, 9, 0)] == list(range(1, 10))
    assert [
        e.event_id for e in decision_task_events(events, 9, 0, start_at_previous_started_event=True)
    ] == list(range(1, 10))
    assert [
        e.event_id for e in decision_task_events(events, 9, 3, start_at_previous_started_event=True)
    ] == list(range(3, 10))


# ------------------------------------------------------------------ describe


def test_describe_an_open_execution() -> None:
    k = Kit(tag_list=("t",), lambda_role="arn:role")
    k.decide(
        schedule("a1"),
        schedule("a2"),
        decision("StartTimer", timerId="t", startToFireTimeout="9"),
        decision("ScheduleLambdaFunction", id="f", name="n"),
    )
    k.send(m.Signal("s"))
    assert open_counts(k.ex) == {
        "openActivityTasks": 2,
        "openDecisionTasks": 1,
        "openTimers": 1,
        "openChildWorkflowExecutions": 0,
        "openLambdaFunctions": 1,
    }
    detail = describe(k.ex)
    assert not shape_errors(detail, "WorkflowExecutionDetail")
    assert detail["executionConfiguration"] == {
        "taskStartToCloseTimeout": "60",
        "executionStartToCloseTimeout": "3600",
        "taskList": {"name": "deciders"},
        "childPolicy": "TERMINATE",
        "lambdaRole": "arn:role",
    }
    assert detail["latestActivityTaskTimestamp"] == k.now / 1000
    info = execution_info(k.ex)
    assert info == {
        "execution": {"workflowId": "wf-1", "runId": "run-1"},
        "workflowType": WF.to_aws(),
        "startTimestamp": k.now / 1000,
        "executionStatus": "OPEN",
        "cancelRequested": False,
        "tagList": ["t"],
    }
    assert not shape_errors(info, "WorkflowExecutionInfo")


# ------------------------------------------------------------------ storage


def test_execution_and_events_round_trip_through_json() -> None:
    k = Kit(tag_list=("x",))
    k.decide(
        schedule("a1", heartbeatTimeout="5"), decision("StartTimer", timerId="t", startToFireTimeout="9")
    )
    k.poll_activity("a1")
    k.send(m.Heartbeat(5, "d"))
    doc = json.loads(json.dumps(execution_to_dict(k.ex)))
    assert execution_from_dict(doc) == k.ex
    for ev in k.events:
        assert event_from_dict(json.loads(json.dumps(event_to_dict(ev)))) == ev
    assert "decision_needed" not in doc  # defaults are left out of the document


def test_event_wire_shape() -> None:
    ev = HistoryEvent(3, 1_500, "ActivityTaskScheduled", {"activityId": "a"})
    assert attributes_member("ActivityTaskScheduled") == "activityTaskScheduledEventAttributes"
    assert ev.to_aws() == {
        "eventId": 3,
        "eventTimestamp": 1.5,
        "eventType": "ActivityTaskScheduled",
        "activityTaskScheduledEventAttributes": {"activityId": "a"},
    }


def test_history_reaching_the_event_limit_terminates(monkeypatch: pytest.MonkeyPatch) -> None:
    from foliot.core.swf import builder

    monkeypatch.setattr(builder, "EVENT_LIMIT", 8)
    k = Kit()
    k.decide(schedule("a1"))  # events 1..5
    k.send(m.Signal("s"))  # 6, 7 (DecisionTaskScheduled): the next event would be the last
    assert k.types[-2:] == ["DecisionTaskScheduled", "WorkflowExecutionTerminated"]
    assert k.events[-1].attributes == {"childPolicy": "TERMINATE", "cause": "EVENT_LIMIT_EXCEEDED"}
    assert len(k.events) == 8 and k.ex.close_status == "TERMINATED"


def test_poll_answers_match_botocore() -> None:
    k = Kit()
    claimed = k.poll_decision()
    window = decision_task_events(k.events, claimed.started_event_id, claimed.previous_started_event_id)
    page = paginate(window, maximum_page_size=2)
    assert isinstance(page, Page)
    answer = decision_task(k.ex, claimed, page, "tok")
    assert not shape_errors(answer, "DecisionTask")
    assert answer["nextPageToken"] == page.next_page_token and len(answer["events"]) == 2
    assert answer["startedEventId"] == 3 and answer["previousStartedEventId"] == 0
    k.complete_decision([schedule("a1", input="x")])
    task = k.poll_activity("a1")
    answer = activity_task(k.ex, task, "tok2")
    assert not shape_errors(answer, "ActivityTask")
    assert answer == {
        "taskToken": "tok2",
        "activityId": "a1",
        "startedEventId": 6,
        "workflowExecution": {"workflowId": "wf-1", "runId": "run-1"},
        "activityType": {"name": "Charge", "version": "1"},
        "input": "x",
    }


def test_pending_offers_are_the_offers_made_and_not_yet_claimed() -> None:
    k = Kit()
    assert pending_offers(k.ex) == (m.OfferDecisionTask("deciders", 2),)
    k.decide(schedule("a1"), schedule("a2", taskPriority="7"))
    offered = tuple(e for e in k.last_effects if isinstance(e, m.OfferActivityTask))
    assert pending_offers(k.ex) == offered
    k.poll_activity("a1")
    k.send(m.Signal("s"))
    assert pending_offers(k.ex) == (
        m.OfferDecisionTask("deciders", 9),
        m.OfferActivityTask("workers", 6, "a2", "7"),
    )
    k.send(m.Terminate())
    assert pending_offers(k.ex) == ()
