"""SWF effects the execution's actor performs after a commit, under MockClock: Lambda functions
(every outcome, the timeout, a crash before or after LambdaFunctionStarted), what a close owes
other executions (the child policy, the parent's notice) when a crash cut it off, parked
executions, and task priorities on the long-poll queues."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
import trio.testing
from trio.testing import MockClock

from foliot.core.errors import Unavailable
from foliot.core.swf import machine
from foliot.core.swf import messages as m
from foliot.kinds.swf.actor import actor_id, queue_of, task_token
from foliot.storage.swf import SwfLambdaFunction, SwfStored

from ..swf.store_kit import Live
from .conftest import Env, advance, ok
from .test_swf_actor import REGION, ask, decide, decision, history, schedule, start, swf

__all__ = ["swf"]

CHILD = {"name": "Order", "version": "1"}
FN_ERROR = "X-Amz-Function-Error"


async def events_of(env: Env, run_id: str, kind: str) -> list[dict[str, Any]]:
    events = await env.engine.store.swf_events(REGION, run_id, None, False, 1000)
    return [e.attributes for e in events if e.event_type == kind]


async def register(env: Env, name: str = "fn", path: str = "/fn") -> None:
    now = env.engine.clock.now()
    await env.engine.store.swf_put_lambda(
        SwfLambdaFunction(REGION, name, f"http://lambda.test{path}", now, now)
    )


def invoke(fid: str = "f1", name: str = "fn", **attributes: Any) -> dict[str, Any]:
    return decision("ScheduleLambdaFunction", id=fid, name=name, **attributes)


async def stop(env: Env) -> None:
    """The process dies where it stands (what a kill -9 leaves behind)."""
    assert env.scope is not None
    env.scope.cancel()
    await trio.testing.wait_all_tasks_blocked()


async def restart(env: Env) -> None:
    env.engine = env.make_engine()
    await env.boot()
    await advance(1)


# --------------------------------------------------------------------------- Lambda functions


async def test_a_lambda_function_is_invoked_with_its_input_and_completes(
    swf: Env, autojump_clock: MockClock
) -> None:
    await register(swf)
    swf.lambda_replies["/fn"] = httpx.Response(200, content=b'{"total": 5}')
    run_id = await start(swf, lambda_role="arn:aws:iam::000000000000:role/swf")
    await decide(swf, run_id, invoke(input='{"n": 5}', startToCloseTimeout="30"), invoke("f2"))
    await advance(1)
    assert sorted(r.content for r in swf.lambda_calls) == [b'{"n": 5}', b"{}"]  # no input: {}
    (first,) = [r for r in swf.lambda_calls if r.content == b'{"n": 5}']
    assert first.method == "POST" and first.headers["content-type"] == "application/json"
    assert first.headers["foliot-idempotency-key"] == f"swf:{REGION}:{run_id}:5"
    events = await swf.engine.store.swf_events(REGION, run_id, None, False, 1000)
    kinds = [e.event_type for e in events]
    assert kinds.count("LambdaFunctionScheduled") == 2 and kinds.count("LambdaFunctionStarted") == 2
    started = {
        e.attributes["scheduledEventId"]: e.event_id
        for e in events
        if e.event_type == "LambdaFunctionStarted"
    }
    completed = [e.attributes for e in events if e.event_type == "LambdaFunctionCompleted"]
    assert [c["result"] for c in completed] == ['{"total": 5}'] * 2
    assert {c["scheduledEventId"]: c["startedEventId"] for c in completed} == started
    assert "DecisionTaskScheduled" in kinds[kinds.index("LambdaFunctionCompleted") :]  # the decider hears
    stored = await swf.engine.store.swf_load(REGION, run_id)
    assert stored is not None and stored.execution.lambdas == ()


@pytest.mark.parametrize(
    ("reply", "reason", "details"),
    [
        (httpx.Response(200, content=b"e", headers={FN_ERROR: "Handled"}), "Handled", "e"),
        (httpx.Response(200, content=b"trace", headers={FN_ERROR: "Unhandled"}), "Unhandled", "trace"),
        (httpx.Response(422, content=b"bad input"), "Handled", "bad input"),
        (httpx.Response(500, content=b"crashed"), "Unhandled", "HTTP 500: crashed"),
    ],
)  # fmt: skip
async def test_a_failing_lambda_function_records_its_reason(
    swf: Env, autojump_clock: MockClock, reply: httpx.Response, reason: str, details: str
) -> None:
    await register(swf)
    swf.lambda_replies["/fn"] = reply
    run_id = await start(swf, lambda_role="arn:role")
    await decide(swf, run_id, invoke())
    await advance(1)
    (failed,) = await events_of(swf, run_id, "LambdaFunctionFailed")
    assert (failed["reason"], failed["details"]) == (reason, details)
    assert (await history(swf, run_id))[-1] == "DecisionTaskScheduled"


async def test_an_unknown_or_unreachable_function_fails_and_no_role_never_starts(
    swf: Env, autojump_clock: MockClock
) -> None:
    run_id = await start(swf, lambda_role="arn:role")
    await decide(swf, run_id, invoke(name="nobody"))
    await advance(1)
    (failed,) = await events_of(swf, run_id, "LambdaFunctionFailed")
    assert failed["reason"] == "ResourceNotFoundException"
    assert "function:nobody" in failed["details"]
    assert swf.lambda_calls == []

    async def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    await register(swf, "down", "/down")
    swf.lambda_replies["/down"] = refuse
    await decide(swf, run_id, invoke("f2", name="down"))
    await advance(1)
    failed = (await events_of(swf, run_id, "LambdaFunctionFailed"))[-1]
    assert failed["reason"] == "Unhandled" and "ConnectError" in failed["details"]

    no_role = await start(swf, "order-2")
    await register(swf)
    await decide(swf, no_role, invoke())
    await advance(1)
    (refused,) = await events_of(swf, no_role, "StartLambdaFunctionFailed")
    assert refused["cause"] == "ASSUME_ROLE_FAILED"
    assert "LambdaFunctionStarted" not in await history(swf, no_role)
    assert len(swf.lambda_calls) == 1  # only the unreachable one was tried


async def test_a_lambda_function_past_its_start_to_close_timeout_times_out(
    swf: Env, autojump_clock: MockClock
) -> None:
    await register(swf)

    async def hang(request: httpx.Request) -> httpx.Response:
        await trio.sleep_forever()  # never answers: the timeout must close the call

    swf.lambda_replies["/fn"] = hang
    run_id = await start(swf, lambda_role="arn:role")
    await decide(swf, run_id, invoke(startToCloseTimeout="20"))
    await advance(19)
    assert "LambdaFunctionTimedOut" not in await history(swf, run_id)
    await advance(2)
    (timed_out,) = await events_of(swf, run_id, "LambdaFunctionTimedOut")
    assert timed_out["timeoutType"] == "START_TO_CLOSE"
    await advance(3600)
    assert "LambdaFunctionCompleted" not in await history(swf, run_id)
    assert swf.engine.dispatcher.inflight == 0  # the call was dropped at the timeout


@pytest.mark.parametrize("cut", ["before_started", "after_started"])
async def test_a_lambda_call_cut_off_by_a_crash_is_made_after_the_restart(
    swf: Env, autojump_clock: MockClock, cut: str
) -> None:
    await register(swf)
    swf.lambda_replies["/fn"] = httpx.Response(200, content=b"done")
    run_id = await start(swf, lambda_role="arn:role")
    store = swf.engine.store
    await stop(swf)
    stored = await store.swf_load(REGION, run_id)
    assert stored is not None
    live = Live(store, REGION, stored)
    now = swf.engine.clock.now()
    await live.decide(now, invoke(input="x"))  # committed; the process died before its effects
    if cut == "after_started":
        await live.send(m.LambdaStarted(5), now)  # started; the call's answer died with it
    await restart(swf)
    assert [r.content for r in swf.lambda_calls] == [b"x"]
    events = await history(swf, run_id)
    assert events.count("LambdaFunctionStarted") == 1  # never recorded twice
    assert "LambdaFunctionCompleted" in events


@pytest.mark.parametrize("settings_overrides", [{"push_concurrency": 4}])
async def test_lambda_functions_are_invoked_through_the_dispatchers_bounded_senders(
    swf: Env, autojump_clock: MockClock
) -> None:
    await register(swf)
    gate = trio.Event()
    in_flight: list[int] = []
    peak: list[int] = [0]

    async def slow(request: httpx.Request) -> httpx.Response:
        in_flight.append(1)
        peak[0] = max(peak[0], len(in_flight))
        await gate.wait()
        in_flight.pop()
        return ok("ok")

    swf.lambda_replies["/fn"] = slow
    run_id = await start(swf, lambda_role="arn:role")
    await decide(swf, run_id, *[invoke(f"f{i}") for i in range(9)])
    await advance(1)
    assert peak[0] == len(in_flight) == 4  # FOLIOT_PUSH_CONCURRENCY senders, no more
    assert swf.engine.dispatcher.backlog == 5
    gate.set()
    await advance(5)
    assert len(await events_of(swf, run_id, "LambdaFunctionCompleted")) == 9


# --------------------------------------------------------------------------- closes owing others


async def with_child(env: Env, parent: str) -> SwfStored:
    """The parent's decider starts child `c1`; the child as stored once it started."""
    await decide(env, parent, decision("StartChildWorkflowExecution", workflowType=CHILD, workflowId="c1"))
    await advance(1)
    child = await env.engine.store.swf_find(REGION, "d", "c1")
    assert child is not None
    return child


