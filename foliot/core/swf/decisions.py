"""Validation of a RespondDecisionTaskCompleted batch, all or nothing, before any is applied.

`parse_decisions(raw)` checks every decision against botocore's SWF model (decision type in
the enum, its attributes member present when it has required members, each member's JSON
type, length, enum and duration format) and that a closing decision, if any, is the last
one. The first problem comes back as a `Fault("ValidationException", ...)` worded as AWS
words it (`Value null at 'decisions.1.member.startTimerDecisionAttributes.timerId' failed to
satisfy constraint: Member must not be null`), and the caller leaves the execution and its
decision task untouched. Members the model does not know are ignored, as AWS ignores them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from .faults import Fault, validation
from .model import CHILD_POLICIES
from .timeouts import is_duration

DATA_MAX: Final = 32768
CLOSING: Final = frozenset(
    {
        "CompleteWorkflowExecution",
        "FailWorkflowExecution",
        "CancelWorkflowExecution",
        "ContinueAsNewWorkflowExecution",
    }
)
_INT32: Final = (-(2**31), 2**31 - 1)


@attrs.frozen
class Str:
    min: int = 0
    max: int = DATA_MAX


@attrs.frozen
class Duration:
    allow_none: bool = True
    required_length: bool = False  # DurationInSeconds (min 1) vs DurationInSecondsOptional
    range: tuple[int, int] | None = None  # bounds in seconds, where SWF documents some


@attrs.frozen
class TypeMember:
    """`{name, version}`: a workflow or activity type."""


@attrs.frozen
class TaskListMember:
    """`{name}`."""


@attrs.frozen
class Enum:
    values: tuple[str, ...]


@attrs.frozen
class Tags:
    """At most 5 tags of at most 256 characters."""


@attrs.frozen
class Priority:
    """A string holding a 32-bit signed integer."""


Member = Str | Duration | TypeMember | TaskListMember | Enum | Tags | Priority

_DATA = Str(0, DATA_MAX)
_ID = Str(1, 256)
_RUN_ID = Str(0, 64)

# decision type -> (attributes member, {member: (spec, required)})
SCHEMA: Final[dict[str, tuple[str, dict[str, tuple[Member, bool]]]]] = {
    "ScheduleActivityTask": (
        "scheduleActivityTaskDecisionAttributes",
        {
            "activityType": (TypeMember(), True),
            "activityId": (_ID, True),
            "control": (_DATA, False),
            "input": (_DATA, False),
            "scheduleToCloseTimeout": (Duration(), False),
            "taskList": (TaskListMember(), False),
            "taskPriority": (Priority(), False),
            "scheduleToStartTimeout": (Duration(), False),
            "startToCloseTimeout": (Duration(), False),
            "heartbeatTimeout": (Duration(), False),
        },
    ),
    "RequestCancelActivityTask": (
        "requestCancelActivityTaskDecisionAttributes",
        {"activityId": (_ID, True)},
    ),
    "CompleteWorkflowExecution": (
        "completeWorkflowExecutionDecisionAttributes",
        {"result": (_DATA, False)},
    ),
    "FailWorkflowExecution": (
        "failWorkflowExecutionDecisionAttributes",
        {"reason": (Str(0, 256), False), "details": (_DATA, False)},
    ),
    "CancelWorkflowExecution": (
        "cancelWorkflowExecutionDecisionAttributes",
        {"details": (_DATA, False)},
    ),
    "ContinueAsNewWorkflowExecution": (
        "continueAsNewWorkflowExecutionDecisionAttributes",
        {
            "input": (_DATA, False),
            "executionStartToCloseTimeout": (Duration(), False),
            "taskList": (TaskListMember(), False),
            "taskPriority": (Priority(), False),
            "taskStartToCloseTimeout": (Duration(), False),
            "childPolicy": (Enum(CHILD_POLICIES), False),
            "tagList": (Tags(), False),
            "workflowTypeVersion": (Str(1, 64), False),
            "lambdaRole": (Str(1, 1600), False),
        },
    ),
    "RecordMarker": (
        "recordMarkerDecisionAttributes",
        {"markerName": (Str(1, 256), True), "details": (_DATA, False)},
    ),
    "StartTimer": (
        "startTimerDecisionAttributes",
        {
            "timerId": (_ID, True),
            "control": (_DATA, False),
            "startToFireTimeout": (Duration(allow_none=False, required_length=True), True),
        },
    ),
    "CancelTimer": ("cancelTimerDecisionAttributes", {"timerId": (_ID, True)}),
    "SignalExternalWorkflowExecution": (
        "signalExternalWorkflowExecutionDecisionAttributes",
        {
            "workflowId": (_ID, True),
            "runId": (_RUN_ID, False),
            "signalName": (_ID, True),
            "input": (_DATA, False),
            "control": (_DATA, False),
        },
    ),
    "RequestCancelExternalWorkflowExecution": (
        "requestCancelExternalWorkflowExecutionDecisionAttributes",
        {"workflowId": (_ID, True), "runId": (_RUN_ID, False), "control": (_DATA, False)},
    ),
    "StartChildWorkflowExecution": (
        "startChildWorkflowExecutionDecisionAttributes",
        {
            "workflowType": (TypeMember(), True),
            "workflowId": (_ID, True),
            "control": (_DATA, False),
            "input": (_DATA, False),
            "executionStartToCloseTimeout": (Duration(), False),
            "taskList": (TaskListMember(), False),
            "taskPriority": (Priority(), False),
            "taskStartToCloseTimeout": (Duration(), False),
            "childPolicy": (Enum(CHILD_POLICIES), False),
            "tagList": (Tags(), False),
            "lambdaRole": (Str(1, 1600), False),
        },
    ),
    "ScheduleLambdaFunction": (
        "scheduleLambdaFunctionDecisionAttributes",
        {
            "id": (_ID, True),
            "name": (Str(1, 64), True),
            "control": (_DATA, False),
            "input": (_DATA, False),
            "startToCloseTimeout": (Duration(allow_none=False, range=(1, 900)), False),
        },
    ),
}
DECISION_TYPES: Final = tuple(SCHEMA)


@attrs.frozen
class Decision:
    """One validated decision: its type and its attributes (known members only)."""

    type: str
    attributes: Mapping[str, Any] = attrs.field(factory=dict)

    def get(self, member: str) -> Any:
        return self.attributes.get(member)


class Invalid(Exception):
    def __init__(self, fault: Fault) -> None:
        self.fault = fault


def _fail(path: str, value: Any, constraint: str) -> Invalid:
    shown = "null" if value is None else repr(value) if not isinstance(value, str) else f"'{value}'"
    if isinstance(value, str) and len(value) > 64:
        shown = f"'{value[:64]}...'"
    return Invalid(
        validation(
            f"1 validation error detected: Value {shown} at '{path}' failed to satisfy constraint: "
            f"{constraint}"
        )
    )


def _string(path: str, value: Any, lo: int, hi: int) -> str:
    if not isinstance(value, str):
        raise _fail(path, value, "Member must be a string")
    if len(value) < lo:
        raise _fail(path, value, f"Member must have length greater than or equal to {lo}")
    if len(value) > hi:
        raise _fail(path, value, f"Member must have length less than or equal to {hi}")
    return value


def check_member(path: str, spec: Member, value: Any) -> Any:
    """The member's value once it satisfies `spec`; raises `Invalid` naming `path` otherwise."""
    if isinstance(spec, Str):
        return _string(path, value, spec.min, spec.max)
    if isinstance(spec, Duration):
        text = _string(path, value, 1 if spec.required_length else 0, 8)
        if not is_duration(text, allow_none=spec.allow_none):
            allowed = "an integer number of seconds" + (" or NONE" if spec.allow_none else "")
            raise _fail(path, value, f"Member must be {allowed}")
        if spec.range is not None and text != "NONE" and not spec.range[0] <= int(text) <= spec.range[1]:
            raise _fail(path, value, f"Member must be an integer between {spec.range[0]} and {spec.range[1]}")
        return text
    if isinstance(spec, Enum):
        if not isinstance(value, str) or value not in spec.values:
            raise _fail(path, value, f"Member must satisfy enum value set: [{', '.join(spec.values)}]")
        return value
    if isinstance(spec, Priority):
        text = _string(path, value, 0, 11)
        body = text[1:] if text[:1] in ("-", "+") else text
        if not body or not body.isascii() or not body.isdigit() or not _INT32[0] <= int(text) <= _INT32[1]:
            raise _fail(path, value, "Member must be an integer between -2147483648 and 2147483647")
        return text
    if isinstance(spec, Tags):
        if not isinstance(value, list):
            raise _fail(path, value, "Member must be a list")
        if len(value) > 5:
            raise _fail(path, value, "Member must have length less than or equal to 5")
        return [_string(f"{path}.{i}.member", tag, 0, 256) for i, tag in enumerate(value, 1)]
    if not isinstance(value, dict):
        raise _fail(path, value, "Member must be a structure")
    if isinstance(spec, TaskListMember):
        name = value.get("name")
        if name is None:
            raise _fail(f"{path}.name", None, "Member must not be null")
        return {"name": _string(f"{path}.name", name, 1, 256)}
    name, version = value.get("name"), value.get("version")
    if name is None:
        raise _fail(f"{path}.name", None, "Member must not be null")
    if version is None:
        raise _fail(f"{path}.version", None, "Member must not be null")
    return {
        "name": _string(f"{path}.name", name, 1, 256),
        "version": _string(f"{path}.version", version, 1, 64),
    }


