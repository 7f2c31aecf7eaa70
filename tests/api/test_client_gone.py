"""A client that gives up, a storage failure, a retried start: nothing committed is stranded.

Issue 7, defects 2, 3 and 7, against a real server (both backends).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from foliot.core.errors import StorageUnavailable
from foliot.core.workflow import machine
from foliot.storage.base import UnitOfWork

from ..conftest import Api

POLL = "/apps/orders/tasks/poll"
QUEUED = {"name": "q", "steps": [{"name": "t", "type": "task", "queue": "work", "timeout": "1h"}]}


async def _start_queued(api: Api, n: int) -> list[str]:
    await api.register(QUEUED)
    return [(await api.start("q"))["runId"] for _ in range(n)]


async def _claimed(api: Api, run_ids: list[str]) -> set[str]:
    claimed = set()
    for run_id in run_ids:
        run = await api.engine.store.get_run(run_id)
        if run.task is not None and run.task.claimed_by is not None:
            claimed.add(run_id)
    return claimed


async def _claims_settled(api: Api, run_ids: list[str]) -> None:
    """Claims already handed to actors settle there: wait until no token is held, by sending
    every run a message that changes nothing, behind whatever its mailbox holds."""
    with trio.fail_after(10):
        while api.engine.queues.sizes()["reserved"]:
            for run_id in run_ids:
                await api.engine.runs.ask(run_id, machine.Heartbeat("tt_not_a_token"))


async def _drain(api: Api, expected: int) -> list[str]:
    """Poll until `expected` tasks were handed out (bounded), in the order they came."""
    got: list[str] = []
    with trio.move_on_after(10):
        while len(got) < expected:
            r = await api.call("POST", POLL, {"queue": "work", "maxTasks": 100, "waitSeconds": 1})
            assert r.status_code == 200, r.text
            got += [t["runId"] for t in r.json()["tasks"]]
    return got


async def test_a_poll_whose_client_gives_up_loses_no_task(api: Api) -> None:
    ids = await _start_queued(api, 60)

    async def impatient() -> None:
        async with httpx.AsyncClient(base_url=str(api.client.base_url)) as client:
            await client.post(POLL, json={"queue": "work", "maxTasks": 60}, headers=api.auth())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(impatient)
        # Give up the moment the first claim is committed: the others are in flight.
        await api.engine.runs.wait_for(ids[0], lambda r: r.task is not None and r.task.claimed_by is not None)
        nursery.cancel_scope.cancel()
    await _claims_settled(api, ids)
    claimed_then = await _claimed(api, ids)
    rest = [run_id for run_id in ids if run_id not in claimed_then]
    # Every task not claimed is offered again, none is lost; the claimed ones (answer lost with
    # the client) time out at their deadline and are offered again then (at-least-once).
    got = await _drain(api, len(rest))
    settled = await _claimed(api, ids)
    assert sorted(got) == sorted(rest)
    assert settled == set(ids)


async def test_a_claim_refused_by_storage_puts_the_tasks_back_in_order(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = await _start_queued(api, 20)
    real = api.engine.store.commit

    async def down(unit: UnitOfWork) -> Any:
        raise StorageUnavailable("database is down")

    monkeypatch.setattr(api.engine.store, "commit", down)
    r = await api.call("POST", POLL, {"queue": "work", "maxTasks": 20, "waitSeconds": 0})
    assert r.status_code == 503, r.text
    monkeypatch.setattr(api.engine.store, "commit", real)
    assert await _drain(api, 20) == ids


async def test_a_start_whose_client_gives_up_after_the_commit_still_dispatches(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    await api.register(QUEUED)
    real = api.engine.store.commit
    committed = trio.Event()

    async def commit_then_linger(unit: UnitOfWork) -> Any:
        result = await real(unit)
        if unit.expected_seq is None:  # a start
            committed.set()
            await trio.sleep(0.5)  # the client goes away in this window
        return result

    monkeypatch.setattr(api.engine.store, "commit", commit_then_linger)

    async def impatient() -> None:
        async with httpx.AsyncClient(base_url=str(api.client.base_url)) as client:
            await client.post("/apps/orders/runs", json={"workflow": "q"}, headers=api.auth())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(impatient)
        await committed.wait()
        nursery.cancel_scope.cancel()
    monkeypatch.setattr(api.engine.store, "commit", real)
    runs = (await api.call("GET", "/apps/orders/runs")).json()["runs"]
    assert len(runs) == 1
    assert await _drain(api, 1) == [runs[0]["runId"]]


async def test_a_retried_start_with_a_key_and_a_business_key_is_replayed(api: Api) -> None:
    await api.register(QUEUED)

    async def start(i: int, out: list[httpx.Response]) -> None:
        out.append(
            await api.call(
                "POST",
                "/apps/orders/runs",
                {"workflow": "q", "businessKey": f"order-{i}"},
                headers={**api.auth(), "Idempotency-Key": f"key-{i}"},
            )
        )

    for i in range(15):
        answers: list[httpx.Response] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(start, i, answers)
            nursery.start_soon(start, i, answers)
        assert sorted(r.status_code for r in answers) == [200, 201], [r.text for r in answers]
        assert answers[0].json() == answers[1].json()