async def owed_rows(env: Env) -> list[str]:
    return [s.execution.run_id for s in await env.engine.store.swf_owed_executions(None, 100)]


async def test_a_close_owing_others_is_remembered_until_they_answered(
    swf: Env, autojump_clock: MockClock
) -> None:
    parent = await start(swf)
    child = await with_child(swf, parent)
    await decide(swf, child.execution.run_id, decision("CompleteWorkflowExecution", result="r"))
    await advance(1)
    assert "ChildWorkflowExecutionCompleted" in await history(swf, parent)
    assert await owed_rows(swf) == []  # told and acknowledged: the row is gone
    await ask(swf, parent, m.Terminate(reason="ops"))  # no open child, no parent: nothing owed
    assert await owed_rows(swf) == []


@pytest.mark.parametrize("policy", ["TERMINATE", "REQUEST_CANCEL"])
async def test_a_child_policy_cut_off_by_a_crash_is_applied_after_the_restart(
    swf: Env, autojump_clock: MockClock, policy: str
) -> None:
    parent = await start(swf, child_policy=policy)
    child = await with_child(swf, parent)
    store = swf.engine.store
    await stop(swf)
    stored = await store.swf_load(REGION, parent)
    assert stored is not None
    await Live(store, REGION, stored).send(m.Terminate(reason="ops"), swf.engine.clock.now())
    assert await owed_rows(swf) == [parent]
    after = await store.swf_load(REGION, child.execution.run_id)
    assert after is not None and after.execution.is_open  # the kill came before the policy
    await restart(swf)
    child_events = await store.swf_events(REGION, child.execution.run_id, None, False, 1000)
    if policy == "TERMINATE":
        assert child_events[-1].event_type == "WorkflowExecutionTerminated"
        assert child_events[-1].attributes["cause"] == "CHILD_POLICY_APPLIED"
    else:
        (requested,) = [e for e in child_events if e.event_type == "WorkflowExecutionCancelRequested"]
        assert requested.attributes["cause"] == "CHILD_POLICY_APPLIED"
    assert await owed_rows(swf) == []
    # The terminated child's own notice reached its (closed) parent: refused there, not owed.
    assert (await history(swf, parent))[-1] == "WorkflowExecutionTerminated"


