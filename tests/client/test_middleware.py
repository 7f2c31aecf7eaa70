"""Push handlers through `FoliotMiddleware` (FastAPI) and `FoliotWSGIMiddleware` (Flask):
served to a live Foliot end to end, and fed real signed pushes through each framework's test
client (deduplication, bad signatures, routes that are not Foliot's)."""

from __future__ import annotations

import json
from typing import Any

import flask
import trio
from fastapi import FastAPI
from fastapi.testclient import TestClient
from foliot_client import ACCEPTED, AsyncClient, Next, Task, TaskFailure, TaskRouter
from foliot_client.asgi import FoliotMiddleware
from foliot_client.handlers import MemoryIdempotencyStore
from foliot_client.models import AppCreated
from foliot_client.signing import sign
from foliot_client.wsgi import FoliotWSGIMiddleware, to_flask
from hypercorn.config import Config
from hypercorn.trio import serve

from ..conftest import ADMIN, Api
from ..helpers import answer_json

SHOP = {
    "name": "shop",
    "steps": [
        {"name": "reserve", "type": "task"},
        {"name": "route", "type": "task"},
        {"name": "normal", "type": "task", "next": "$end"},
        {"name": "express", "type": "task", "handler": "/hooks/express"},
        {"name": "later", "type": "task", "next": "charge"},
        {"name": "charge", "type": "task", "onFailure": "refund", "retry": {"maxAttempts": 1}},
        {"name": "refund", "type": "task", "next": "$fail"},
    ],
}


def shop_router(secrets: list[str], calls: list[str], tokens: list[str]) -> TaskRouter:
    router = TaskRouter(lambda: secrets)  # read at each push: the test learns them later

    @router.task("shop", "reserve")
    async def reserve(task: Task) -> dict[str, Any]:
        calls.append(task.step)
        return {"reservationId": f"R-{task.input['orderId']}"}

    @router.task("shop", "route")
    def route(task: Task) -> Next:  # a sync handler: run in a worker thread
        calls.append(task.step)
        return Next("express", {"express": True})

    @router.task("*", "express")
    async def express(task: Task) -> str:
        calls.append(task.step)
        return "shipped"

    @router.task("shop", "later")
    async def later(task: Task) -> Any:
        calls.append(task.step)
        tokens.append(task.task_token)
        return ACCEPTED

    @router.task("shop", "charge")
    def charge(task: Task) -> None:
        calls.append(task.step)
        raise TaskFailure("card_declined", "insufficient funds", retryable=False)

    @router.task("shop", "refund")
    async def refund(task: Task) -> dict[str, Any]:
        calls.append(task.step)
        assert task.error is not None
        return {"refunded": True, "because": task.error["class"]}

    return router


async def test_fastapi_app_serves_a_whole_run_end_to_end(api: Api, nursery: trio.Nursery) -> None:
    calls: list[str] = []
    tokens: list[str] = []
    secrets: list[str] = []
    web = FastAPI()

    @web.get("/health")
    async def health() -> dict[str, str]:
        return {"ok": "yes"}

    web.add_middleware(FoliotMiddleware, router=shop_router(secrets, calls, tokens), paths=["/hooks/express"])
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    binds = await nursery.start(serve, web, config)

    async with AsyncClient(api.running.url, ADMIN) as admin:
        created = await admin.put_app("shopapp", binds[0])
        assert isinstance(created, AppCreated)
    secrets.append(created.signing_secret)
    async with AsyncClient(api.running.url, created.api_key, app="shopapp") as c:
        await c.register_workflow(SHOP)
        run = await c.start_run("shop", {"orderId": 7})
        await api.until(run.run_id, "running")
        with trio.fail_after(20):
            while not tokens:
                await trio.sleep(0.005)
        assert (await c.get_run(run.run_id)).current_step == "later"
        await c.complete_task(tokens[0], {"late": True})
        final = await api.until(run.run_id, "failed")
        error = (await c.get_run(run.run_id)).error
        assert error is not None and (error.step, error.error_class, error.compensated_by) == (
            "charge",
            "card_declined",
            "refund",
        )
    assert calls == ["reserve", "route", "express", "later", "charge", "refund"]
    assert final["state"]["reserve"] == {"reservationId": "R-7"}
    assert final["state"]["route"] == {"express": True} and final["state"]["express"] == "shipped"
    assert final["state"]["later"] == {"late": True}
    assert final["state"]["refund"] == {"refunded": True, "because": "card_declined"}
    assert final["error"]["class"] == "card_declined" and final["error"]["compensatedBy"] == "refund"
    charge = [e for e in await _events(api, created.api_key, run.run_id) if e["type"] == "task_failed"]
    assert charge[0]["data"]["class"] == "card_declined"


