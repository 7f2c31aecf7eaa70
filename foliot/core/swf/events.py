"""History events: numbered from 1, with the attribute members botocore's SWF model names.

An event is stored as a row (`event_to_dict`/`event_from_dict`) and rendered for the wire with
`to_aws`: `{eventId, eventTimestamp, eventType, <eventType in lowerCamel>EventAttributes}`,
the timestamp in epoch seconds as the JSON 1.0 protocol carries it. Attribute dicts never
hold `None`: an absent optional member is left out, as AWS does.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

# Events after which the decider must be asked what to do next: each schedules a decision
# task (or, while one is started, another one after it).
DECISION_TRIGGERS: Final = frozenset(
    {
        "WorkflowExecutionStarted",
        "WorkflowExecutionSignaled",
        "WorkflowExecutionCancelRequested",
        "DecisionTaskTimedOut",
        "ActivityTaskCompleted",
        "ActivityTaskFailed",
        "ActivityTaskTimedOut",
        "ActivityTaskCanceled",
        "ScheduleActivityTaskFailed",
        "RequestCancelActivityTaskFailed",
        "CompleteWorkflowExecutionFailed",
        "FailWorkflowExecutionFailed",
        "CancelWorkflowExecutionFailed",
        "ContinueAsNewWorkflowExecutionFailed",
        "RecordMarkerFailed",
        "TimerFired",
        "StartTimerFailed",
        "CancelTimerFailed",
        "StartChildWorkflowExecutionFailed",
        "ChildWorkflowExecutionStarted",
        "ChildWorkflowExecutionCompleted",
        "ChildWorkflowExecutionFailed",
        "ChildWorkflowExecutionTimedOut",
        "ChildWorkflowExecutionCanceled",
        "ChildWorkflowExecutionTerminated",
        "SignalExternalWorkflowExecutionFailed",
        "ExternalWorkflowExecutionSignaled",
        "RequestCancelExternalWorkflowExecutionFailed",
        "ExternalWorkflowExecutionCancelRequested",
        "LambdaFunctionCompleted",
        "LambdaFunctionFailed",
        "LambdaFunctionTimedOut",
        "ScheduleLambdaFunctionFailed",
        "StartLambdaFunctionFailed",
    }
)


def attributes_member(event_type: str) -> str:
    """`ActivityTaskScheduled` -> `activityTaskScheduledEventAttributes`."""
    return event_type[0].lower() + event_type[1:] + "EventAttributes"


@attrs.frozen
class HistoryEvent:
    event_id: int
    timestamp: int  # epoch ms
    event_type: str
    attributes: dict[str, Any] = attrs.field(factory=dict)

    def to_aws(self) -> dict[str, Any]:
        return {
            "eventId": self.event_id,
            "eventTimestamp": self.timestamp / 1000,
            "eventType": self.event_type,
            attributes_member(self.event_type): self.attributes,
        }


def event_to_dict(event: HistoryEvent) -> dict[str, Any]:
    return {"id": event.event_id, "at": event.timestamp, "type": event.event_type, "attrs": event.attributes}


def event_from_dict(data: dict[str, Any]) -> HistoryEvent:
    return HistoryEvent(int(data["id"]), int(data["at"]), str(data["type"]), dict(data["attrs"]))


def compact(**members: Any) -> dict[str, Any]:
    """An attributes dict without the members that are `None`."""
    return {k: v for k, v in members.items() if v is not None}
