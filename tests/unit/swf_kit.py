"""A harness for driving the pure SWF machine in tests, and a checker of botocore's shapes."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import botocore  # type: ignore[import-untyped]

from foliot.core.swf import machine
from foliot.core.swf import messages as m
from foliot.core.swf.events import HistoryEvent
from foliot.core.swf.faults import Fault
from foliot.core.swf.model import ActivityTypeInfo, Execution, TypeRef, WorkflowTypeInfo

T0 = 1_800_000_000_000

WF = TypeRef("Order", "1")
ACT = TypeRef("Charge", "1")

WF_INFO = WorkflowTypeInfo(
    WF,
    default_task_start_to_close_timeout="60",
    default_execution_start_to_close_timeout="3600",
    default_task_list="deciders",
    default_child_policy="TERMINATE",
)
ACT_INFO = ActivityTypeInfo(
    ACT,
    default_task_start_to_close_timeout="300",
    default_task_heartbeat_timeout="NONE",
    default_task_list="workers",
    default_task_schedule_to_start_timeout="60",
    default_task_schedule_to_close_timeout="NONE",
)
CATALOG = m.StaticCatalog([WF_INFO], [ACT_INFO])


@cache
def swf_model() -> dict[str, Any]:
    path = Path(botocore.__file__).parent / "data" / "swf" / "2012-01-25" / "service-2.json.gz"
    with gzip.open(path) as fh:
        return json.load(fh)  # type: ignore[no-any-return]


def shape_errors(value: Any, shape_name: str, path: str = "") -> list[str]:
    """Where `value` departs from botocore's shape: missing required or unknown members,
    wrong JSON types, values outside an enum, lengths out of bounds."""
    shape = swf_model()["shapes"][shape_name]
    kind = shape["type"]
    errors: list[str] = []
    if kind == "structure":
        if not isinstance(value, dict):
            return [f"{path}: not a structure"]
        members = shape["members"]
        for name in shape.get("required", []):
            if name not in value:
                errors.append(f"{path}.{name}: required member missing")
        for name, inner in value.items():
            if name not in members:
                errors.append(f"{path}.{name}: unknown member")
            else:
                errors += shape_errors(inner, members[name]["shape"], f"{path}.{name}")
    elif kind == "list":
        if not isinstance(value, list):
            return [f"{path}: not a list"]
        if "max" in shape and len(value) > shape["max"]:
            errors.append(f"{path}: too many items")
        for i, item in enumerate(value):
            errors += shape_errors(item, shape["member"]["shape"], f"{path}[{i}]")
    elif kind == "string":
        if not isinstance(value, str):
            return [f"{path}: not a string: {value!r}"]
        if "enum" in shape and value not in shape["enum"]:
            errors.append(f"{path}: {value!r} not in enum")
        if len(value) < shape.get("min", 0) or len(value) > shape.get("max", 1 << 30):
            errors.append(f"{path}: length out of bounds")
    elif kind in ("long", "integer"):
        if type(value) is not int:
            errors.append(f"{path}: not an integer: {value!r}")
    elif kind == "timestamp":
        if not isinstance(value, int | float):
            errors.append(f"{path}: not a timestamp")
    elif kind == "boolean" and type(value) is not bool:
        errors.append(f"{path}: not a boolean")
    return errors


class Kit:
    """One execution, its whole history, and every effect so far."""

    def __init__(self, catalog: m.Catalog = CATALOG, **start: Any) -> None:
        self.catalog = catalog
        self.now = T0
        self.events: list[HistoryEvent] = []
        self.effects: list[m.Effect] = []
        self.runs = 0
        request = m.StartRequest(domain="d", workflow_id="wf-1", workflow_type=WF, **start)
        tr = machine.start(request, catalog.workflow_type(WF), "run-1", self.now)
        assert isinstance(tr, m.Transition), tr
        self._take(tr)

    @property
    def types(self) -> list[str]:
        return [e.event_type for e in self.events]

    def last(self, n: int) -> list[str]:
        return self.types[-n:]

    def attrs(self, event_id: int) -> dict[str, Any]:
        return self.events[event_id - 1].attributes

    def ctx(self) -> m.Context:
        self.runs += 1
        return m.Context(now=self.now, catalog=self.catalog, new_run_id=f"run-{self.runs + 1}")

    def _take(self, tr: m.Transition) -> m.Transition:
        for ev in tr.events:
            assert ev.event_id == len(self.events) + 1, "event ids must be contiguous"
            errors = shape_errors(ev.to_aws(), "HistoryEvent")
            assert not errors, errors
            self.events.append(ev)
        assert tr.execution.last_event_id == len(self.events)
        self.ex: Execution = tr.execution
        self.effects += tr.effects
        self.last_effects = tr.effects
        return tr

    def send(self, msg: m.Message) -> m.Transition:
        tr = machine.transition(self.ex, msg, self.ctx())
        assert isinstance(tr, m.Transition), tr
        return self._take(tr)

    def refuse(self, msg: m.Message) -> Fault:
        before = self.ex
        out = machine.transition(self.ex, msg, self.ctx())
        assert isinstance(out, Fault), out
        assert self.ex is before
        return out

    def advance(self, ms: int) -> None:
        self.now += ms

    # conveniences --------------------------------------------------------------------

    def poll_decision(self, identity: str = "decider") -> m.DecisionTaskClaimed:
        assert self.ex.decision is not None
        tr = self.send(m.PollDecision(self.ex.decision.scheduled_event_id, identity))
        assert isinstance(tr.reply, m.DecisionTaskClaimed)
        return tr.reply

    def complete_decision(self, decisions: list[dict[str, Any]], **kw: Any) -> m.Transition:
        assert self.ex.decision is not None
        return self.send(m.CompleteDecision(self.ex.decision.scheduled_event_id, decisions, **kw))

    def decide(self, *decisions: dict[str, Any], **kw: Any) -> m.Transition:
        self.poll_decision()
        return self.complete_decision(list(decisions), **kw)

    def poll_activity(self, activity_id: str) -> m.ActivityTaskClaimed:
        act = self.ex.activity(activity_id)
        assert act is not None
        tr = self.send(m.PollActivity(act.scheduled_event_id, "worker"))
        assert isinstance(tr.reply, m.ActivityTaskClaimed)
        return tr.reply

    def scheduled(self, activity_id: str) -> int:
        act = self.ex.activity(activity_id)
        assert act is not None
        return act.scheduled_event_id


def schedule(activity_id: str = "a1", **attributes: Any) -> dict[str, Any]:
    return {
        "decisionType": "ScheduleActivityTask",
        "scheduleActivityTaskDecisionAttributes": {
            "activityType": {"name": ACT.name, "version": ACT.version},
            "activityId": activity_id,
            **attributes,
        },
    }


def decision(kind: str, **attributes: Any) -> dict[str, Any]:
    member = kind[0].lower() + kind[1:] + "DecisionAttributes"
    return {"decisionType": kind, member: attributes}
