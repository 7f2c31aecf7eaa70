"""The next decision task while one is started (issue 26, point 14): its DecisionTaskScheduled
is recorded at once, as AWS records it, and the task is handed out only after the started one
completes or times out."""

from __future__ import annotations

from foliot.core.swf import messages as m
from foliot.core.swf.history import open_counts, pending_offers
from foliot.core.swf.model import execution_from_dict, execution_to_dict
from foliot.core.swf.recovery import owed_effects
from foliot.core.swf.timeouts import deadlines
from foliot.storage.swf import pending_tasks

from .swf_kit import Kit, decision, schedule


def _offers(effects: tuple[m.Effect, ...]) -> list[int]:
    return [e.scheduled_event_id for e in effects if isinstance(e, m.OfferDecisionTask)]


def _started_activity_and_decision() -> Kit:
    """An activity started by a worker, then a decision task started (a signal asked for it)."""
    k = Kit()
    k.decide(schedule("a1"))  # 2 scheduled, 3 started, 4 completed, 5 ActivityTaskScheduled
    k.poll_activity("a1")  # 6 ActivityTaskStarted
    k.send(m.Signal("go"))  # 7 signaled, 8 DecisionTaskScheduled
    k.poll_decision()  # 9 DecisionTaskStarted
    return k


def test_as_aws_records_it_scheduled_at_once_handed_out_after_the_completion() -> None:
    k = _started_activity_and_decision()
    k.send(m.CompleteActivity(5, result="ok"))
    assert k.types[8:] == ["DecisionTaskStarted", "ActivityTaskCompleted", "DecisionTaskScheduled"]
    assert k.attrs(11) == {"taskList": {"name": "deciders"}, "startToCloseTimeout": "60"}
    held = k.ex.next_decision
    assert held is not None and held.scheduled_event_id == 11
    # Not on the task list yet: not offered, not a pending task row, nothing to re-offer.
    assert _offers(k.last_effects) == []
    assert pending_tasks("us-east-1", k.ex) == [] and pending_offers(k.ex) == ()
    assert all(key.startswith(("workflow", "decision:8:")) for key in deadlines(k.ex))
    assert open_counts(k.ex)["openDecisionTasks"] == 1

    # Another event while one is held records no further DecisionTaskScheduled.
    k.send(m.Signal("again"))
    assert k.last(1) == ["WorkflowExecutionSignaled"]

    k.complete_decision([decision("RecordMarker", markerName="m")])
    assert k.types[8:] == [
        "DecisionTaskStarted",
        "ActivityTaskCompleted",
        "DecisionTaskScheduled",
        "WorkflowExecutionSignaled",
        "DecisionTaskCompleted",
        "MarkerRecorded",
    ]
    assert k.attrs(13) == {"scheduledEventId": 8, "startedEventId": 9}
    # Now the held task is the execution's decision task, offered on its list.
    assert k.ex.next_decision is None
    assert k.ex.decision is not None and k.ex.decision.scheduled_event_id == 11
    assert _offers(k.last_effects) == [11]
    assert [t.scheduled_event_id for t in pending_tasks("us-east-1", k.ex)] == [11]
    claimed = k.poll_decision()
    assert claimed.scheduled_event_id == 11 and claimed.previous_started_event_id == 9
    assert k.attrs(claimed.started_event_id) == {"identity": "decider", "scheduledEventId": 11}
    k.complete_decision([decision("CompleteWorkflowExecution")])
    assert k.last(1) == ["WorkflowExecutionCompleted"]


def test_the_started_task_is_refused_twice_and_the_held_one_cannot_be_polled_early() -> None:
    k = _started_activity_and_decision()
    k.send(m.CompleteActivity(5))
    assert k.refuse(m.PollDecision(11)).code == "UnknownResourceFault"
    assert k.refuse(m.CompleteDecision(11, [])).code == "UnknownResourceFault"


def test_a_batch_that_asks_again_adds_no_second_task_when_one_is_held() -> None:
    k = _started_activity_and_decision()
    k.send(m.Signal("s"))  # 10 signaled, 11 DecisionTaskScheduled (held)
    k.complete_decision([decision("CancelTimer", timerId="none")])  # CancelTimerFailed asks again
    assert k.last(2) == ["DecisionTaskCompleted", "CancelTimerFailed"]
    assert k.types.count("DecisionTaskScheduled") == 3
    assert k.ex.decision is not None and k.ex.decision.scheduled_event_id == 11


def test_a_timed_out_started_task_hands_out_the_held_one() -> None:
    k = _started_activity_and_decision()
    k.send(m.Signal("s"))  # 11 DecisionTaskScheduled, held
    k.advance(60_000)
    k.send(m.Fire("decision:8:START_TO_CLOSE"))
    assert k.last(1) == ["DecisionTaskTimedOut"]  # no second DecisionTaskScheduled
    assert k.attrs(12) == {"timeoutType": "START_TO_CLOSE", "scheduledEventId": 8, "startedEventId": 9}
    assert k.ex.decision is not None and k.ex.decision.scheduled_event_id == 11
    assert k.ex.decision.scheduled_at == k.now and k.ex.next_decision is None
    assert _offers(k.last_effects) == [11]
    assert k.poll_decision().scheduled_event_id == 11


def test_a_close_drops_the_held_task() -> None:
    k = _started_activity_and_decision()
    k.send(m.Signal("s"))
    k.send(m.Terminate(reason="r"))
    assert k.ex.decision is None and k.ex.next_decision is None


def test_the_held_task_survives_storage_and_recovery_offers_nothing_for_it() -> None:
    k = _started_activity_and_decision()
    k.send(m.Signal("s"))
    doc = execution_to_dict(k.ex)
    assert doc["next_decision"]["scheduled_event_id"] == 11
    assert execution_from_dict(doc) == k.ex
    owed = owed_effects(k.ex, lambda event_id: k.events[event_id - 1])
    assert _offers(owed) == []


def test_a_document_written_before_held_tasks_still_asks_after_the_started_one() -> None:
    """A stored document of the earlier form: `decision_needed` with a started task and no
    held one. Its completion refuses a close (UNHANDLED_DECISION) and schedules the next task
    after the batch, as before."""
    k = _started_activity_and_decision()
    doc = execution_to_dict(k.ex)
    doc["decision_needed"] = True
    k.ex = execution_from_dict(doc)
    k.complete_decision([decision("CompleteWorkflowExecution")])
    assert k.last(3) == ["DecisionTaskCompleted", "CompleteWorkflowExecutionFailed", "DecisionTaskScheduled"]
    assert k.ex.is_open and not k.ex.decision_needed and k.ex.next_decision is None
