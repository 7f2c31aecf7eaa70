"""Signals, cancel requests, termination, child executions and their policies, requests to
other executions, and Lambda functions."""

from __future__ import annotations

from typing import Any

import pytest

from foliot.core.swf import machine
from foliot.core.swf import messages as m
from foliot.core.swf.faults import Fault
from foliot.core.swf.model import ExecutionRef, TypeRef, WorkflowTypeInfo
from foliot.core.swf.start import start_failure_cause

from .swf_kit import ACT_INFO, WF, WF_INFO, Kit, decision

CHILD = TypeRef("Child", "1")
CHILD_INFO = WorkflowTypeInfo(
    CHILD,
    default_task_start_to_close_timeout="10",
    default_execution_start_to_close_timeout="100",
    default_task_list="child-deciders",
    default_child_policy="ABANDON",
)
CATALOG = m.StaticCatalog([WF_INFO, CHILD_INFO], [ACT_INFO])


def start_child(workflow_id: str = "c1", **attributes: Any) -> dict[str, Any]:
    return decision(
        "StartChildWorkflowExecution", workflowType=CHILD.to_aws(), workflowId=workflow_id, **attributes
    )


# ------------------------------------------------------------------ from outside


def test_signal_and_external_signal() -> None:
    k = Kit()
    k.send(m.Signal("go", "payload"))
    # Through the API: externalInitiatedEventId 0, as AWS sends it (issue 26, point 16).
    assert k.attrs(3) == {"signalName": "go", "input": "payload", "externalInitiatedEventId": 0}
    assert k.ex.decision.started_event_id is None and len(k.events) == 3  # type: ignore[union-attr]
    k.send(m.Signal("again", external=ExecutionRef("other", "r9"), external_initiated_event_id=12))
    assert k.attrs(4) == {
        "signalName": "again",
        "externalWorkflowExecution": {"workflowId": "other", "runId": "r9"},
        "externalInitiatedEventId": 12,
    }


def test_request_cancel_then_cancel_decision() -> None:
    k = Kit()
    k.decide()
    k.send(m.RequestCancel())
    assert k.last(2) == ["WorkflowExecutionCancelRequested", "DecisionTaskScheduled"]
    assert k.events[-2].attributes == {"externalInitiatedEventId": 0}
    assert k.ex.cancel_requested
    k.decide(decision("CancelWorkflowExecution", details="bye"))
    assert k.ex.close_status == "CANCELED"


def test_terminate_with_its_own_child_policy() -> None:
    k = Kit(catalog=CATALOG)
    k.decide(start_child("c1"))
    k.send(m.ChildStarted(5, "child-run"))
    k.send(m.Terminate(reason="ops", details="d", child_policy="REQUEST_CANCEL"))
    assert k.last(1) == ["WorkflowExecutionTerminated"]
    assert k.events[-1].attributes == {
        "reason": "ops",
        "details": "d",
        "childPolicy": "REQUEST_CANCEL",
        "cause": "OPERATOR_INITIATED",
    }
    assert m.ApplyChildPolicy("c1", "child-run", "REQUEST_CANCEL") in k.last_effects
    assert k.ex.close_status == "TERMINATED"


def test_closed_execution_accepts_nothing() -> None:
    k = Kit()
    k.send(m.Terminate())
    for msg in (
        m.Signal("x"),
        m.RequestCancel(),
        m.Terminate(),
        m.PollDecision(2),
        m.ChildStarted(1, "r"),
        m.LambdaStarted(1),
    ):
        fault = k.refuse(msg)
        assert fault.code == "UnknownResourceFault"
        assert "workflowId=wf-1" in fault.message


# ------------------------------------------------------------------ children


