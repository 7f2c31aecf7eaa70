"""The working state of one transition: appends numbered events, schedules decision tasks,
closes the execution, and turns the before/after difference into effects."""

from __future__ import annotations

from typing import Any

import attrs

from . import messages as m
from .events import DECISION_TRIGGERS, HistoryEvent, compact
from .model import CLOSED, Config, DecisionTask, Execution, WorkflowTypeInfo
from .timeouts import deadlines

EVENT_LIMIT = 25_000  # SWF terminates an execution whose history reaches this many events


class Builder:
    """Accumulates one transition. `in_batch` is set while a decision batch is applied: events
    that call for a decision then only mark `decision_needed`, and one decision task is
    scheduled after the batch."""

    def __init__(self, before: Execution | None, ex: Execution, now: int) -> None:
        self.before = before
        self.ex = ex
        self.now = now
        self.events: list[HistoryEvent] = []
        self.effects: list[m.Effect] = []
        self.in_batch = False

    def evolve(self, **changes: Any) -> None:
        self.ex = attrs.evolve(self.ex, **changes)

    def add(self, event_type: str, **attributes: Any) -> int:
        """Append an event (members left `None` are omitted); returns its id."""
        event_id = self.ex.last_event_id + 1
        self.evolve(last_event_id=event_id)
        self.events.append(HistoryEvent(event_id, self.now, event_type, compact(**attributes)))
        if event_type in DECISION_TRIGGERS and self.ex.is_open:
            self.wake()
        return event_id

    def wake(self) -> None:
        """Something happened the decider must see."""
        ex = self.ex
        task = ex.decision
        if task is None:
            if self.in_batch:
                self.evolve(decision_needed=True)
            else:
                self.schedule_decision()
        elif task.started_event_id is not None and ex.next_decision is None:
            # As AWS records it: the next DecisionTaskScheduled at once, the task itself held
            # back until the started one completes (or times out).
            self.schedule_decision()
        # A scheduled task not yet started (or one already held for after the started one)
        # will show the decider this event anyway.

    def schedule_decision(self) -> None:
        """Record DecisionTaskScheduled: the execution's decision task, or, while one is
        started, the next one (`Execution.next_decision`)."""
        ex = self.ex
        task_list = ex.decision_task_list or ex.config.task_list
        event_id = self.add(
            "DecisionTaskScheduled",
            taskList={"name": task_list},
            taskPriority=ex.config.task_priority,
            startToCloseTimeout=ex.config.task_start_to_close_timeout,
            scheduleToStartTimeout=ex.decision_schedule_to_start_timeout,
        )
        task = DecisionTask(
            scheduled_event_id=event_id,
            task_list=task_list,
            start_to_close_timeout=ex.config.task_start_to_close_timeout,
            scheduled_at=self.now,
            schedule_to_start_timeout=ex.decision_schedule_to_start_timeout,
        )
        current = self.ex.decision
        if current is not None and current.started_event_id is not None:
            self.evolve(next_decision=task, decision_needed=False)
        else:
            self.evolve(decision=task, decision_needed=False)

    def promote_next_decision(self) -> dict[str, Any]:
        """The changes that end the started decision task: the held one (if any) becomes the
        execution's decision task and is handed to its task list from now on."""
        held = self.ex.next_decision
        if held is None:
            return {"decision": None}
        # Its schedule-to-start clock (only on a temporary task-list override) starts when it
        # can be polled, not when its event was recorded.
        return {"decision": attrs.evolve(held, scheduled_at=self.now), "next_decision": None}

    def close(
        self,
        close_status: str,
        child_policy: str | None,
        *,
        result: str | None = None,
        reason: str | None = None,
        details: str | None = None,
        timeout_type: str | None = None,
    ) -> None:
        """Close the execution: drop everything open, tell the parent, and apply `child_policy`
        to open children. SWF applies it only when the execution is terminated or times out;
        a decider that completes, fails, cancels or continues its execution is responsible
        for its children, so those closes pass `None` and the children run on."""
        ex = self.ex
        if child_policy is not None and child_policy != "ABANDON":
            for child in ex.children:
                self.effects.append(m.ApplyChildPolicy(child.workflow_id, child.run_id, child_policy))
        notify = None
        if (
            ex.parent is not None
            and ex.parent_initiated_event_id is not None
            and close_status != "CONTINUED_AS_NEW"
        ):
            notify = m.ChildClosed(
                initiated_event_id=ex.parent_initiated_event_id,
                execution=ex.ref,
                close_status=close_status,
                result=result,
                reason=reason,
                details=details,
                timeout_type=timeout_type,
            )
        self.evolve(
            status=CLOSED,
            close_status=close_status,
            closed_at=self.now,
            decision=None,
            next_decision=None,
            decision_needed=False,
            activities=(),
            timers=(),
            externals=(),
            lambdas=(),
            # `children` stays: the children open at the close, which a recovering runtime
            # may have to apply the child policy to again (`recovery.owed_effects`).
        )
        self.effects.append(m.Closed(close_status, ex.parent, notify))

    def finish(self, reply: m.Reply | None = None) -> m.Transition:
        """The transition, with task and deadline effects derived from what changed."""
        if self.ex.is_open and self.ex.last_event_id >= EVENT_LIMIT - 1:
            policy = self.ex.config.child_policy
            self.add("WorkflowExecutionTerminated", childPolicy=policy, cause="EVENT_LIMIT_EXCEEDED")
            self.close("TERMINATED", policy)
        before, after = self.before, self.ex
        pre: list[m.Effect] = []
        old_tasks = _tasks(before) if before is not None else {}
        new_tasks = _tasks(after)
        for key, (kind, task_list) in old_tasks.items():
            if key not in new_tasks:
                pre.append(m.RetireTask(kind, task_list, key[1]))
        # Dict order, not set difference: effects come out in the order things were scheduled,
        # the same in every process (a set of tuples with strings iterates by hash seed).
        for key in new_tasks:
            if key not in old_tasks:
                pre.append(_offer(after, key))
        old_deadlines = deadlines(before) if before is not None else {}
        new_deadlines = deadlines(after)
        for name in old_deadlines:
            if name not in new_deadlines:
                pre.append(m.CancelDeadline(name))
        for name, at in new_deadlines.items():
            if old_deadlines.get(name) != at:
                pre.append(m.ArmDeadline(name, at))
        closing = [e for e in self.effects if isinstance(e, m.Closed)]
        others = [e for e in self.effects if not isinstance(e, m.Closed)]
        return m.Transition(after, tuple(self.events), (*pre, *others, *closing), reply)


