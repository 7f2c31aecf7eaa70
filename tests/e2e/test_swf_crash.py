"""A real `foliot serve` killed with SIGKILL in the middle of SWF executions: task tokens handed
out before the kill complete their tasks after the restart, a task never polled is offered
again, and no history event is lost. Wall clock, bounded by `fail_after`."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
import trio
from botocore.config import Config

from ..swf.conftest import PRESET_KEY, PRESET_SECRET, call
from ..swf.test_tasks_boto3 import register_activity, schedule
from ..swf.test_write_boto3 import WF, register
from .test_crash_recovery import Server, server

__all__ = ["server"]  # the fixture: a `foliot serve` process, restartable on its database

pytestmark = pytest.mark.e2e


@pytest.fixture
def swf_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The preset access key, in the environment the server process is started with."""
    monkeypatch.setenv("FOLIOT_SWF_CREDENTIALS", f"{PRESET_KEY}:{PRESET_SECRET}")


def client(url: str) -> Any:
    return boto3.client(
        "swf",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=PRESET_KEY,
        aws_secret_access_key=PRESET_SECRET,
        config=Config(retries={"max_attempts": 1}, connect_timeout=5, read_timeout=30),
    )


async def test_tokens_from_before_a_kill_complete_their_tasks_after_it(
    swf_keys: None, server: Server
) -> None:
    with trio.fail_after(240):
        c = client(server.url)
        await register(c, task_timeout="600")  # no task may time out while the server restarts
        await register_activity(c, task_timeout="600")
        a = (await call(c.start_workflow_execution, domain="d", workflowId="a", workflowType=WF))["runId"]
        task = await call(c.poll_for_decision_task, domain="d", taskList={"name": "deciders"})
        await call(c.respond_decision_task_completed, taskToken=task["taskToken"], decisions=[schedule("a1")])
        work = await call(c.poll_for_activity_task, domain="d", taskList={"name": "workers"})
        b = (await call(c.start_workflow_execution, domain="d", workflowId="b", workflowType=WF))["runId"]
        b_task = await call(c.poll_for_decision_task, domain="d", taskList={"name": "deciders"})
        assert b_task["workflowExecution"]["runId"] == b
        c_run = (await call(c.start_workflow_execution, domain="d", workflowId="c", workflowType=WF))["runId"]

        await server.kill()
        await server.start()
        c = client(server.url)

        # Tokens handed out before the kill still answer their tasks.
        await call(c.respond_activity_task_completed, taskToken=work["taskToken"], result="paid")
        complete = {
            "decisionType": "CompleteWorkflowExecution",
            "completeWorkflowExecutionDecisionAttributes": {"result": "ok"},
        }
        await call(c.respond_decision_task_completed, taskToken=b_task["taskToken"], decisions=[complete])
        # Tasks never polled are offered again: c's first one and a's, scheduled by the answer.
        polled = set()
        for _ in range(2):
            got = await call(c.poll_for_decision_task, domain="d", taskList={"name": "deciders"})
            polled.add(got["workflowExecution"]["runId"])
            await call(c.respond_decision_task_completed, taskToken=got["taskToken"], decisions=[complete])
        assert polled == {a, c_run}

        for workflow_id, run_id in (("a", a), ("b", b), ("c", c_run)):
            out = await call(
                c.get_workflow_execution_history,
                domain="d",
                execution={"workflowId": workflow_id, "runId": run_id},
            )
            events = out["events"]
            assert [e["eventId"] for e in events] == list(range(1, len(events) + 1))  # none lost
            assert events[-1]["eventType"] == "WorkflowExecutionCompleted"
        history_a = await call(
            c.get_workflow_execution_history, domain="d", execution={"workflowId": "a", "runId": a}
        )
        assert "ActivityTaskCompleted" in [e["eventType"] for e in history_a["events"]]
