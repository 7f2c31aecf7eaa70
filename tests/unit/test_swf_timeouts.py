"""The six SWF timeouts (and Lambda's) as data: the deadlines reported, the events appended."""

from __future__ import annotations

import pytest

from foliot.core.swf import messages as m
from foliot.core.swf.timeouts import deadlines, parse_key, parse_seconds

from .swf_kit import Kit, decision, schedule


def test_parse_seconds() -> None:
    assert parse_seconds("0") == 0 and parse_seconds("99999999") == 99_999_999
    assert parse_seconds("NONE") is None
    for bad in ("", "-1", "1.0", " 1", "123456789", "none", "\u0661"):
        with pytest.raises(ValueError):
            parse_seconds(bad)
    with pytest.raises(ValueError):
        parse_seconds("NONE", allow_none=False)


def test_parse_key() -> None:
    assert parse_key("workflow") == ("workflow", 0, "START_TO_CLOSE")
    assert parse_key("timer:7") == ("timer", 7, "")
    assert parse_key("activity:12:HEARTBEAT") == ("activity", 12, "HEARTBEAT")
    for bad in ("", "timer", "timer:x", "activity:1", "decision:²:START_TO_CLOSE", "other:1:X", "timer:1:2"):
        assert parse_key(bad) is None


def test_workflow_start_to_close() -> None:
    k = Kit(child_policy="ABANDON")
    assert deadlines(k.ex) == {"workflow": k.now + 3_600_000}
    k.advance(3_599_999)
    assert k.send(m.Fire("workflow")).events == ()  # not yet due: a stale or early firing
    k.advance(1)
    k.send(m.Fire("workflow"))
    assert k.last(1) == ["WorkflowExecutionTimedOut"]
    assert k.events[-1].attributes == {"timeoutType": "START_TO_CLOSE", "childPolicy": "ABANDON"}
    assert k.ex.close_status == "TIMED_OUT" and deadlines(k.ex) == {}
    assert m.RetireTask("decision", "deciders", 2) in k.last_effects
    assert k.last_effects[-1] == m.Closed("TIMED_OUT")


def test_decision_task_start_to_close() -> None:
    k = Kit()
    assert "decision:2:START_TO_CLOSE" not in deadlines(k.ex)  # only once started
    k.poll_decision()
    assert deadlines(k.ex)["decision:2:START_TO_CLOSE"] == k.now + 60_000
    k.advance(60_000)
    k.send(m.Fire("decision:2:START_TO_CLOSE"))
    assert k.types[3:] == ["DecisionTaskTimedOut", "DecisionTaskScheduled"]
    assert k.attrs(4) == {"timeoutType": "START_TO_CLOSE", "scheduledEventId": 2, "startedEventId": 3}
    assert m.RetireTask("decision", "deciders", 2) in k.last_effects
    assert m.OfferDecisionTask("deciders", 5) in k.last_effects
    assert k.refuse(m.CompleteDecision(2, [])).code == "UnknownResourceFault"  # the late answer
    claimed = k.poll_decision()
    assert claimed.previous_started_event_id == 0  # the timed-out task was never processed


def test_sticky_override_reverted_when_its_task_times_out_started() -> None:
    k = Kit()
    k.decide(task_list="sticky", task_list_schedule_to_start_timeout="5")
    k.send(m.Signal("s"))
    k.poll_decision()
    k.advance(60_000)
    k.send(m.Fire("decision:6:START_TO_CLOSE"))
    assert k.events[-1].attributes["taskList"] == {"name": "deciders"}


def test_permanent_override_survives_a_timeout() -> None:
    k = Kit()
    k.decide(task_list="elsewhere")
    k.send(m.Signal("s"))
    k.poll_decision()
    k.advance(60_000)
    k.send(m.Fire("decision:6:START_TO_CLOSE"))
    assert k.events[-1].attributes == {"taskList": {"name": "elsewhere"}, "startToCloseTimeout": "60"}