async def _events(api: Api, key: str, run_id: str) -> list[dict[str, Any]]:
    async with AsyncClient(api.running.url, key, app="shopapp") as c:
        return [e.raw async for e in c.iter_events(run_id)]


async def _real_push(api: Api) -> tuple[bytes, dict[str, str]]:
    """A push exactly as the engine sent it to the app's handler: raw body and headers."""
    await api.register({"name": "shop", "steps": [{"name": "reserve", "type": "task"}]})
    api.handler.route("reserve", lambda body, h: answer_json(None))
    await api.start("shop", {"orderId": 3})
    await api.handler.wait_for(1)
    received = api.handler.received[0]
    return received.raw, received.headers


def _forwarded(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.startswith("foliot-") or k == "content-type"}


async def test_fastapi_test_client_dedupes_and_refuses_bad_signatures(api: Api) -> None:
    raw, headers = await _real_push(api)
    calls: list[str] = []
    store = MemoryIdempotencyStore()
    router = shop_router(api.handler.secrets, calls, [])
    router.store = store
    web = FastAPI()

    @web.get("/health")
    async def health() -> dict[str, str]:
        return {"ok": "yes"}

    web.add_middleware(FoliotMiddleware, router=router)

    def exercise() -> list[Any]:
        with TestClient(web) as tc:
            first = tc.post("/foliot/shop/reserve", content=raw, headers=_forwarded(headers))
            again = tc.post("/foliot/shop/reserve", content=raw, headers=_forwarded(headers))
            tampered = tc.post(
                "/foliot/shop/reserve", content=raw.replace(b"3", b"4"), headers=_forwarded(headers)
            )
            unsigned = tc.post("/foliot/shop/reserve", content=raw)
            other = tc.get("/health")
            return [first, again, tampered, unsigned, other]

    first, again, tampered, unsigned, other = await trio.to_thread.run_sync(exercise)
    assert first.status_code == 200 and first.json() == {"reservationId": "R-3"}
    assert again.status_code == 200 and again.content == first.content
    assert calls == ["reserve"]  # the redelivery was answered from the store
    assert len(store) == 1
    assert tampered.status_code == 401 and tampered.json()["error"]["class"] == "bad_signature"
    assert tampered.json()["error"]["retryable"] is False
    assert unsigned.status_code == 401
    assert other.json() == {"ok": "yes"}


async def test_flask_test_client_with_the_wsgi_middleware_and_a_view(api: Api) -> None:
    raw, headers = await _real_push(api)
    calls: list[str] = []
    router = shop_router(api.handler.secrets, calls, [])
    app = flask.Flask("shop")

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"ok": "yes"}

    @app.post("/custom")
    def custom() -> Any:  # a view of one's own calling the router
        return to_flask(router.handle_sync(flask.request.get_data(), flask.request.headers))

    app.wsgi_app = FoliotWSGIMiddleware(app.wsgi_app, router)  # type: ignore[method-assign]
    secrets = api.handler.secrets

    def exercise() -> dict[str, Any]:  # in a thread: a WSGI server has no event loop running
        tc = app.test_client()
        forwarded = _forwarded(headers)
        out: dict[str, Any] = {
            "first": tc.post("/foliot/shop/reserve", data=raw, headers=forwarded),
            "again": tc.post("/foliot/shop/reserve", data=raw, headers=forwarded),
            "view": tc.post("/custom", data=raw, headers=forwarded),
            "tampered": tc.post("/foliot/shop/reserve", data=raw + b" ", headers=forwarded),
            "health": tc.get("/health"),
        }
        # A task for a step nobody handles: 404, not retried; a body that is no task: 400.
        body = json.loads(raw)
        body["step"] = "nobody"
        raw2 = json.dumps(body).encode()
        out["unknown"] = tc.post("/foliot/x", data=raw2, headers={"foliot-signature": sign(raw2, secrets)})
        out["junk"] = tc.post("/foliot/x", data=b"[]", headers={"foliot-signature": sign(b"[]", secrets)})
        return out

    r = await trio.to_thread.run_sync(exercise)
    assert r["first"].status_code == 200 and json.loads(r["first"].data) == {"reservationId": "R-3"}
    assert r["again"].data == r["first"].data and r["view"].data == r["first"].data
    assert calls == ["reserve"]
    assert r["tampered"].status_code == 401
    assert r["health"].json == {"ok": "yes"}
    unknown, junk = r["unknown"], r["junk"]
    assert unknown.status_code == 404 and json.loads(unknown.data)["error"]["class"] == "unknown_step"
    assert junk.status_code == 400 and json.loads(junk.data)["error"]["retryable"] is False
