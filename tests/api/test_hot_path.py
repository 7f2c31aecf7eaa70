"""Starts and signals served at the ASGI edge (foliot/http/hot.py) answer exactly as Quart does.

Each request is sent twice: plain (served at the edge) and again with the edge's routes turned
off (so Quart serves it). Status, error body and the headers that matter
(Retry-After, Connection) must be the same, the edge must really have served the plain one, and
nothing is stored for a refused request.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from foliot.http import hot

from ..conftest import Api
from ..helpers import quart_only

WAIT = {"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths the edge served itself (not Quart)."""
    seen: list[str] = []
    real = hot.Hot._serve

    async def spy(self: hot.Hot, path: str, *args: Any) -> None:
        seen.append(path)
        await real(self, path, *args)

    monkeypatch.setattr(hot.Hot, "_serve", spy)
    return seen


async def both(
    api: Api, served: list[str], path: str, content: bytes, headers: dict[str, str]
) -> tuple[httpx.Response, httpx.Response]:
    before = len(served)
    at_edge = await api.client.post(path, content=content, headers=headers)
    assert served[before:] == [path], "the plain request was not served at the edge"
    with quart_only():
        by_quart = await api.client.post(path, content=content, headers=headers)
    assert len(served) == before + 1, "the second request was served at the edge"
    return at_edge, by_quart


def same(at_edge: httpx.Response, by_quart: httpx.Response) -> None:
    assert at_edge.status_code == by_quart.status_code, (at_edge.text, by_quart.text)
    assert at_edge.headers["content-type"] == by_quart.headers["content-type"] == "application/json"
    for header in ("retry-after", "connection"):
        assert at_edge.headers.get(header) == by_quart.headers.get(header), header
    assert at_edge.json() == by_quart.json()


def body(value: Any) -> bytes:
    return json.dumps(value).encode()


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize("settings_overrides", [{"payload_max_bytes": 1024}])
async def test_refusals_at_the_edge_are_quarts_refusals_and_store_nothing(
    api: Api, served: list[str]
) -> None:
    await api.register(WAIT)
    waiting = await api.start("w")
    auth = {**api.auth(), **JSON}
    other = await api.client.put("/apps/other", json={"handlerBaseUrl": "http://x"}, headers=api.admin())
    other_key = {"Authorization": f"Bearer {other.json()['apiKey']}", **JSON}
    r = await api.client.post("/admin/operator-tokens", json={"role": "operator"}, headers=api.admin())
    operator = {"Authorization": f"Bearer {r.json()['token']}", **JSON}
    runs, signals = f"/apps/{api.app}/runs", f"/apps/{api.app}/signals"
    good_start, good_signal = body({"workflow": "w"}), body({"runId": waiting["runId"], "name": "go"})
    cases: list[tuple[str, bytes, dict[str, str], int, str]] = [
        (runs, good_start, JSON, 401, "unauthorized"),
        (runs, good_start, {"Authorization": "Basic abc", **JSON}, 401, "unauthorized"),
        (runs, good_start, {"Authorization": "Bearer fk_nope.nope", **JSON}, 401, "unauthorized"),
        (runs, good_start, other_key, 403, "forbidden"),
        (runs, good_start, operator, 403, "forbidden"),
        ("/apps/nope/runs", good_start, {**api.admin(), **JSON}, 404, "not_found"),
        (runs, good_start, {**api.auth(), "Content-Type": "text/plain"}, 415, "unsupported_media_type"),
        (runs, b"{not json", auth, 400, "invalid_request"),
        (runs, b"", auth, 400, "invalid_request"),
        (runs, b"[1, 2]", auth, 400, "invalid_request"),
        (runs, body({"workflow": "w", "colour": "red"}), auth, 400, "invalid_request"),
        (runs, body({"workflow": 7}), auth, 400, "invalid_request"),
        (runs, body({"workflow": "bad name"}), auth, 400, "invalid_request"),
        (runs, body({"workflow": "w", "version": 0}), auth, 400, "invalid_request"),
        (runs, body({"workflow": "w", "runTimeout": "1.5s"}), auth, 400, "invalid_request"),
        (runs, body({"workflow": "nope"}), auth, 404, "not_found"),
        (runs, body({"workflow": "w", "input": "x" * 2000}), auth, 413, "payload_too_large"),
        (runs, b" " * 70_000, auth, 413, "payload_too_large"),  # over 2 x 1024 + 64 KiB
        (runs, good_start, {**auth, "Idempotency-Key": "k" * 256}, 400, "invalid_request"),
        (signals, good_signal, JSON, 401, "unauthorized"),
        (signals, body({"runId": "run_nope", "name": "go"}), auth, 404, "not_found"),
        (signals, body({"runId": waiting["runId"]}), auth, 400, "invalid_request"),
        (
            signals,
            body({"runId": waiting["runId"], "name": "go", "payload": "x" * 2000}),
            auth,
            413,
            "payload_too_large",
        ),
        (signals, body({"name": "go", "workflow": "w"}), auth, 400, "invalid_request"),
        (signals, body({"name": "go", "workflow": "w", "businessKey": "none"}), auth, 404, "not_found"),
        (
            signals,
            body({"name": "go", "workflow": "w", "businessKey": "b", "startIfMissing": {"version": 0}}),
            auth,
            400,
            "invalid_request",
        ),
    ]
    for path, content, headers, status, code in cases:
        at_edge, by_quart = await both(api, served, path, content, headers)
        same(at_edge, by_quart)
        assert (at_edge.status_code, at_edge.json()["error"]["code"]) == (status, code), (path, content[:80])
        if status == 413 and len(content) > 2048 + 65536:
            assert at_edge.headers["connection"] == "close"
    # Nothing was stored by any of them: one run, still waiting for its signal.
    listed = await api.call("GET", runs)
    assert [run["runId"] for run in listed.json()["runs"]] == [waiting["runId"]]
    assert (await api.run(waiting["runId"]))["status"] == "waiting"


