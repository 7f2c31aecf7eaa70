"""Bad input gets the SPEC's error shape and changes nothing (the store is compared before/after)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from foliot.storage.base import RunFilter

from ..conftest import Api

SMALL = {"name": "small", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}


async def snapshot(api: Api) -> dict[str, Any]:
    store = api.engine.store
    runs = await store.list_runs(RunFilter(api.app), 1000, None)
    return {
        "app": await store.get_app(api.app),
        "other": await store.get_app("other"),
        "keys": await store.list_api_keys(api.app),
        "secrets": await store.list_signing_secrets(api.app),
        "workflows": await store.list_workflows(api.app, 1000),
        "runs": runs,
        "events": [await store.list_events(r.run_id, 0, 1000) for r in runs],
        "operator_tokens": await store.list_operator_tokens(),
        "swf_credentials": await store.list_swf_credentials(),
    }


@pytest.fixture
async def seeded(api: Api) -> Api:
    await api.register(SMALL)
    run = await api.start("small", {"a": 1}, businessKey="bk-1")
    await api.until(run["runId"], "waiting")
    return api


CASES: list[tuple[str, str, str, Any, str, int, str, str | None]] = [
    # (id, method, path, body (dict, or str for raw bytes), who, status, code, field)
    ("app-malformed", "PUT", "/apps/new", "{not json", "admin", 400, "invalid_request", None),
    ("app-not-object", "PUT", "/apps/new", "[1]", "admin", 400, "invalid_request", None),
    (
        "app-bad-name",
        "PUT",
        "/apps/-bad",
        {"handlerBaseUrl": "http://x"},
        "admin",
        400,
        "invalid_request",
        "app",
    ),
    (
        "app-unknown-field",
        "PUT",
        "/apps/new",
        {"handlerBaseUrl": "http://x", "color": 1},
        "admin",
        400,
        "invalid_request",
        "color",
    ),
    (
        "app-wrong-type",
        "PUT",
        "/apps/new",
        {"handlerBaseUrl": 7},
        "admin",
        400,
        "invalid_request",
        "handlerBaseUrl",
    ),
    (
        "app-bad-url",
        "PUT",
        "/apps/new",
        {"handlerBaseUrl": "ftp://x"},
        "admin",
        400,
        "invalid_request",
        "handlerBaseUrl",
    ),
    ("app-missing", "PUT", "/apps/new", {}, "admin", 400, "invalid_request", "handlerBaseUrl"),
    (
        "app-url-port",
        "PUT",
        "/apps/new",
        {"handlerBaseUrl": "http://handler:abc"},
        "admin",
        400,
        "invalid_request",
        "handlerBaseUrl",
    ),
    (
        "app-url-port-range",
        "PUT",
        "/apps/orders",
        {"handlerBaseUrl": "http://handler:99999"},
        "admin",
        400,
        "invalid_request",
        "handlerBaseUrl",
    ),
    (
        "app-url-credentials",
        "PUT",
        "/apps/orders",
        {"handlerBaseUrl": "http://user:secret@handler"},
        "admin",
        400,
        "invalid_request",
        "handlerBaseUrl",
    ),
    (
        "app-url-host",
        "PUT",
        "/apps/new",
        {"handlerBaseUrl": "http://ha ndler"},
        "admin",
        400,
        "invalid_request",
        "handlerBaseUrl",
    ),
    (
        "app-url-path",
        "PUT",
        "/apps/orders",
        {"handlerBaseUrl": "http://handler/é"},
        "admin",
        400,
        "invalid_request",
        "handlerBaseUrl",
    ),
    ("app-by-app-key", "PUT", "/apps/new", {"handlerBaseUrl": "http://x"}, "app", 403, "forbidden", None),
    ("app-no-auth", "PUT", "/apps/new", {"handlerBaseUrl": "http://x"}, "none", 401, "unauthorized", None),
    (
        "app-wrong-token",
        "PUT",
        "/apps/new",
        {"handlerBaseUrl": "http://x"},
        "wrong",
        401,
        "unauthorized",
        None,
    ),
    ("mint-by-app", "POST", "/apps/orders/api-keys", {}, "app", 403, "forbidden", None),
    ("mint-extra", "POST", "/apps/orders/api-keys", {"x": 1}, "admin", 400, "invalid_request", "x"),
    (
        "rotate-negative",
        "POST",
        "/apps/orders/signing-secrets",
        {"graceSeconds": -1},
        "admin",
        400,
        "invalid_request",
        "graceSeconds",
    ),
    (
        "rotate-type",
        "POST",
        "/apps/orders/signing-secrets",
        {"graceSeconds": "1"},
        "admin",
        400,
        "invalid_request",
        "graceSeconds",
    ),
    ("wf-malformed", "POST", "/apps/orders/workflows", "{", "app", 400, "invalid_request", None),
    (
        "wf-no-steps",
        "POST",
        "/apps/orders/workflows",
        {"name": "x", "steps": []},
        "app",
        400,
        "invalid_request",
        "steps",
    ),
    (
        "wf-bad-duration",
        "POST",
        "/apps/orders/workflows",
        {"name": "x", "steps": [{"name": "a", "type": "task", "timeout": "1.5s"}]},
        "app",
        400,
        "invalid_request",
        "steps[0].timeout",
    ),
    (
        "wf-dup",
        "POST",
        "/apps/orders/workflows",
        {"name": "x", "steps": [{"name": "a", "type": "task"}, {"name": "a", "type": "task"}]},
        "app",
        400,
        "invalid_request",
        "steps[1].name",
    ),
    ("wf-other-app", "POST", "/apps/other/workflows", SMALL, "app", 403, "forbidden", None),
    ("wf-unknown-app", "POST", "/apps/ghost/workflows", SMALL, "admin", 404, "not_found", None),
    ("run-unknown-wf", "POST", "/apps/orders/runs", {"workflow": "ghost"}, "app", 404, "not_found", None),
    (
        "run-unknown-version",
        "POST",
        "/apps/orders/runs",
        {"workflow": "small", "version": 9},
        "app",
        404,
        "not_found",
        None,
    ),
    (
        "run-version-type",
        "POST",
        "/apps/orders/runs",
        {"workflow": "small", "version": "1"},
        "app",
        400,
        "invalid_request",
        "version",
    ),
    (
        "run-bk-type",
        "POST",
        "/apps/orders/runs",
        {"workflow": "small", "businessKey": 5},
        "app",
        400,
        "invalid_request",
        "businessKey",
    ),
    (
        "run-bk-in-use",
        "POST",
        "/apps/orders/runs",
        {"workflow": "small", "businessKey": "bk-1"},
        "app",
        409,
        "business_key_in_use",
        None,
    ),
    (
        "run-timeout",
        "POST",
        "/apps/orders/runs",
        {"workflow": "small", "runTimeout": "1.5s"},
        "app",
        400,
        "invalid_request",
        "runTimeout",
    ),
    (
        "run-extra",
        "POST",
        "/apps/orders/runs",
        {"workflow": "small", "inputs": 1},
        "app",
        400,
        "invalid_request",
        "inputs",
    ),
    (
        "run-bad-wf-name",
        "POST",
        "/apps/orders/runs",
        {"workflow": "$x"},
        "app",
        400,
        "invalid_request",
        "workflow",
    ),
    (
        "run-nan",
        "POST",
        "/apps/orders/runs",
        '{"workflow":"small","input":NaN}',
        "app",
        400,
        "invalid_request",
        None,
    ),
    (
        "run-too-big",
        "POST",
        "/apps/orders/runs",
        {"workflow": "small", "input": "x" * 262_143},
        "app",
        413,
        "payload_too_large",
        None,
    ),
    (
        "signal-too-big",
        "POST",
        "/apps/orders/signals",
        {"workflow": "small", "businessKey": "bk-1", "name": "go", "payload": "é" * 131_072},
        "app",
        413,
        "payload_too_large",
        None,
    ),
    (
        "signal-no-run",
        "POST",
        "/apps/orders/signals",
        {"runId": "run_nope", "name": "go"},
        "app",
        404,
        "not_found",
        None,
    ),
    (
        "signal-no-key",
        "POST",
        "/apps/orders/signals",
        {"workflow": "small", "businessKey": "nope", "name": "go"},
        "app",
        404,
        "not_found",
        None,
    ),
    (
        "signal-bad-name",
        "POST",
        "/apps/orders/signals",
        {"workflow": "small", "businessKey": "bk-1", "name": "a b"},
        "app",
        400,
        "invalid_request",
        "name",
    ),
    (
        "signal-no-target",
        "POST",
        "/apps/orders/signals",
        {"name": "go"},
        "app",
        400,
        "invalid_request",
        "runId",
    ),
    (
        "complete-unknown",
        "POST",
        "/apps/orders/tasks/tt_nope/complete",
        {"output": 1},
        "app",
        404,
        "not_found",
        None,
    ),
    (
        "complete-bad-error",
        "POST",
        "/apps/orders/tasks/tt_nope/complete",
        {"error": {"class": 1}},
        "app",
        400,
        "invalid_request",
        "error.class",
    ),
    ("heartbeat-unknown", "POST", "/apps/orders/tasks/tt_nope/heartbeat", {}, "app", 404, "not_found", None),
    (
        "poll-wait",
        "POST",
        "/apps/orders/tasks/poll",
        {"queue": "q", "waitSeconds": 61},
        "app",
        400,
        "invalid_request",
        "waitSeconds",
    ),
    (
        "poll-max",
        "POST",
        "/apps/orders/tasks/poll",
        {"queue": "q", "maxTasks": 0},
        "app",
        400,
        "invalid_request",
        "maxTasks",
    ),
    ("list-limit", "GET", "/apps/orders/runs?limit=1001", None, "app", 400, "invalid_request", "limit"),
    ("list-limit-zero", "GET", "/apps/orders/runs?limit=0", None, "app", 400, "invalid_request", "limit"),
    ("list-cursor", "GET", "/apps/orders/runs?cursor=garbage", None, "app", 400, "invalid_request", "cursor"),
    ("list-status", "GET", "/apps/orders/runs?status=asleep", None, "app", 400, "invalid_request", "status"),
    (
        "list-unknown-param",
        "GET",
        "/apps/orders/runs?colour=red",
        None,
        "app",
        400,
        "invalid_request",
        "colour",
    ),
    # A parameter given twice is refused, not read as its first value (`status=a&status=b`
    # would otherwise silently list only `a`), even when both values agree.
    (
        "list-status-twice",
        "GET",
        "/apps/orders/runs?status=running&status=waiting",
        None,
        "app",
        400,
        "invalid_request",
        "status",
    ),
    (
        "list-limit-twice",
        "GET",
        "/apps/orders/runs?limit=5&limit=5",
        None,
        "app",
        400,
        "invalid_request",
        "limit",
    ),
    (
        "workflows-limit-twice",
        "GET",
        "/apps/orders/workflows?limit=1&limit=2",
        None,
        "app",
        400,
        "invalid_request",
        "limit",
    ),
    (
        "overdue-twice",
        "GET",
        "/admin/runs/overdue?olderThan=1h&olderThan=2d",
        None,
        "admin",
        400,
        "invalid_request",
        "olderThan",
    ),
    # Calls that take no body (or `{}`) refuse anything else, and mint or revoke nothing.
    ("swf-key-extra", "POST", "/admin/swf/credentials", {"x": 1}, "admin", 400, "invalid_request", "x"),
    ("swf-key-list", "POST", "/admin/swf/credentials", [], "admin", 400, "invalid_request", None),
    ("swf-key-malformed", "POST", "/admin/swf/credentials", "{", "admin", 400, "invalid_request", None),
    (
        "revoke-key-extra",
        "DELETE",
        "/apps/orders/api-keys/key_x",
        {"reason": "x"},
        "admin",
        400,
        "invalid_request",
        "reason",
    ),
    (
        "revoke-token-extra",
        "DELETE",
        "/admin/operator-tokens/op_x",
        {"reason": "x"},
        "admin",
        400,
        "invalid_request",
        "reason",
    ),
    (
        "revoke-swf-key-extra",
        "DELETE",
        "/admin/swf/credentials/FKIAX",
        {"reason": "x"},
        "admin",
        400,
        "invalid_request",
        "reason",
    ),
    (
        "delete-lambda-extra",
        "DELETE",
        "/admin/lambda/us-east-1/fn",
        {"reason": "x"},
        "admin",
        400,
        "invalid_request",
        "reason",
    ),
    ("run-not-found", "GET", "/apps/orders/runs/run_nope", None, "app", 404, "not_found", None),
    ("route-not-found", "GET", "/nope", None, "app", 404, "not_found", None),
]


@pytest.mark.parametrize(
    ("method", "path", "payload", "who", "status", "code", "field"),
    [pytest.param(*c[1:], id=c[0]) for c in CASES],
)
async def test_bad_input_is_refused_and_stores_nothing(
    seeded: Api, method: str, path: str, payload: Any, who: str, status: int, code: str, field: str | None
) -> None:
    api = seeded
    other = await api.client.put("/apps/other", json={"handlerBaseUrl": "http://o"}, headers=api.admin())
    assert other.status_code == 201
    headers = {
        "admin": api.admin(),
        "app": api.auth(),
        "none": {},
        "wrong": {"Authorization": "Bearer fk_key_x.nope"},
    }[who]
    before = await snapshot(api)
    kwargs: dict[str, Any] = {"headers": {**headers, "content-type": "application/json"}}
    if isinstance(payload, str):
        kwargs["content"] = payload.encode()
    elif payload is not None:
        kwargs["content"] = json.dumps(payload).encode()
    r = await api.client.request(method, path, **kwargs)
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and "Traceback" not in r.text
    if field is not None:
        assert body["error"].get("field") == field, body
        assert field in body["error"]["message"]
    assert await snapshot(api) == before


async def test_body_far_over_the_limit_is_refused_from_its_content_length(seeded: Api) -> None:
    """Announce 100 MB, send a few bytes: the 413 arrives without the rest being sent."""
    api = seeded
    host, port = api.running.url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    head = (
        f"POST /apps/orders/runs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {api.key}\r\n"
        'Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{"workflow":'
    )
    await stream.send_all(head.encode())
    data = b""
    with trio.fail_after(5):
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
    assert data.startswith(b"HTTP/1.1 413")
    await stream.aclose()


async def test_chunked_body_over_the_limit_is_cut_off(seeded: Api) -> None:
    api = seeded
    limit = api.engine.settings.body_max_bytes

    async def chunks() -> Any:
        for _ in range(limit // 65536 + 4):
            yield b"x" * 65536

    r = await api.client.post("/apps/orders/runs", content=chunks(), headers=api.auth())
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"


async def test_a_revoked_key_is_refused_at_once(api: Api) -> None:
    minted = await api.client.post(f"/apps/{api.app}/api-keys", headers=api.admin())
    assert minted.status_code == 201
    key, key_id = minted.json()["apiKey"], minted.json()["keyId"]
    r = await api.client.get(f"/apps/{api.app}", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200
    assert key_id in [k["keyId"] for k in r.json()["apiKeys"]]
    assert key not in r.text and '"apiKey"' not in r.text and '"signingSecret"' not in r.text
    revoked = await api.client.delete(f"/apps/{api.app}/api-keys/{key_id}", headers=api.admin())
    assert revoked.status_code == 200
    r = await api.client.get(f"/apps/{api.app}", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    again = await api.client.delete(f"/apps/{api.app}/api-keys/{key_id}", headers=api.admin())
    assert again.status_code == 404


@pytest.mark.parametrize(
    ("action", "payload", "status", "code", "field"),
    [
        ("rewind", {"toStep": "nope"}, 400, "invalid_request", "toStep"),
        ("state", {"reason": "r", "unset": ["w", "$x"]}, 400, "invalid_request", "unset[1]"),
        ("skip", {"output": "x" * 262_144}, 413, "payload_too_large", "output"),
    ],
)
async def test_an_intervention_refused_by_the_run_names_the_field(
    seeded: Api, action: str, payload: dict[str, Any], status: int, code: str, field: str
) -> None:
    """Refusals decided by the run's machine carry `field` like the ones decided at the door."""
    api = seeded
    run_id = (await api.call("GET", "/apps/orders/runs")).json()["runs"][0]["runId"]
    before = await snapshot(api)
    method = "PATCH" if action == "state" else "POST"
    r = await api.call(method, f"/apps/orders/runs/{run_id}/{action}", payload)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert r.json()["error"].get("field") == field, r.text
    assert r.json()["error"]["message"].startswith(f"{field}")
    assert await snapshot(api) == before
