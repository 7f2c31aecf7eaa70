"""After a crash between a commit and its effects, the owed effects are rebuilt exactly."""

from __future__ import annotations

import pytest

from foliot.core.swf import messages as m
from foliot.core.swf.model import ExecutionRef
from foliot.core.swf.recovery import owed_effects, owes

from .swf_kit import Kit, decision, schedule
from .test_swf_relations import CATALOG, start_child

OWED = (
    m.OfferDecisionTask,
    m.OfferActivityTask,
    m.DeliverSignal,
    m.RequestCancelExternal,
    m.StartChild,
    m.InvokeLambda,
    m.ApplyChildPolicy,
    m.Closed,
)


def _owed(k: Kit) -> tuple[m.Effect, ...]:
    return owed_effects(k.ex, lambda event_id: k.events[event_id - 1])


def _made(k: Kit) -> tuple[m.Effect, ...]:
    return tuple(e for e in k.last_effects if isinstance(e, OWED))


def test_a_fresh_execution_owes_its_decision_task() -> None:
    k = Kit()
    assert _owed(k) == _made(k) == (m.OfferDecisionTask("deciders", 2),)


def test_everything_a_batch_set_in_motion() -> None:
    k = Kit(catalog=CATALOG, lambda_role="arn:role")
    k.decide(
        schedule("a1", taskPriority="4"),
        decision("SignalExternalWorkflowExecution", workflowId="o", signalName="s", input="i"),
        decision("RequestCancelExternalWorkflowExecution", workflowId="p", runId="pr"),
        start_child("c1", input="ci", tagList=["t"], taskPriority="2", lambdaRole="arn:child"),
        decision("ScheduleLambdaFunction", id="f", name="fn", input="x", startToCloseTimeout="30"),
        decision("ScheduleLambdaFunction", id="g", name="fn"),
    )
    assert _owed(k) == _made(k)
    assert len(_made(k)) == 6


def test_answered_requests_are_no_longer_owed() -> None:
    k = Kit(catalog=CATALOG, lambda_role="arn:role")
    k.decide(
        schedule("a1"),
        decision("SignalExternalWorkflowExecution", workflowId="o", signalName="s"),
        start_child("c1"),
        decision("ScheduleLambdaFunction", id="f", name="fn"),
    )
    k.poll_activity("a1")
    k.send(m.ExternalSignaled(6, ExecutionRef("o", "r")))
    k.send(m.ChildStarted(7, "cr"))
    k.send(m.LambdaStarted(8))
    # A started Lambda call is made again (at-least-once: its answer died with the process),
    # within what is left of its start-to-close timeout, without a second LambdaStarted.
    assert _owed(k) == (
        m.OfferDecisionTask("deciders", 11),
        m.InvokeLambda(8, "f", "fn", "{}", "900", started_at=k.ex.lambdas[0].started_at),
    )
    k.send(m.LambdaCompleted(8, "ok"))
    assert _owed(k) == (m.OfferDecisionTask("deciders", 11),)


def test_what_a_close_owes_others_is_remembered() -> None:
    k = Kit()
    k.decide(decision("CompleteWorkflowExecution", result="r"))
    assert not owes(k.last_effects)  # no parent, no children: nothing to remember
    child = Kit(catalog=CATALOG, parent=ExecutionRef("p", "pr"), parent_initiated_event_id=3)
    child.decide(decision("CompleteWorkflowExecution", result="r"))
    assert owes(child.last_effects)
    parent = Kit(catalog=CATALOG)
    parent.decide(start_child("c1"))
    parent.send(m.ChildStarted(5, "r1"))
    parent.send(m.Terminate(reason="ops", child_policy="ABANDON"))
    assert not owes(parent.last_effects)
    again = Kit(catalog=CATALOG)
    again.decide(start_child("c1"))
    again.send(m.Terminate(reason="ops"))
    assert owes(again.last_effects)


@pytest.mark.parametrize("how", ["terminate", "timeout", "complete", "fail", "cancel", "continue"])
def test_a_close_owes_the_child_policy_and_the_parents_notice(how: str) -> None:
    parent = ExecutionRef("p", "pr")
    k = Kit(catalog=CATALOG, parent=parent, parent_initiated_event_id=3)
    k.decide(start_child("c1"), start_child("c2"))
    k.send(m.ChildStarted(5, "r1"))
    if how == "terminate":
        k.send(m.Terminate(reason="ops", details="d"))
    elif how == "timeout":
        k.advance(3_600_000)
        k.send(m.Fire("workflow"))
    else:
        kind, attributes = {
            "complete": ("CompleteWorkflowExecution", {"result": "r"}),
            "fail": ("FailWorkflowExecution", {"reason": "why", "details": "d"}),
            "cancel": ("CancelWorkflowExecution", {"details": "d"}),
            "continue": ("ContinueAsNewWorkflowExecution", {}),
        }[how]
        k.decide(decision(kind, **attributes))
    made = _made(k)
    assert _owed(k) == made
    assert made[-1].parent == parent  # type: ignore[union-attr]
    if how in ("terminate", "timeout"):
        assert [type(e) for e in made] == [m.ApplyChildPolicy, m.ApplyChildPolicy, m.Closed]
    if how == "continue":
        assert made[-1].notify_parent is None  # type: ignore[union-attr]
    else:
        assert made[-1].notify_parent is not None  # type: ignore[union-attr]


def test_an_execution_terminated_by_its_event_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from foliot.core.swf import builder

    monkeypatch.setattr(builder, "EVENT_LIMIT", 6)
    k = Kit(catalog=CATALOG, parent=ExecutionRef("p", "pr"), parent_initiated_event_id=3)
    k.decide(start_child("c1"))
    assert k.ex.close_status == "TERMINATED"
    # The child initiated in the same transition is owed its policy, not its start.
    assert _owed(k) == tuple(e for e in _made(k) if not isinstance(e, m.StartChild))
    assert [type(e) for e in _owed(k)] == [m.ApplyChildPolicy, m.Closed]