def test_none_execution_timeout_is_capped_at_a_year() -> None:
    k = Kit(execution_start_to_close_timeout="NONE")
    assert deadlines(k.ex)["workflow"] == k.now + 365 * 24 * 3600 * 1000


def test_decision_task_none_timeout_is_never_armed() -> None:
    k = Kit(task_start_to_close_timeout="NONE")
    k.poll_decision()
    assert set(deadlines(k.ex)) == {"workflow"}


def test_sticky_decision_task_list_schedule_to_start() -> None:
    k = Kit()
    k.poll_decision()
    k.complete_decision([], task_list="sticky", task_list_schedule_to_start_timeout="5")
    assert k.attrs(4)["taskList"] == {"name": "sticky"}
    assert k.attrs(4)["taskListScheduleToStartTimeout"] == "5"
    k.send(m.Signal("s"))
    assert k.attrs(6) == {
        "taskList": {"name": "sticky"},
        "startToCloseTimeout": "60",
        "scheduleToStartTimeout": "5",
    }
    assert m.OfferDecisionTask("sticky", 6) in k.last_effects
    assert deadlines(k.ex)["decision:6:SCHEDULE_TO_START"] == k.now + 5000
    k.advance(5000)
    k.send(m.Fire("decision:6:SCHEDULE_TO_START"))
    assert k.types[6:] == ["DecisionTaskTimedOut", "DecisionTaskScheduled"]
    assert k.attrs(7) == {"timeoutType": "SCHEDULE_TO_START", "scheduledEventId": 6, "startedEventId": 0}
    assert k.attrs(8) == {
        "taskList": {"name": "deciders"},
        "startToCloseTimeout": "60",
    }  # back to its own list


def _activity_kit(**timeouts: str) -> Kit:
    k = Kit()
    k.decide(schedule("a1", **timeouts))
    return k


def test_activity_schedule_to_start() -> None:
    k = _activity_kit(scheduleToStartTimeout="10")
    assert deadlines(k.ex)["activity:5:SCHEDULE_TO_START"] == k.now + 10_000
    k.advance(10_000)
    k.send(m.Fire("activity:5:SCHEDULE_TO_START"))
    assert k.types[5:] == ["ActivityTaskTimedOut", "DecisionTaskScheduled"]
    assert k.attrs(6) == {"timeoutType": "SCHEDULE_TO_START", "scheduledEventId": 5, "startedEventId": 0}
    assert m.RetireTask("activity", "workers", 5) in k.last_effects
    assert k.refuse(m.PollActivity(5)).code == "UnknownResourceFault"


def test_activity_start_cancels_schedule_to_start() -> None:
    k = _activity_kit(scheduleToStartTimeout="10", startToCloseTimeout="20")
    k.advance(3000)
    k.poll_activity("a1")
    assert m.CancelDeadline("activity:5:SCHEDULE_TO_START") in k.last_effects
    assert m.ArmDeadline("activity:5:START_TO_CLOSE", k.now + 20_000) in k.last_effects
    k.advance(7000)
    assert k.send(m.Fire("activity:5:SCHEDULE_TO_START")).events == ()  # stale


def test_activity_start_to_close() -> None:
    k = _activity_kit(startToCloseTimeout="20")
    k.poll_activity("a1")
    k.advance(20_000)
    k.send(m.Fire("activity:5:START_TO_CLOSE"))
    assert k.types[6:] == ["ActivityTaskTimedOut", "DecisionTaskScheduled"]
    assert k.attrs(7) == {"timeoutType": "START_TO_CLOSE", "scheduledEventId": 5, "startedEventId": 6}
    assert k.refuse(m.CompleteActivity(5)).message == "Unknown activity, scheduledEventId = 5"