def _one(index: int, raw: Any) -> Decision:
    base = f"decisions.{index}.member"
    if not isinstance(raw, dict):
        raise _fail(base, raw, "Member must be a structure")
    kind = raw.get("decisionType")
    if kind is None:
        raise _fail(f"{base}.decisionType", None, "Member must not be null")
    if kind not in SCHEMA:
        raise _fail(
            f"{base}.decisionType", kind, f"Member must satisfy enum value set: [{', '.join(SCHEMA)}]"
        )
    member, members = SCHEMA[kind]
    attributes = raw.get(member)
    if attributes is None:
        if any(required for _, required in members.values()):
            raise _fail(f"{base}.{member}", None, "Member must not be null")
        return Decision(kind)
    if not isinstance(attributes, dict):
        raise _fail(f"{base}.{member}", attributes, "Member must be a structure")
    checked: dict[str, Any] = {}
    for name, (spec, required) in members.items():
        value = attributes.get(name)
        if value is None:
            if required:
                raise _fail(f"{base}.{member}.{name}", None, "Member must not be null")
            continue
        checked[name] = check_member(f"{base}.{member}.{name}", spec, value)
    return Decision(kind, checked)


def parse_decisions(raw: Sequence[Any] | None) -> tuple[Decision, ...] | Fault:
    """The batch as validated decisions, or the first reason to reject all of it."""
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        return validation(
            "1 validation error detected: Value at 'decisions' failed to satisfy constraint: "
            "Member must be a list"
        )
    try:
        out = tuple(_one(i, item) for i, item in enumerate(raw, 1))
    except Invalid as exc:
        return exc.fault
    for decision in out[:-1]:
        if decision.type in CLOSING:
            return validation("Close must be last decision in list")
    return out


def referenced_types(decisions: Sequence[Decision]) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """The (name, version) activity types and workflow types a batch names, so the runtime can
    look them up before calling the machine. ContinueAsNew's type is the execution's own (at
    `workflowTypeVersion` when given): the caller adds it."""
    activity_types: set[tuple[str, str]] = set()
    workflow_types: set[tuple[str, str]] = set()
    for d in decisions:
        if d.type == "ScheduleActivityTask":
            t = d.get("activityType")
            activity_types.add((t["name"], t["version"]))
        elif d.type == "StartChildWorkflowExecution":
            t = d.get("workflowType")
            workflow_types.add((t["name"], t["version"]))
    return activity_types, workflow_types