async def test_a_parents_notice_cut_off_by_a_crash_is_delivered_after_the_restart(
    swf: Env, autojump_clock: MockClock
) -> None:
    parent = await start(swf)
    child = await with_child(swf, parent)
    store = swf.engine.store
    await stop(swf)
    live = Live(store, REGION, child)
    await live.decide(swf.engine.clock.now(), decision("FailWorkflowExecution", reason="no", details="d"))
    assert await owed_rows(swf) == [child.execution.run_id]
    assert "ChildWorkflowExecutionFailed" not in await history(swf, parent)
    await restart(swf)
    (failed,) = await events_of(swf, parent, "ChildWorkflowExecutionFailed")
    assert failed["reason"] == "no" and failed["workflowExecution"]["runId"] == child.execution.run_id
    assert await owed_rows(swf) == []


async def test_an_owed_close_is_not_pruned_before_it_is_settled(swf: Env, autojump_clock: MockClock) -> None:
    parent = await start(swf)
    child = await with_child(swf, parent)
    store = swf.engine.store
    await stop(swf)
    live = Live(store, REGION, child)
    await live.complete(swf.engine.clock.now())
    far = swf.engine.clock.now() + 30 * 86_400_000
    assert await store.swf_prune_closed(far, 100) == 0  # 7-day retention passed, but owed
    await restart(swf)
    assert await owed_rows(swf) == []
    assert await store.swf_prune_closed(far, 100) == 1