def test_child_lifecycle_completed() -> None:
    k = Kit(catalog=CATALOG)
    k.decide(start_child("c1", input="in", control="ctl", tagList=["x"]))
    assert k.last(1) == ["StartChildWorkflowExecutionInitiated"]
    assert k.attrs(5) == {
        "workflowId": "c1",
        "workflowType": CHILD.to_aws(),
        "control": "ctl",
        "input": "in",
        "executionStartToCloseTimeout": "100",
        "taskList": {"name": "child-deciders"},
        "decisionTaskCompletedEventId": 4,
        "childPolicy": "ABANDON",
        "taskStartToCloseTimeout": "10",
        "tagList": ["x"],
    }
    (effect,) = [e for e in k.last_effects if isinstance(e, m.StartChild)]
    assert effect.initiated_event_id == 5
    assert (
        effect.request.parent == ExecutionRef("wf-1", "run-1")
        and effect.request.parent_initiated_event_id == 5
    )

    # The runtime starts the child exactly as StartWorkflowExecution does.
    child = machine.start(effect.request, CHILD_INFO, "child-run", k.now)
    assert isinstance(child, m.Transition)
    started_attrs = child.events[0].attributes
    assert started_attrs["parentWorkflowExecution"] == {"workflowId": "wf-1", "runId": "run-1"}
    assert started_attrs["parentInitiatedEventId"] == 5

    k.send(m.ChildStarted(5, "child-run"))
    assert k.last(2) == ["ChildWorkflowExecutionStarted", "DecisionTaskScheduled"]
    assert k.attrs(6) == {
        "workflowExecution": {"workflowId": "c1", "runId": "child-run"},
        "workflowType": CHILD.to_aws(),
        "initiatedEventId": 5,
    }
    assert k.refuse(m.ChildStarted(5, "again")).code == "UnknownResourceFault"

    # The child completes: its Closed effect carries the parent's message.
    ctx = m.Context(now=k.now, catalog=CATALOG)
    tr = machine.transition(child.execution, m.PollDecision(2), ctx)
    assert isinstance(tr, m.Transition)
    tr = machine.transition(
        tr.execution, m.CompleteDecision(2, [decision("CompleteWorkflowExecution", result="ok")]), ctx
    )
    assert isinstance(tr, m.Transition)
    closed = tr.effects[-1]
    assert isinstance(closed, m.Closed) and closed.parent == ExecutionRef("wf-1", "run-1")
    assert closed.notify_parent == m.ChildClosed(5, ExecutionRef("c1", "child-run"), "COMPLETED", result="ok")
    k.send(closed.notify_parent)
    assert k.last(1)[0] == "ChildWorkflowExecutionCompleted"
    completed = next(e for e in reversed(k.events) if e.event_type == "ChildWorkflowExecutionCompleted")
    assert completed.attributes == {
        "workflowExecution": {"workflowId": "c1", "runId": "child-run"},
        "workflowType": CHILD.to_aws(),
        "result": "ok",
        "initiatedEventId": 5,
        "startedEventId": 6,
    }
    assert k.ex.children == ()


@pytest.mark.parametrize(
    ("status", "extra", "event", "attributes"),
    [
        (
            "FAILED",
            {"reason": "r", "details": "d"},
            "ChildWorkflowExecutionFailed",
            {"reason": "r", "details": "d"},
        ),
        ("CANCELED", {"details": "d"}, "ChildWorkflowExecutionCanceled", {"details": "d"}),
        ("TERMINATED", {"reason": "ignored"}, "ChildWorkflowExecutionTerminated", {}),
        (
            "TIMED_OUT",
            {"timeout_type": "START_TO_CLOSE"},
            "ChildWorkflowExecutionTimedOut",
            {"timeoutType": "START_TO_CLOSE"},
        ),
    ],
)
def test_child_outcomes(status: str, extra: dict[str, Any], event: str, attributes: dict[str, Any]) -> None:
    k = Kit(catalog=CATALOG)
    k.decide(start_child())
    k.send(m.ChildStarted(5, "cr"))
    k.send(m.ChildClosed(5, ExecutionRef("c1", "cr"), status, **extra))
    assert k.types[7] == event
    assert k.attrs(8) == {
        "workflowExecution": {"workflowId": "c1", "runId": "cr"},
        "workflowType": CHILD.to_aws(),
        "initiatedEventId": 5,
        "startedEventId": 6,
        **attributes,
    }


def test_a_close_overtaking_the_start_records_both() -> None:
    k = Kit(catalog=CATALOG)
    k.decide(start_child())
    k.send(m.ChildClosed(5, ExecutionRef("c1", "cr"), "COMPLETED"))
    assert k.types[5:] == [
        "ChildWorkflowExecutionStarted",
        "DecisionTaskScheduled",
        "ChildWorkflowExecutionCompleted",
    ]
    assert k.attrs(8)["startedEventId"] == 6


