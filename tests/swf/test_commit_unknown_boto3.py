"""An SWF commit whose answer was lost (`CommitUnknown`: PostgreSQL's connection reset after
its COMMIT was sent) is read back before the caller is answered, as for runs
(tests/api/test_commit_unknown.py): landed, the decision's effects follow and the call
succeeds; not landed, the caller is told nothing changed and may retry with the same token;
unreadable (or the database perhaps still applying it), the caller is told it may have been
made and the effects follow once a later read finds it landed. Both stores, real boto3."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.config import Config

from foliot.core.errors import CommitUnknown
from foliot.kinds.swf import actor as swf_actor
from foliot.storage.swf import SwfUnit

from .conftest import PRESET_KEY, PRESET_SECRET, Swf, call, raises
from .test_tasks_boto3 import register_activity, schedule
from .test_write_boto3 import WF, history, setup


def once(swf: Swf) -> Any:
    """A client that sends each call once (`max_attempts` counts retries: 1 is one retry)."""
    return boto3.client(
        "swf",
        endpoint_url=swf.url,
        region_name="us-east-1",
        aws_access_key_id=PRESET_KEY,
        aws_secret_access_key=PRESET_SECRET,
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}, read_timeout=30),
    )


async def decision_task(swf: Swf) -> tuple[Any, str, str]:
    await setup(swf)
    c = once(swf)
    await register_activity(c)
    started = await call(c.start_workflow_execution, domain="d", workflowId="o-1", workflowType=WF)
    task = await call(c.poll_for_decision_task, domain="d", taskList={"name": "deciders"})
    return c, started["runId"], task["taskToken"]


def lose_answers(
    swf: Swf, monkeypatch: pytest.MonkeyPatch, *, apply: bool, settled: bool = True, start: bool = False
) -> None:
    """The next commit of an update (or, `start`, of a start) loses its answer, once."""
    store = swf.running.engine.store
    real = store.swf_commit

    async def lost(unit: SwfUnit) -> Any:
        if (unit.expected_version is None) != start:
            return await real(unit)
        if apply:
            await real(unit)
        monkeypatch.setattr(store, "swf_commit", real)  # once
        raise CommitUnknown("connection reset after COMMIT", settled=settled)

    monkeypatch.setattr(store, "swf_commit", lost)


async def test_a_decision_whose_commit_landed_succeeds_and_its_activity_is_offered(
    swf: Swf, monkeypatch: pytest.MonkeyPatch
) -> None:
    c, run_id, token = await decision_task(swf)
    lose_answers(swf, monkeypatch, apply=True)
    await call(c.respond_decision_task_completed, taskToken=token, decisions=[schedule("a1")])
    work = await call(c.poll_for_activity_task, domain="d", taskList={"name": "workers"})
    assert work["activityId"] == "a1"
    assert (await history(c, "o-1", run_id)).count("DecisionTaskCompleted") == 1


async def test_a_decision_whose_commit_did_not_land_is_refused_and_can_be_sent_again(
    swf: Swf, monkeypatch: pytest.MonkeyPatch
) -> None:
    c, run_id, token = await decision_task(swf)
    lose_answers(swf, monkeypatch, apply=False)
    err = await raises("ServiceUnavailable", c.respond_decision_task_completed, taskToken=token, decisions=[])
    assert "nothing was changed" in err.response["Error"]["Message"]
    assert "DecisionTaskCompleted" not in await history(c, "o-1", run_id)
    await call(c.respond_decision_task_completed, taskToken=token, decisions=[schedule("a1")])
    work = await call(c.poll_for_activity_task, domain="d", taskList={"name": "workers"})
    assert work["activityId"] == "a1"


async def test_a_decision_in_doubt_is_answered_so_and_its_effects_follow(
    swf: Swf, monkeypatch: pytest.MonkeyPatch
) -> None:
    c, run_id, token = await decision_task(swf)
    lose_answers(swf, monkeypatch, apply=True, settled=False)
    err = await raises(
        "ServiceUnavailable", c.respond_decision_task_completed, taskToken=token, decisions=[schedule("a1")]
    )
    assert "may have been made" in err.response["Error"]["Message"]
    # Read again a second later: it had landed, so its activity is offered (the poll waits).
    work = await call(c.poll_for_activity_task, domain="d", taskList={"name": "workers"})
    assert work["activityId"] == "a1"
    assert (await history(c, "o-1", run_id)).count("DecisionTaskCompleted") == 1
    await raises("UnknownResourceFault", c.respond_decision_task_completed, taskToken=token, decisions=[])


async def test_a_message_right_after_a_decision_in_doubt_reads_it_again_first(
    swf: Swf, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The next message (a signal; the `Resolve` put off past the test) finds the commit in
    # doubt: the execution is read again, the landed decision's activity offered, then the
    # signal applied on top of it.
    monkeypatch.setattr(swf_actor, "_RESOLVE_AFTER_S", 3600.0)
    c, run_id, token = await decision_task(swf)
    lose_answers(swf, monkeypatch, apply=True, settled=False)
    decide = c.respond_decision_task_completed
    await raises("ServiceUnavailable", decide, taskToken=token, decisions=[schedule("a1")])
    await call(c.signal_workflow_execution, domain="d", workflowId="o-1", runId=run_id, signalName="s")
    work = await call(c.poll_for_activity_task, domain="d", taskList={"name": "workers"})
    assert work["activityId"] == "a1"
    events = await history(c, "o-1", run_id)
    assert events.count("DecisionTaskCompleted") == 1 and events.count("WorkflowExecutionSignaled") == 1
    assert events.index("ActivityTaskScheduled") < events.index("WorkflowExecutionSignaled")


@pytest.mark.parametrize("outcome", ["landed", "not-landed", "in-doubt"])
async def test_a_start_whose_answer_was_lost(swf: Swf, monkeypatch: pytest.MonkeyPatch, outcome: str) -> None:
    await setup(swf)
    c = once(swf)
    lose_answers(swf, monkeypatch, apply=outcome != "not-landed", settled=outcome != "in-doubt", start=True)
    start = c.start_workflow_execution
    if outcome == "landed":
        run_id = (await call(start, domain="d", workflowId="o-1", workflowType=WF))["runId"]
    else:
        err = await raises("ServiceUnavailable", start, domain="d", workflowId="o-1", workflowType=WF)
        said = err.response["Error"]["Message"]
        if outcome == "not-landed":
            assert "nothing was changed" in said
            listed = await call(
                c.list_open_workflow_executions, domain="d", startTimeFilter={"oldestDate": 0}
            )
            assert listed["executionInfos"] == []
            return
        assert "may have been made" in said
        await raises(
            "WorkflowExecutionAlreadyStartedFault", start, domain="d", workflowId="o-1", workflowType=WF
        )
        run_id = ""
    # Landed: its first decision task is offered (in doubt, once the execution is read again).
    task = await call(c.poll_for_decision_task, domain="d", taskList={"name": "deciders"})
    assert task["workflowExecution"]["workflowId"] == "o-1"
    assert not run_id or task["workflowExecution"]["runId"] == run_id