# --------------------------------------------------------------------------- parked executions


async def test_an_execution_whose_actor_keeps_crashing_is_parked_and_resumed(
    swf: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await start(swf)
    await decide(
        swf,
        run_id,
        schedule("a1", scheduleToStartTimeout="600"),
        decision("StartTimer", timerId="t", startToFireTimeout="30"),
    )
    real = machine.transition

    def broken(ex: Any, msg: Any, ctx: Any) -> Any:
        if isinstance(msg, m.Signal):
            raise RuntimeError("a bug")
        return real(ex, msg, ctx)

    monkeypatch.setattr(machine, "transition", broken)
    for _ in range(swf.engine.supervisor.max_crashes):
        with pytest.raises(Exception, match="actor failed"):
            await swf.engine.swf.ask(REGION, run_id, m.Signal("poison"))
    parked = await swf.engine.store.swf_get_parked(REGION, run_id)
    assert parked is not None and "crashed 3 times: RuntimeError" in parked.reason
    app, queue = queue_of(REGION, "d", "activity", "workers")
    assert swf.engine.queues.depth(app, queue) == 0  # its task left the task list
    with pytest.raises(Unavailable, match="parked"):
        await swf.engine.swf.ask(REGION, run_id, m.PollActivity(5, "w"))
    assert swf.engine.supervisor.actors[actor_id(REGION, run_id)].describe()["parked"] == parked.reason
    await advance(60)  # the timer is due while parked: it waits
    assert "TimerFired" not in await history(swf, run_id)

    monkeypatch.setattr(machine, "transition", real)  # fixed, an operator resumes it
    assert await swf.engine.swf.kind.resume(REGION, run_id)
    assert not await swf.engine.swf.kind.resume(REGION, run_id)
    await advance(1)
    assert await swf.engine.store.swf_get_parked(REGION, run_id) is None
    assert "TimerFired" in await history(swf, run_id)  # the overdue deadline fired at once
    assert swf.engine.queues.depth(app, queue) == 1  # the task is offered again
    await ask(swf, run_id, m.PollActivity(5, "w"))


async def test_a_parked_execution_can_be_terminated(
    swf: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await start(swf)
    real = machine.transition
    monkeypatch.setattr(
        machine,
        "transition",
        lambda ex, msg, ctx: (
            (_ for _ in ()).throw(RuntimeError("bug")) if isinstance(msg, m.Signal) else real(ex, msg, ctx)
        ),
    )
    for _ in range(swf.engine.supervisor.max_crashes):
        with pytest.raises(Exception, match="actor failed"):
            await swf.engine.swf.ask(REGION, run_id, m.Signal("poison"))
    assert await swf.engine.store.swf_get_parked(REGION, run_id) is not None
    _, state = await ask(swf, run_id, m.Terminate(reason="operator"))
    assert state.execution.close_status == "TERMINATED"
    assert await swf.engine.store.swf_get_parked(REGION, run_id) is None


# --------------------------------------------------------------------------- task priorities


async def test_polls_take_the_highest_priority_task_first_then_the_oldest(
    swf: Env, autojump_clock: MockClock
) -> None:
    low = await start(swf, "low", task_priority="-5")
    plain = await start(swf, "plain")  # the type sets none: 0
    high = await start(swf, "high", task_priority="10")
    plain2 = await start(swf, "plain-2")
    app, queue = queue_of(REGION, "d", "decision", "deciders")
    async with swf.engine.queues.reserve(app, queue, 4, 0) as held:
        order = [token for token, _ in held.offers]
    assert order == [task_token(r, 2) for r in (high, plain, plain2, low)]
    # Activities: the decision's taskPriority, else the activity type's default (none here: 0).
    await decide(swf, high, schedule("a", taskPriority="1"), schedule("b"), schedule("c", taskPriority="7"))
    app, queue = queue_of(REGION, "d", "activity", "workers")
    async with swf.engine.queues.reserve(app, queue, 3, 0) as held:
        assert [int(t.rsplit(":", 1)[1]) for t, _ in held.offers] == [7, 5, 6]


async def test_the_start_request_priority_beats_the_types_default(
    swf: Env, autojump_clock: MockClock
) -> None:
    first = await start(swf, "a")
    second = await start(swf, "b", task_priority="3")
    app, queue = queue_of(REGION, "d", "decision", "deciders")
    async with swf.engine.queues.reserve(app, queue, 2, 0) as held:
        assert [token for token, _ in held.offers] == [task_token(second, 2), task_token(first, 2)]


# --------------------------------------------------------------------------- metrics


async def test_swf_metrics_count_what_committed(swf: Env, autojump_clock: MockClock) -> None:
    metrics = swf.engine.metrics

    def sample(name: str, **labels: str) -> float:
        return metrics.registry.get_sample_value(name, labels) or 0.0

    run_id = await start(swf)
    await decide(
        swf, run_id, schedule("a1", scheduleToStartTimeout="5"), decision("RecordMarker", markerName="m")
    )
    await advance(6)
    await ask(swf, run_id, m.PollDecision(8, "decider"))
    await advance(61)  # the decision task times out too
    await ask(swf, run_id, m.Terminate(reason="enough"))
    assert sample("foliot_swf_executions_started_total") == 1
    assert sample("foliot_swf_decisions_total", decision="ScheduleActivityTask") == 1
    assert sample("foliot_swf_decisions_total", decision="RecordMarker") == 1
    assert sample("foliot_swf_activity_tasks_total", event="scheduled") == 1
    assert sample("foliot_swf_activity_tasks_total", event="timed_out") == 1
    assert sample("foliot_swf_timeouts_total", kind="activity", type="SCHEDULE_TO_START") == 1
    assert sample("foliot_swf_timeouts_total", kind="decision", type="START_TO_CLOSE") == 1
    assert sample("foliot_swf_decision_tasks_total", event="completed") == 1
    assert sample("foliot_swf_executions_closed_total", status="TERMINATED") == 1
    assert sample("foliot_swf_executions_closed_total", status="COMPLETED") == 0
    text = metrics.exposition({}, await swf.engine.store.swf_counts()).decode()
    assert "foliot_swf_open_executions 0.0" in text and "foliot_swf_parked_executions 0.0" in text