def test_child_start_failures_at_decision_time() -> None:
    deprecated = WorkflowTypeInfo(TypeRef("Old", "1"), status="DEPRECATED")
    no_defaults = WorkflowTypeInfo(TypeRef("Bare", "1"))
    k = Kit(catalog=m.StaticCatalog([WF_INFO, deprecated, no_defaults], []))
    k.decide(
        decision(
            "StartChildWorkflowExecution", workflowType={"name": "Nope", "version": "1"}, workflowId="a"
        ),
        decision("StartChildWorkflowExecution", workflowType=deprecated.type.to_aws(), workflowId="b"),
        decision(
            "StartChildWorkflowExecution", workflowType=no_defaults.type.to_aws(), workflowId="c", control="x"
        ),
    )
    assert k.types[4:] == ["StartChildWorkflowExecutionFailed"] * 3 + ["DecisionTaskScheduled"]
    assert [k.attrs(i)["cause"] for i in (5, 6, 7)] == [
        "WORKFLOW_TYPE_DOES_NOT_EXIST",
        "WORKFLOW_TYPE_DEPRECATED",
        "DEFAULT_EXECUTION_START_TO_CLOSE_TIMEOUT_UNDEFINED",
    ]
    assert k.attrs(7) == {
        "workflowType": {"name": "Bare", "version": "1"},
        "cause": "DEFAULT_EXECUTION_START_TO_CLOSE_TIMEOUT_UNDEFINED",
        "workflowId": "c",
        "initiatedEventId": 0,
        "decisionTaskCompletedEventId": 4,
        "control": "x",
    }


def test_child_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from foliot.core.swf import apply

    monkeypatch.setattr(apply, "OPEN_CHILDREN_LIMIT", 1)
    k = Kit(catalog=CATALOG)
    k.decide(start_child("c1"), start_child("c2"))
    assert k.attrs(6)["cause"] == "OPEN_CHILDREN_LIMIT_EXCEEDED"


def test_child_already_running_is_answered_by_the_runtime() -> None:
    k = Kit(catalog=CATALOG)
    k.decide(start_child("c1", control="ctl"))
    k.send(m.ChildStartFailed(5, "WORKFLOW_ALREADY_RUNNING"))
    assert k.types[5:] == ["StartChildWorkflowExecutionFailed", "DecisionTaskScheduled"]
    assert k.attrs(6) == {
        "workflowType": CHILD.to_aws(),
        "cause": "WORKFLOW_ALREADY_RUNNING",
        "workflowId": "c1",
        "initiatedEventId": 5,
        "decisionTaskCompletedEventId": 4,
        "control": "ctl",
    }
    assert k.ex.children == ()


@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        (Fault("UnknownResourceFault", "x"), "WORKFLOW_TYPE_DOES_NOT_EXIST"),
        (Fault("TypeDeprecatedFault", "x"), "WORKFLOW_TYPE_DEPRECATED"),
        (Fault("WorkflowExecutionAlreadyStartedFault", "x"), "WORKFLOW_ALREADY_RUNNING"),
        (Fault("DefaultUndefinedFault", "taskList is not set"), "DEFAULT_TASK_LIST_UNDEFINED"),
        (Fault("DefaultUndefinedFault", "childPolicy is not set"), "DEFAULT_CHILD_POLICY_UNDEFINED"),
        (Fault("ValidationException", "x"), "OPERATION_NOT_PERMITTED"),
    ],
)
def test_start_failure_cause(fault: Fault, cause: str) -> None:
    assert start_failure_cause(fault) == cause