async def test_starts_signals_and_replays_at_the_edge(api: Api, served: list[str]) -> None:
    await api.register(WAIT)
    auth = {**api.auth(), **JSON, "Idempotency-Key": "start-1"}
    path = f"/apps/{api.app}/runs"
    first = await api.client.post(path, content=body({"workflow": "w", "businessKey": "b1"}), headers=auth)
    assert first.status_code == 201 and first.json()["status"] == "waiting"
    again = await api.client.post(path, content=body({"workflow": "w", "businessKey": "b1"}), headers=auth)
    assert again.status_code == 200 and again.json() == first.json()
    reused = await api.client.post(path, content=body({"workflow": "w"}), headers=auth)
    assert reused.status_code == 409 and reused.json()["error"]["code"] == "idempotency_key_reused"
    taken = await api.client.post(
        path, content=body({"workflow": "w", "businessKey": "b1"}), headers={**api.auth(), **JSON}
    )
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "business_key_in_use"
    signal = body({"runId": first.json()["runId"], "name": "go", "signalId": "s1"})
    for status in ("delivered", "duplicate"):
        r = await api.client.post(f"/apps/{api.app}/signals", content=signal, headers=api.auth())
        assert r.status_code == 202 and r.json() == {"runId": first.json()["runId"], "status": status}
    closed = await api.client.post(
        f"/apps/{api.app}/signals",
        content=body({"runId": first.json()["runId"], "name": "go"}),
        headers=api.auth(),
    )
    assert closed.status_code == 409 and closed.json()["error"]["code"] == "run_closed"
    assert len(served) == 7
    # An admitted start or signal was counted in flight and is no longer.
    assert api.engine.admission.inflight == 0 and api.engine.admission.admitted == 7


@pytest.mark.parametrize("settings_overrides", [{"max_inflight_requests": 1}])
async def test_overload_at_the_edge_is_429_with_retry_after(api: Api, served: list[str]) -> None:
    await api.register(WAIT)
    with api.engine.admission.admit(api.app) as held:
        held.begin()
        at_edge, by_quart = await both(
            api, served, f"/apps/{api.app}/runs", body({"workflow": "w"}), api.auth()
        )
        same(at_edge, by_quart)
        assert at_edge.status_code == 429 and at_edge.headers["retry-after"] == "1"
        assert at_edge.json()["error"]["reason"] == "inflight"
    assert (await api.call("GET", f"/apps/{api.app}/runs")).json()["runs"] == []


QUEUED = {"name": "q", "steps": [{"name": "t", "type": "task", "queue": "work", "timeout": "1h"}]}


async def test_task_answers_at_the_edge_are_quarts_answers(api: Api, served: list[str]) -> None:
    await api.register(QUEUED)
    run = await api.start("q")
    polled = await api.call("POST", f"/apps/{api.app}/tasks/poll", {"queue": "work", "waitSeconds": 0})
    token = polled.json()["tasks"][0]["taskToken"]
    auth = {**api.auth(), **JSON}
    other = await api.client.put("/apps/other", json={"handlerBaseUrl": "http://x"}, headers=api.admin())
    other_key = {"Authorization": f"Bearer {other.json()['apiKey']}", **JSON}
    complete, beat = f"/apps/{api.app}/tasks/{token}/complete", f"/apps/{api.app}/tasks/{token}/heartbeat"
    cases: list[tuple[str, bytes, dict[str, str], int, str]] = [
        (complete, b"{}", JSON, 401, "unauthorized"),
        (complete, b"{}", other_key, 403, "forbidden"),
        (complete, b"{nope", auth, 400, "invalid_request"),
        (complete, body({"output": 1, "colour": "red"}), auth, 400, "invalid_request"),
        (complete, body({"output": 1, "error": {"class": "x"}}), auth, 400, "invalid_request"),
        (complete, body({"error": {"class": ""}}), auth, 400, "invalid_request"),
        (
            complete,
            body({"output": 1}),
            {**api.auth(), "Content-Type": "text/plain"},
            415,
            "unsupported_media_type",
        ),
        (f"/apps/{api.app}/tasks/tt_nope/complete", b"{}", auth, 404, "not_found"),
        (beat, body({"x": 1}), auth, 400, "invalid_request"),
        (f"/apps/{api.app}/tasks/tt_nope/heartbeat", b"", auth, 404, "not_found"),
    ]
    for path, content, headers, status, code in cases:
        at_edge, by_quart = await both(api, served, path, content, headers)
        same(at_edge, by_quart)
        assert (at_edge.status_code, at_edge.json()["error"]["code"]) == (status, code), (path, content)
    at_edge, by_quart = await both(api, served, beat, b"", auth)
    same(at_edge, by_quart)
    assert at_edge.json() == {"cancelRequested": False}
    assert (await api.run(run["runId"]))["status"] == "running"  # nothing answered the task yet
    before = len(served)
    done = await api.client.post(complete, content=body({"output": {"ok": True}}), headers=auth)
    assert done.status_code == 200 and done.json() == {"runId": run["runId"], "status": "completed"}
    again = await api.client.post(complete, content=body({"output": 2}), headers=auth)
    assert again.status_code == 409 and again.json()["error"]["code"] == "task_closed"
    assert len(served) == before + 2
    assert (await api.run(run["runId"]))["state"] == {"t": {"ok": True}}