def _tasks(ex: Execution) -> dict[tuple[str, int], tuple[str, str]]:
    """The execution's open tasks: (kind, scheduled event id) -> (kind, task list)."""
    out: dict[tuple[str, int], tuple[str, str]] = {}
    if ex.decision is not None:
        out[("decision", ex.decision.scheduled_event_id)] = ("decision", ex.decision.task_list)
    for act in ex.activities:
        out[("activity", act.scheduled_event_id)] = ("activity", act.task_list)
    return out


def _offer(ex: Execution, key: tuple[str, int]) -> m.Effect:
    kind, scheduled = key
    if kind == "decision":
        assert ex.decision is not None
        return m.OfferDecisionTask(ex.decision.task_list, scheduled, ex.config.task_priority)
    act = ex.activity_by_scheduled(scheduled)
    assert act is not None
    return m.OfferActivityTask(act.task_list, scheduled, act.activity_id, act.task_priority)


def config_attributes(config: Config, tags: tuple[str, ...]) -> dict[str, Any]:
    """The configuration members the started, continued and child-initiated events share."""
    return {
        "executionStartToCloseTimeout": config.execution_start_to_close_timeout,
        "taskStartToCloseTimeout": config.task_start_to_close_timeout,
        "childPolicy": config.child_policy,
        "taskList": {"name": config.task_list},
        "taskPriority": config.task_priority,
        "tagList": list(tags) if tags else None,
        "lambdaRole": config.lambda_role,
    }


def resolve_config(
    info: WorkflowTypeInfo,
    *,
    task_list: str | None,
    execution_start_to_close_timeout: str | None,
    task_start_to_close_timeout: str | None,
    child_policy: str | None,
    task_priority: str | None,
    lambda_role: str | None,
) -> Config | str:
    """An execution's configuration from the request and the type's defaults, or the
    `DEFAULT_*_UNDEFINED` cause naming the first member neither gives."""
    execution_timeout = execution_start_to_close_timeout or info.default_execution_start_to_close_timeout
    if execution_timeout is None:
        return "DEFAULT_EXECUTION_START_TO_CLOSE_TIMEOUT_UNDEFINED"
    task_timeout = task_start_to_close_timeout or info.default_task_start_to_close_timeout
    if task_timeout is None:
        return "DEFAULT_TASK_START_TO_CLOSE_TIMEOUT_UNDEFINED"
    resolved_list = task_list or info.default_task_list
    if resolved_list is None:
        return "DEFAULT_TASK_LIST_UNDEFINED"
    policy = child_policy or info.default_child_policy
    if policy is None:
        return "DEFAULT_CHILD_POLICY_UNDEFINED"
    return Config(
        task_list=resolved_list,
        execution_start_to_close_timeout=execution_timeout,
        task_start_to_close_timeout=task_timeout,
        child_policy=policy,
        task_priority=task_priority if task_priority is not None else info.default_task_priority,
        lambda_role=lambda_role or info.default_lambda_role,
    )