@pytest.mark.parametrize("policy", ["TERMINATE", "REQUEST_CANCEL", "ABANDON"])
@pytest.mark.parametrize("how", ["terminate", "timeout", "complete", "fail", "cancel", "continue"])
def test_child_policy_applied_when_the_parent_is_terminated_or_times_out(policy: str, how: str) -> None:
    k = Kit(catalog=CATALOG, child_policy=policy)
    k.decide(start_child("c1"), start_child("c2"))
    k.send(m.ChildStarted(5, "r1"))  # c2 never reported started: targeted by workflow id
    if how == "terminate":
        k.send(m.Terminate())
    elif how == "timeout":
        k.advance(3_600_000)
        k.send(m.Fire("workflow"))
    else:
        closing = {
            "complete": "CompleteWorkflowExecution",
            "fail": "FailWorkflowExecution",
            "cancel": "CancelWorkflowExecution",
            "continue": "ContinueAsNewWorkflowExecution",
        }[how]
        k.decide(decision(closing))
    applied = [e for e in k.last_effects if isinstance(e, m.ApplyChildPolicy)]
    if policy == "ABANDON" or how not in ("terminate", "timeout"):
        assert applied == []  # a decider that closes its execution answers for its children
    else:
        assert applied == [m.ApplyChildPolicy("c1", "r1", policy), m.ApplyChildPolicy("c2", None, policy)]
    assert not k.ex.is_open
    assert [c.workflow_id for c in k.ex.children] == ["c1", "c2"]  # kept for recovery


def test_terminate_overrides_the_policy_and_none_means_the_executions_own() -> None:
    k = Kit(catalog=CATALOG, child_policy="ABANDON")
    k.decide(start_child("c1"))
    k.send(m.Terminate(child_policy="TERMINATE"))
    assert k.events[-1].attributes["childPolicy"] == "TERMINATE"
    assert m.ApplyChildPolicy("c1", None, "TERMINATE") in k.last_effects


def test_child_receives_policy_messages() -> None:
    child = Kit()
    child.send(m.RequestCancel(cause="CHILD_POLICY_APPLIED"))
    assert child.attrs(3) == {"cause": "CHILD_POLICY_APPLIED", "externalInitiatedEventId": 0}
    child.send(m.Terminate(cause="CHILD_POLICY_APPLIED"))
    assert child.events[-1].attributes == {"childPolicy": "TERMINATE", "cause": "CHILD_POLICY_APPLIED"}


def test_a_continued_child_keeps_its_parent() -> None:
    request = m.StartRequest(
        domain="d",
        workflow_id="c1",
        workflow_type=WF,
        parent=ExecutionRef("p", "pr"),
        parent_initiated_event_id=9,
    )
    tr = machine.start(request, WF_INFO, "cr1", 0)
    assert isinstance(tr, m.Transition)
    ctx = m.Context(now=0, catalog=m.StaticCatalog([WF_INFO]), new_run_id="cr2")
    tr = machine.transition(tr.execution, m.PollDecision(2), ctx)
    assert isinstance(tr, m.Transition)
    tr = machine.transition(
        tr.execution, m.CompleteDecision(2, [decision("ContinueAsNewWorkflowExecution")]), ctx
    )
    assert isinstance(tr, m.Transition)
    assert m.Closed("CONTINUED_AS_NEW", ExecutionRef("p", "pr"), None) in tr.effects  # the parent hears later
    (cont,) = [e for e in tr.effects if isinstance(e, m.ContinuedAsNew)]
    assert cont.start.execution.parent == ExecutionRef("p", "pr")
    assert cont.start.execution.parent_initiated_event_id == 9


# ------------------------------------------------------------------ other executions


def test_signal_external_success_and_failure() -> None:
    k = Kit()
    k.decide(
        decision(
            "SignalExternalWorkflowExecution",
            workflowId="o",
            runId="",
            signalName="s",
            input="i",
            control="c",
        ),
        decision("SignalExternalWorkflowExecution", workflowId="gone", runId="r", signalName="s"),
    )
    assert k.attrs(5) == {
        "workflowId": "o",
        "signalName": "s",
        "input": "i",
        "decisionTaskCompletedEventId": 4,
        "control": "c",
    }
    assert m.DeliverSignal(5, "o", None, "s", "i") in k.last_effects
    assert m.DeliverSignal(6, "gone", "r", "s", None) in k.last_effects
    assert k.ex.decision is None  # initiating asks the decider nothing
    k.send(m.ExternalSignaled(5, ExecutionRef("o", "or")))
    assert k.last(2) == ["ExternalWorkflowExecutionSignaled", "DecisionTaskScheduled"]
    assert k.attrs(7) == {"workflowExecution": {"workflowId": "o", "runId": "or"}, "initiatedEventId": 5}
    k.send(m.ExternalSignalFailed(6))
    assert k.attrs(9) == {
        "workflowId": "gone",
        "runId": "r",
        "cause": "UNKNOWN_EXTERNAL_WORKFLOW_EXECUTION",
        "initiatedEventId": 6,
        "decisionTaskCompletedEventId": 4,
    }
    assert k.refuse(m.ExternalSignaled(5, ExecutionRef("o", "or"))).code == "UnknownResourceFault"


