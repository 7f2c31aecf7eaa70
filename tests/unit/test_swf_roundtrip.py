"""A full decider/worker round trip through the pure machine, event by event."""

from __future__ import annotations

from foliot.core.swf import messages as m
from foliot.core.swf.history import decision_task_events, describe, open_counts

from .swf_kit import Kit, decision, schedule, shape_errors


def test_decider_worker_round_trip() -> None:
    k = Kit(input='{"order": 7}')
    assert k.types == ["WorkflowExecutionStarted", "DecisionTaskScheduled"]
    assert k.attrs(1)["taskList"] == {"name": "deciders"}
    assert k.attrs(1)["childPolicy"] == "TERMINATE"
    assert m.OfferDecisionTask("deciders", 2) in k.effects
    assert m.ArmDeadline("workflow", k.now + 3600_000) in k.effects

    claimed = k.poll_decision()
    assert claimed == m.DecisionTaskClaimed(
        scheduled_event_id=2, started_event_id=3, previous_started_event_id=0
    )
    assert m.ArmDeadline("decision:2:START_TO_CLOSE", k.now + 60_000) in k.last_effects
    view = decision_task_events(k.events, claimed.started_event_id, claimed.previous_started_event_id)
    assert [e.event_id for e in view] == [1, 2, 3]

    k.complete_decision([schedule("charge", input="42")], execution_context="ctx-1")
    assert k.types[3:] == ["DecisionTaskCompleted", "ActivityTaskScheduled"]
    assert k.attrs(4) == {"scheduledEventId": 2, "startedEventId": 3, "executionContext": "ctx-1"}
    assert k.attrs(5)["decisionTaskCompletedEventId"] == 4
    assert k.attrs(5)["taskList"] == {"name": "workers"}
    assert m.OfferActivityTask("workers", 5, "charge") in k.last_effects
    assert m.RetireTask("decision", "deciders", 2) in k.last_effects
    assert m.CancelDeadline("decision:2:START_TO_CLOSE") in k.last_effects
    assert k.ex.decision is None

    task = k.poll_activity("charge")
    assert task == m.ActivityTaskClaimed(5, 6, "charge", k.ex.activity("charge").activity_type, "42")  # type: ignore[union-attr]
    k.send(m.CompleteActivity(5, result="ok"))
    assert k.types[6:] == ["ActivityTaskCompleted", "DecisionTaskScheduled"]
    assert k.attrs(7) == {"result": "ok", "scheduledEventId": 5, "startedEventId": 6}

    claimed = k.poll_decision()
    assert claimed.previous_started_event_id == 3 and claimed.started_event_id == 9
    window = decision_task_events(k.events, 9, 3, start_at_previous_started_event=True)
    assert [e.event_id for e in window] == list(range(3, 10))
    k.complete_decision([decision("CompleteWorkflowExecution", result="done")])
    assert k.types[9:] == ["DecisionTaskCompleted", "WorkflowExecutionCompleted"]
    assert k.attrs(11) == {"result": "done", "decisionTaskCompletedEventId": 10}
    assert k.ex.status == "CLOSED" and k.ex.close_status == "COMPLETED" and k.ex.closed_at == k.now
    assert m.CancelDeadline("workflow") in k.last_effects
    assert k.last_effects[-1] == m.Closed("COMPLETED")
    assert open_counts(k.ex) == {
        "openActivityTasks": 0,
        "openDecisionTasks": 0,
        "openTimers": 0,
        "openChildWorkflowExecutions": 0,
        "openLambdaFunctions": 0,
    }
    detail = describe(k.ex)
    assert not shape_errors(detail, "WorkflowExecutionDetail")
    assert detail["executionInfo"]["closeStatus"] == "COMPLETED"
    assert detail["latestExecutionContext"] == "ctx-1"


def test_a_longer_conversation_event_by_event() -> None:
    """Activity, timer and signal interleaved; every event and every link id checked."""
    k = Kit()
    k.decide(schedule("a1"), decision("StartTimer", timerId="t1", startToFireTimeout="60"))
    k.poll_activity("a1")
    k.advance(1000)
    k.send(m.Signal("poke", "p"))
    k.poll_decision()
    k.send(m.Heartbeat(5, "10%"))  # no event
    k.complete_decision([decision("RecordMarker", markerName="seen-poke")])
    k.send(m.CompleteActivity(5, "charged"))
    k.advance(59_000)
    k.send(m.Fire("timer:6"))  # a decision task is already scheduled: no second one
    claimed = k.poll_decision()
    k.complete_decision([decision("CompleteWorkflowExecution", result="done")])
    assert [(e.event_id, e.event_type) for e in k.events] == [
        (1, "WorkflowExecutionStarted"),
        (2, "DecisionTaskScheduled"),
        (3, "DecisionTaskStarted"),
        (4, "DecisionTaskCompleted"),
        (5, "ActivityTaskScheduled"),
        (6, "TimerStarted"),
        (7, "ActivityTaskStarted"),
        (8, "WorkflowExecutionSignaled"),
        (9, "DecisionTaskScheduled"),
        (10, "DecisionTaskStarted"),
        (11, "DecisionTaskCompleted"),
        (12, "MarkerRecorded"),
        (13, "ActivityTaskCompleted"),
        (14, "DecisionTaskScheduled"),
        (15, "TimerFired"),
        (16, "DecisionTaskStarted"),
        (17, "DecisionTaskCompleted"),
        (18, "WorkflowExecutionCompleted"),
    ]
    links = {
        4: {"scheduledEventId": 2, "startedEventId": 3},
        5: {"decisionTaskCompletedEventId": 4},
        6: {"decisionTaskCompletedEventId": 4},
        7: {"scheduledEventId": 5},
        10: {"scheduledEventId": 9},
        11: {"scheduledEventId": 9, "startedEventId": 10},
        12: {"decisionTaskCompletedEventId": 11},
        13: {"scheduledEventId": 5, "startedEventId": 7},
        15: {"startedEventId": 6},
        16: {"scheduledEventId": 14},
        17: {"scheduledEventId": 14, "startedEventId": 16},
        18: {"decisionTaskCompletedEventId": 17},
    }
    for event_id, expected in links.items():
        attributes = k.attrs(event_id)
        assert {name: attributes[name] for name in expected} == expected, event_id
    assert claimed.previous_started_event_id == 10 and claimed.started_event_id == 16
    assert k.events[14].timestamp - k.events[5].timestamp == 60_000
