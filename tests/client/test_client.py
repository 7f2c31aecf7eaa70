"""`AsyncClient` and `Client` against a live Foliot (SQLite and PostgreSQL): every method, typed
results and errors, idempotent retries, cursor iteration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import httpx
import pytest
import trio
from foliot_client import AsyncClient, Client, RetryPolicy, errors
from foliot_client.models import App, AppCreated, RateLimit

from ..conftest import ADMIN, Api
from ..helpers import answer_json

T = TypeVar("T")
FAST = RetryPolicy(max_attempts=4, initial_interval=0.001, max_interval=0.001)

FLOW = {
    "name": "flow",
    "steps": [
        {"name": "reserve", "type": "task", "retry": {"maxAttempts": 1}},
        {"name": "pay", "type": "wait", "signal": "paid"},
        {"name": "pick", "type": "task", "queue": "warehouse"},
    ],
}
WAIT = {"name": "wait", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}


def client(api: Api, token: str | None = None, **kw: Any) -> AsyncClient:
    return AsyncClient(api.running.url, token or api.key, app=api.app, retry=FAST, **kw)


async def in_thread(fn: Callable[[], T]) -> T:
    """The blocking client must not block the loop that serves it."""
    return await trio.to_thread.run_sync(fn)


async def test_runs_signals_tasks_and_history(api: Api) -> None:
    api.handler.route("reserve", lambda body, h: answer_json({"reservationId": "R-1"}))
    async with client(api) as c:
        ref = await c.register_workflow(FLOW)
        assert (ref.name, ref.version, ref.created) == ("flow", 1, True)
        again = await c.register_workflow(FLOW)
        assert (again.version, again.created) == (1, False)
        assert (await c.get_workflow("flow")).definition["steps"][0]["name"] == "reserve"
        assert (await c.get_workflow("flow", version=1)).version == 1
        assert [w.name for w in (await c.list_workflows()).items] == ["flow"]

        run = await c.start_run("flow", {"orderId": 7}, business_key="order-7")
        assert run.status == "running" and run.input == {"orderId": 7} and run.business_key == "order-7"
        await api.until(run.run_id, "waiting")
        got = await c.get_run(run.run_id)
        assert got.state == {"reserve": {"reservationId": "R-1"}} and got.wait_signal == "paid"
        assert got.created_at is not None and got.created_at.tzinfo is not None

        with pytest.raises(errors.BusinessKeyInUse) as busy:
            await c.start_run("flow", business_key="order-7")
        assert busy.value.run_id == run.run_id

        sent = await c.send_signal("paid", {"amount": 3}, workflow="flow", business_key="order-7")
        assert (sent.run_id, sent.status) == (run.run_id, "delivered")
        # The same signalId again (a retry) is a duplicate, never a second delivery.
        dup = await c.send_signal("paid", run_id=run.run_id, signal_id=sent.signal_id)
        assert dup.status == "duplicate"

        tasks = await c.poll_tasks("warehouse", wait_seconds=5, max_tasks=2, worker_id="t")
        assert [t.step for t in tasks] == ["pick"] and tasks[0].state["pay"] == {"amount": 3}
        beat = await c.heartbeat_task(tasks[0].task_token)
        assert beat.cancel_requested is False
        done = await c.complete_task(tasks[0].task_token, {"box": 1})
        assert done.run_id == run.run_id
        with pytest.raises(errors.TaskClosed):
            await c.complete_task(tasks[0].task_token, {"box": 2})
        with pytest.raises(errors.NotFound):
            await c.heartbeat_task("tt_unknown")
        final = await api.until(run.run_id, "completed")
        assert final["state"]["pick"] == {"box": 1}

        events = [e async for e in c.iter_events(run.run_id, page_size=2)]
        assert [e.seq for e in events] == sorted(e.seq for e in events)
        assert events[0].type == "run_started" and events[-1].type == "run_completed"
        assert [e.type for e in events] == [e["type"] for e in await api.events(run.run_id)]
        page = await c.list_events(run.run_id, after=events[1].seq, limit=1)
        assert page.items[0].seq == events[2].seq and page.next_cursor is not None


async def test_interventions_and_typed_errors(api: Api) -> None:
    api.handler.route(
        "reserve", lambda body, h: answer_json({"error": {"class": "boom", "retryable": False}}, 500)
    )
    async with client(api) as c:
        await c.register_workflow(FLOW)
        await c.register_workflow(WAIT)
        failed = await c.start_run("flow")
        await api.until(failed.run_id, "failed")
        run = await c.get_run(failed.run_id)
        assert run.error is not None and (run.error.step, run.error.error_class) == ("reserve", "boom")
        assert run.is_terminal

        api.handler.route("reserve", lambda body, h: answer_json({"ok": True}))
        redriven = await c.redrive_run(failed.run_id, reason="fixed")
        assert redriven.generation == 2
        await api.until(failed.run_id, "waiting")
        skipped = await c.skip_step(failed.run_id, output={"amount": 0}, reason="paid by phone")
        assert skipped.current_step == "pick"
        edited = await c.edit_state(failed.run_id, set={"note": "vip"}, unset=["reserve"], reason="ops")
        assert edited.state["note"] == "vip" and "reserve" not in edited.state
        rewound = await c.rewind_run(failed.run_id, "pay", reason="again")
        assert rewound.current_step == "pay" and rewound.generation == 3
        cancelled = await c.cancel_run(failed.run_id, reason="done")
        assert cancelled.status == "cancelled"
        with pytest.raises(errors.InvalidStatus) as invalid:
            await c.cancel_run(failed.run_id)
        assert invalid.value.status == 409 and "invalid_status" in str(invalid.value)

        with pytest.raises(errors.NotFound):
            await c.start_run("nope")
        with pytest.raises(errors.InvalidRequest) as bad:
            await c.start_run("wait", run_timeout="1.5s")
        assert bad.value.field == "runTimeout"
        with pytest.raises(errors.RunClosed):
            await c.send_signal("go", run_id=failed.run_id)
    async with client(api, token="fk_nope.nope") as stranger:
        with pytest.raises(errors.Unauthorized):
            await stranger.get_run(failed.run_id)


async def test_cursor_iteration_and_filters(api: Api) -> None:
    async with client(api) as c:
        await c.register_workflow(WAIT)
        started = [(await c.start_run("wait", {"i": i})).run_id for i in range(7)]
        seen = [r.run_id async for r in c.iter_runs(workflow="wait", page_size=3)]
        assert seen == list(reversed(started))  # newest first, across three pages
        first = await c.list_runs(status="waiting", limit=5)
        assert len(first.items) == 5 and first.next_cursor is not None
        rest = await c.list_runs(status="waiting", limit=5, cursor=first.next_cursor)
        assert len(rest.items) == 2 and rest.next_cursor is None
        assert [r.run_id async for r in c.iter_runs(status="completed")] == []


async def test_admin_apps_keys_secrets_and_operator_reads(api: Api) -> None:
    async with client(api, token=ADMIN) as admin:
        created = await admin.put_app("billing", "http://127.0.0.1:1", description="money")
        assert isinstance(created, AppCreated) and created.api_key.startswith("fk_")
        assert (created.weight, created.rate_limit) == (1, None)
        updated = await admin.put_app("billing", "http://127.0.0.1:2")
        assert isinstance(updated, App) and updated.handler_base_url == "http://127.0.0.1:2"
        limited = await admin.put_app(
            "billing", "http://127.0.0.1:2", weight=5, rate_limit={"limit": 100, "period": "1m"}
        )
        assert isinstance(limited, App) and limited.weight == 5
        assert limited.rate_limit == RateLimit(100, 60_000)
        kept = await admin.put_app("billing", "http://127.0.0.1:2")  # omitted: left as they are
        assert (kept.weight, kept.rate_limit) == (5, RateLimit(100, 60_000))
        cleared = await admin.put_app("billing", "http://127.0.0.1:2", rate_limit=None)
        assert (cleared.weight, cleared.rate_limit) == (5, None)
        with pytest.raises(errors.InvalidRequest) as refused:
            await admin.put_app("billing", "http://127.0.0.1:2", weight=101)
        assert refused.value.field == "weight"
        key = await admin.create_api_key(app="billing")
        secret = await admin.rotate_signing_secret(grace_seconds=60, app="billing")
        view = await admin.get_app(app="billing")
        assert {k.key_id for k in view.api_keys} == {created.key_id, key.key_id}
        assert {s.secret_id for s in view.signing_secrets} == {created.secret_id, secret.secret_id}
        await admin.revoke_api_key(key.key_id, app="billing")
        async with client(api, token=key.api_key) as revoked:
            with pytest.raises(errors.Unauthorized):
                await revoked.get_app(app="billing")
        async with client(api, token=created.api_key) as billing:
            with pytest.raises(errors.Forbidden):
                await billing.get_app(app=api.app)

        await admin.register_workflow(WAIT, app=api.app)
        run = await admin.start_run("wait", app=api.app)
        await api.until(run.run_id, "waiting")
        actors = await admin.list_actors(status="waiting")
        assert run.run_id in {a.run_id for a in actors}
        assert (await admin.get_actor(run.run_id))["runId"] == run.run_id
        assert "count" in await admin.timers()
        assert await admin.queues() == []


async def test_operator_tokens_sync_and_async(api: Api) -> None:
    async with client(api, token=ADMIN) as admin:
        made = await admin.create_operator_token("operator", name="oncall")
        assert (made.role, made.name) == ("operator", "oncall") and made.token and made.created_at
        listed = await admin.list_operator_tokens()
        assert [(t.token_id, t.token) for t in listed] == [(made.token_id, None)]
        async with client(api, token=made.token) as person:
            assert (await person.list_runs()).items == []
            with pytest.raises(errors.Forbidden):
                await person.list_operator_tokens()
        with pytest.raises(errors.InvalidRequest) as bad:
            await admin.create_operator_token("root")
        assert bad.value.field == "role"

    with Client(api.running.url, ADMIN, retry=FAST) as blocking:
        viewer = await in_thread(lambda: blocking.create_operator_token("viewer"))
        assert viewer.name is None and viewer.token is not None
        ids = {t.token_id for t in await in_thread(blocking.list_operator_tokens)}
        assert ids == {made.token_id, viewer.token_id}
        await in_thread(lambda: blocking.revoke_operator_token(made.token_id))
        with pytest.raises(errors.NotFound):
            await in_thread(lambda: blocking.revoke_operator_token(made.token_id))
        assert [t.token_id for t in await in_thread(blocking.list_operator_tokens)] == [viewer.token_id]


async def test_queues_show_waiting_tasks_and_parked_pollers(api: Api) -> None:
    async with client(api, token=ADMIN) as admin, client(api) as c:
        await c.register_workflow(FLOW)
        api.handler.route("reserve", lambda body, h: answer_json(None))
        run = await c.start_run("flow")
        await api.until(run.run_id, "waiting")
        await c.send_signal("paid", run_id=run.run_id)
        await api.until(run.run_id, "running")
        with trio.fail_after(10):
            while not (queues := await admin.queues()):
                await trio.sleep(0.01)
        assert queues == [{"app": api.app, "queue": "warehouse", "depth": 1, "waitingPollers": 0}]
        async with trio.open_nursery() as n:
            n.start_soon(lambda: c.poll_tasks("other", wait_seconds=30))
            with trio.fail_after(10):
                while len(queues := await admin.queues()) < 2:
                    await trio.sleep(0.01)
            assert {"app": api.app, "queue": "other", "depth": 0, "waitingPollers": 1} in queues
            n.cancel_scope.cancel()


class LoseFirstAnswer(httpx.AsyncBaseTransport):
    """A real transport that delivers the first request matching `path` but loses its
    answer (the connection breaks on the way back), or refuses to connect when `before`."""

    def __init__(self, path: str, *, before: bool = False) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.path = path
        self.before = before
        self.sent: list[str] = []
        self.broken = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request.url.path)
        if not self.broken and request.url.path.endswith(self.path):
            self.broken = True
            if self.before:
                raise httpx.ConnectError("refused", request=request)
            response = await self.inner.handle_async_request(request)
            await response.aread()
            raise httpx.ReadError("connection reset", request=request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_start_whose_answer_was_lost_is_retried_into_the_same_run(api: Api) -> None:
    async with client(api) as c:
        await c.register_workflow(WAIT)
    transport = LoseFirstAnswer("/runs")
    async with client(api, transport=transport) as c:
        run = await c.start_run("wait", {"x": 1})
    assert transport.sent.count(f"/apps/{api.app}/runs") == 2
    async with client(api) as c:
        assert [r.run_id for r in (await c.list_runs()).items] == [run.run_id]


async def test_an_intervention_whose_answer_was_lost_is_not_repeated(api: Api) -> None:
    async with client(api) as c:
        await c.register_workflow(WAIT)
        run = await c.start_run("wait")
    transport = LoseFirstAnswer("/cancel")
    async with client(api, transport=transport) as c:
        with pytest.raises(errors.TransportError) as lost:
            await c.cancel_run(run.run_id)
        assert lost.value.connected
        assert (await c.get_run(run.run_id)).status == "cancelled"  # it did reach the server
    assert transport.sent.count(f"/apps/{api.app}/runs/{run.run_id}/cancel") == 1
    refused = LoseFirstAnswer("/redrive", before=True)
    async with client(api, transport=refused) as c:
        with pytest.raises(errors.InvalidStatus):  # retried after the refusal: then answered
            await c.redrive_run(run.run_id)
    assert refused.sent.count(f"/apps/{api.app}/runs/{run.run_id}/redrive") == 2


async def test_the_blocking_client(api: Api) -> None:
    url, key, app = api.running.url, api.key, api.app

    def work() -> tuple[str, list[str], str]:
        with Client(url, key, app=app, retry=FAST) as c:
            c.register_workflow(WAIT)
            run = c.start_run("wait", {"n": 1}, business_key="b-1", idempotency_key="k-1")
            same = c.start_run("wait", {"n": 1}, business_key="b-1", idempotency_key="k-1")
            assert same.run_id == run.run_id
            with pytest.raises(errors.IdempotencyKeyReused):
                c.start_run("wait", {"n": 2}, idempotency_key="k-1")
            listed = [r.run_id for r in c.iter_runs(page_size=1)]
            signal = c.send_signal("go", run_id=run.run_id)
            return run.run_id, listed, signal.status

    run_id, listed, status = await in_thread(work)
    assert listed == [run_id] and status == "delivered"
    await api.until(run_id, "completed")

    def history() -> list[str]:
        with Client(url, key, app=app) as c:
            return [e.type for e in c.iter_events(run_id, page_size=2)]

    assert (await in_thread(history))[-1] == "run_completed"


async def test_pause_unpause_bulk_and_diagnosis(api: Api) -> None:
    from foliot_client import BulkSelection

    async with client(api) as c:
        await c.register_workflow(WAIT)
        one = await c.start_run("wait")
        await api.until(one.run_id, "waiting")
        paused = await c.pause_run(one.run_id, reason="hold")
        assert paused.status == "paused"
        with pytest.raises(errors.InvalidStatus):
            await c.pause_run(one.run_id)
        held = await c.send_signal("go", run_id=one.run_id)
        assert held.status == "buffered"  # a paused run advances on nothing
        assert (await c.unpause_run(one.run_id)).status in ("running", "completed")
        await api.until(one.run_id, "completed")

        why = await c.diagnose_run(one.run_id)
        assert why.summary and isinstance(why.attention, bool)
        assert all({"code", "text"} <= set(fact) for fact in why.facts)

        runs = [(await c.start_run("wait")).run_id for _ in range(5)]
        for run_id in runs:
            await api.until(run_id, "waiting")
        pages = [
            p async for p in c.bulk("pause", BulkSelection("wait", status="waiting", limit=2, reason="r"))
        ]
        assert len(pages) >= 3 and pages[-1].cursor is None
        assert sum(p.acted for p in pages) == 5 and sum(p.skipped for p in pages) == 0
        assert {(await c.get_run(r)).status for r in runs} == {"paused"}
        page = await c.bulk_page("cancel", BulkSelection("wait", limit=1000))
        assert (page.acted, page.cursor) == (5, None)
        with pytest.raises(ValueError):
            await c.bulk_page("explode", BulkSelection("wait"))


async def test_signal_with_start_and_waits_for_several_signals(api: Api) -> None:
    cart = {"name": "cart", "steps": [{"name": "w", "type": "wait", "signals": ["add", "close"]}]}
    async with client(api) as c:
        await c.register_workflow(cart)
        first = await c.signal_with_start(
            "add", {"sku": 1}, workflow="cart", business_key="c-1", input={"u": 7}
        )
        assert first.started is True
        run = await c.get_run(first.run_id)
        assert run.input == {"u": 7} and run.business_key == "c-1"
        await api.until(first.run_id, "completed")
        assert (await c.get_run(first.run_id)).state["w"] == {"signal": "add", "payload": {"sku": 1}}

        other = await c.start_run("cart", business_key="c-2")
        waiting = await api.until(other.run_id, "waiting")
        assert (await c.get_run(other.run_id)).wait_signals == ["add", "close"] == waiting["waitSignals"]
        to_open = await c.signal_with_start(
            "close", workflow="cart", business_key="c-2", idempotency_key="k-9"
        )
        assert (to_open.run_id, to_open.started) == (other.run_id, False)
        again = {"workflow": "cart", "business_key": "c-2", "idempotency_key": "k-9"}
        replay = await c.signal_with_start("close", **again, signal_id=to_open.signal_id)  # a retry
        assert (replay.run_id, replay.status) == (to_open.run_id, to_open.status)
        with pytest.raises(errors.IdempotencyKeyReused):  # the same key for another signal
            await c.signal_with_start("add", **again)
        assert len((await c.list_runs(workflow="cart")).items) == 2


async def test_debounced_starts_sync_and_async(api: Api) -> None:
    from foliot_client import DebouncedStart

    await api.register({"name": "sync", "steps": [{"name": "t", "type": "task"}]})
    async with client(api) as c:
        first = await c.start_debounced("sync", {"n": 1}, key="order-7", period="1h")
        assert isinstance(first, DebouncedStart)
        assert first.pending and not first.dropped and first.run is None
        assert first.starts_at is not None and first.starts_at.tzinfo is not None
        again = await c.start_debounced("sync", {"n": 2}, key="order-7", period="1h")
        assert again.run_id == first.run_id and again.raw["debounced"] is True
        run = await c.get_run(first.run_id)
        assert run.status == "sleeping" and run.input == {"n": 2}
        lead = await c.start_debounced("sync", key="k", period="1h", mode="leading", priority=1)
        assert lead.run is not None and lead.run.status == "running" and lead.run.priority == 1
        assert not lead.pending and not lead.dropped and lead.run_id == lead.run.run_id
        with pytest.raises(errors.InvalidRequest) as bad:
            await c.start_debounced("sync", key="k2", period="soon")
        assert bad.value.field == "debounce.period"
    with Client(api.running.url, api.key, app=api.app, retry=FAST) as sync_client:
        dropped = await in_thread(
            lambda: sync_client.start_debounced("sync", key="k", period="1h", mode="leading")
        )
    assert dropped.dropped and dropped.run_id == lead.run_id and dropped.run is None


async def test_registering_answers_the_warnings(api: Api) -> None:
    parent = {"name": "parent", "steps": [{"name": "ship", "type": "run", "workflow": "shipping"}]}
    async with client(api) as c:
        ref = await c.register_workflow(parent)
        assert ref.created and [w["code"] for w in ref.warnings] == ["child_workflow_missing"]
        assert ref.warnings[0]["field"] == "steps[0].workflow"
        assert (await c.register_workflow(FLOW)).warnings == ()