def test_request_cancel_external_success_and_failure() -> None:
    k = Kit()
    k.decide(
        decision("RequestCancelExternalWorkflowExecution", workflowId="o", control="c"),
        decision("RequestCancelExternalWorkflowExecution", workflowId="gone"),
    )
    assert k.attrs(5) == {"workflowId": "o", "decisionTaskCompletedEventId": 4, "control": "c"}
    assert m.RequestCancelExternal(5, "o", None) in k.last_effects
    assert (
        k.refuse(m.ExternalSignaled(5, ExecutionRef("o", "r"))).code == "UnknownResourceFault"
    )  # wrong kind
    k.send(m.ExternalCancelRequested(5, ExecutionRef("o", "r")))
    assert k.attrs(7) == {"workflowExecution": {"workflowId": "o", "runId": "r"}, "initiatedEventId": 5}
    k.send(m.ExternalCancelFailed(6))
    assert k.types[8] == "RequestCancelExternalWorkflowExecutionFailed"
    assert k.attrs(9)["cause"] == "UNKNOWN_EXTERNAL_WORKFLOW_EXECUTION"


# ------------------------------------------------------------------ lambda functions


def test_lambda_success() -> None:
    k = Kit(lambda_role="arn:role")
    k.decide(decision("ScheduleLambdaFunction", id="f1", name="fn", control="c"))
    assert k.attrs(5) == {
        "id": "f1",
        "name": "fn",
        "control": "c",
        "startToCloseTimeout": "900",
        "decisionTaskCompletedEventId": 4,
    }
    assert m.InvokeLambda(5, "f1", "fn", "{}", "900") in k.last_effects
    assert k.refuse(m.LambdaCompleted(5, "x")).code == "UnknownResourceFault"  # not started
    k.send(m.LambdaStarted(5))
    assert k.refuse(m.LambdaStarted(5)).code == "UnknownResourceFault"
    k.send(m.LambdaCompleted(5, '{"ok":1}'))
    assert k.types[5:] == ["LambdaFunctionStarted", "LambdaFunctionCompleted", "DecisionTaskScheduled"]
    assert k.attrs(7) == {"scheduledEventId": 5, "startedEventId": 6, "result": '{"ok":1}'}


@pytest.mark.parametrize("reason", ["Handled", "Unhandled", "ResourceNotFoundException"])
def test_lambda_failures(reason: str) -> None:
    k = Kit(lambda_role="arn:role")
    k.decide(decision("ScheduleLambdaFunction", id="f1", name="fn", input="in"))
    assert m.InvokeLambda(5, "f1", "fn", "in", "900") in k.last_effects
    k.send(m.LambdaStarted(5))
    k.send(m.LambdaFailed(5, reason, "err"))
    assert k.attrs(7) == {"scheduledEventId": 5, "startedEventId": 6, "reason": reason, "details": "err"}


def test_lambda_without_a_role_never_starts() -> None:
    k = Kit()
    k.decide(decision("ScheduleLambdaFunction", id="f1", name="fn"))
    assert k.types[4:] == ["LambdaFunctionScheduled", "StartLambdaFunctionFailed", "DecisionTaskScheduled"]
    assert k.attrs(6)["scheduledEventId"] == 5 and k.attrs(6)["cause"] == "ASSUME_ROLE_FAILED"
    assert not any(isinstance(e, m.InvokeLambda) for e in k.last_effects)
    assert k.ex.lambdas == ()


def test_lambda_id_reuse_is_accepted() -> None:
    k = Kit(lambda_role="arn:role")
    k.decide(
        decision("ScheduleLambdaFunction", id="f1", name="fn"),
        decision("ScheduleLambdaFunction", id="f1", name="fn"),
    )
    assert k.types[4:] == ["LambdaFunctionScheduled", "LambdaFunctionScheduled"]
    assert [f.scheduled_event_id for f in k.ex.lambdas] == [5, 6]