def test_activity_schedule_to_close_spans_queue_and_run() -> None:
    k = _activity_kit(scheduleToCloseTimeout="30", startToCloseTimeout="NONE", scheduleToStartTimeout="NONE")
    assert set(deadlines(k.ex)) == {"workflow", "activity:5:SCHEDULE_TO_CLOSE"}
    k.advance(20_000)
    k.poll_activity("a1")
    assert set(deadlines(k.ex)) == {"workflow", "activity:5:SCHEDULE_TO_CLOSE"}
    k.advance(10_000)
    k.send(m.Fire("activity:5:SCHEDULE_TO_CLOSE"))
    assert k.attrs(7) == {"timeoutType": "SCHEDULE_TO_CLOSE", "scheduledEventId": 5, "startedEventId": 6}


def test_activity_heartbeat_is_moved_by_each_heartbeat_and_carries_details() -> None:
    k = _activity_kit(heartbeatTimeout="10")
    k.poll_activity("a1")
    start = k.now
    assert deadlines(k.ex)["activity:5:HEARTBEAT"] == start + 10_000
    k.advance(8000)
    k.send(m.Heartbeat(5, "half"))
    assert m.ArmDeadline("activity:5:HEARTBEAT", start + 18_000) in k.last_effects
    assert k.last_effects and not k.send(m.Heartbeat(5)).events  # heartbeats add no event
    k.advance(2000)
    assert k.send(m.Fire("activity:5:HEARTBEAT")).events == ()  # the first arming's time: stale
    k.advance(8000)
    k.send(m.Fire("activity:5:HEARTBEAT"))
    assert k.attrs(7) == {
        "timeoutType": "HEARTBEAT",
        "scheduledEventId": 5,
        "startedEventId": 6,
        "details": "half",
    }


def test_lambda_start_to_close() -> None:
    k = Kit(lambda_role="arn:aws:iam::1:role/x")
    k.decide(decision("ScheduleLambdaFunction", id="f1", name="fn", startToCloseTimeout="7"))
    sid = 5
    assert "lambda:5:START_TO_CLOSE" not in deadlines(k.ex)  # from the start, not the schedule
    k.send(m.LambdaStarted(sid))
    k.advance(7000)
    k.send(m.Fire("lambda:5:START_TO_CLOSE"))
    assert k.types[5:] == ["LambdaFunctionStarted", "LambdaFunctionTimedOut", "DecisionTaskScheduled"]
    assert k.attrs(7) == {"scheduledEventId": 5, "startedEventId": 6, "timeoutType": "START_TO_CLOSE"}
    assert k.refuse(m.LambdaCompleted(sid, "late")).code == "UnknownResourceFault"


@pytest.mark.parametrize(
    "key", ["workflow", "decision:2:START_TO_CLOSE", "timer:9", "activity:5:HEARTBEAT", "junk"]
)
def test_stale_and_unknown_keys_change_nothing(key: str) -> None:
    k = Kit()
    k.advance(10**9)
    k.send(m.Fire("workflow"))
    before = k.ex
    tr = k.send(m.Fire(key))
    assert tr.events == () and tr.effects == () and tr.execution is before


def test_none_disables_every_activity_timeout() -> None:
    k = _activity_kit(
        scheduleToStartTimeout="NONE",
        scheduleToCloseTimeout="NONE",
        startToCloseTimeout="NONE",
        heartbeatTimeout="NONE",
    )
    k.poll_activity("a1")
    k.send(m.Heartbeat(5))
    assert set(deadlines(k.ex)) == {"workflow"}


def test_a_timeout_while_a_decision_task_is_started_waits_for_it() -> None:
    k = _activity_kit(scheduleToStartTimeout="1")
    k.send(m.Signal("s"))
    k.poll_decision()
    k.advance(1000)
    k.send(m.Fire("activity:5:SCHEDULE_TO_START"))
    assert k.last(2) == ["ActivityTaskTimedOut", "DecisionTaskScheduled"]
    assert not any(isinstance(e, m.OfferDecisionTask) for e in k.last_effects)  # held back
    k.complete_decision([decision("RecordMarker", markerName="m")])
    assert k.last(2) == ["DecisionTaskCompleted", "MarkerRecorded"]
    assert any(isinstance(e, m.OfferDecisionTask) for e in k.last_effects)
