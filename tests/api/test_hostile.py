"""Hostile input against a real server (issue 7): deep JSON, out-of-range timestamps, numbers
that are not plain bounded digits, handler paths that try to leave the app's base URL, non-JSON
bodies and odd routes. Each refusal is a JSON 4xx that stores nothing, and the server lives on.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
import trio

from foliot.core.workflow.payload import MAX_DEPTH

from ..conftest import Api
from .test_bad_input import SMALL, snapshot

HANDLED = {"name": "handled", "steps": [{"name": "a", "type": "task", "retry": {"maxAttempts": 3}}]}
SLEEPY = {"name": "sleepy", "steps": [{"name": "s", "type": "sleep", "untilPath": "input.at"}]}
YEAR_10000 = "9999-12-31T23:59:59-23:59"


def nested(depth: int, leaf: str = "1") -> str:
    """`depth` arrays/objects inside one another, as JSON text (too deep for `json.dumps`)."""
    text = leaf
    for level in range(depth):
        text = f"[{text}]" if level % 2 else f'{{"k":{text}}}'
    return text


async def send(
    api: Api, method: str, path: str, content: str | bytes | None = None, **headers: str
) -> httpx.Response:
    hdrs = {**api.auth(), "content-type": "application/json", **headers}
    data = content.encode() if isinstance(content, str) else content
    with trio.fail_after(10):
        return await api.client.request(method, path, content=data, headers=hdrs)


async def refused(
    api: Api,
    method: str,
    path: str,
    content: str | bytes | None,
    status: int,
    code: str,
    field: str | None = None,
    **headers: str,
) -> dict[str, Any]:
    """Send a request that must be refused, check the error shape, and that nothing changed."""
    before = await snapshot(api)
    r = await send(api, method, path, content, **headers)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    if field is not None:
        assert body["error"].get("field") == field, body
    assert await snapshot(api) == before
    await alive(api)
    return body


async def alive(api: Api) -> None:
    with trio.fail_after(10):
        r = await api.client.get("/healthz")
    assert r.status_code == 200
    r = await api.call("GET", f"/apps/{api.app}/runs")
    assert r.status_code == 200, r.text


@pytest.fixture
async def waiting(api: Api) -> tuple[Api, str]:
    """An app with SMALL registered and one run waiting for signal `go`."""
    await api.register(SMALL)
    run = await api.start("small", {"a": 1}, businessKey="bk-1")
    await api.until(run["runId"], "waiting")
    return api, run["runId"]


# --------------------------------------------------------------------------- 1. JSON depth


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 400, 2000])
async def test_a_too_deep_start_input_is_400_and_stores_nothing(waiting: tuple[Api, str], depth: int) -> None:
    api, _ = waiting
    body = f'{{"workflow":"small","input":{nested(depth)}}}'
    error = await refused(api, "POST", "/apps/orders/runs", body, 400, "invalid_request")
    assert str(MAX_DEPTH) in error["error"]["message"]


@pytest.mark.parametrize(
    "body",
    [
        '{"workflow":"small","workflow":"other"}',
        '{"workflow":"small","input":{"a":1,"b":2,"a":3}}',
        '{"workflow":"small","input":[{"x":{"k":1,"k":1}}]}',
    ],
)
async def test_an_object_naming_a_key_twice_is_400_and_stores_nothing(
    waiting: tuple[Api, str], body: str
) -> None:
    api, _ = waiting
    error = await refused(api, "POST", "/apps/orders/runs", body, 400, "invalid_request")
    assert "duplicate key" in error["error"]["message"]


async def test_a_signal_naming_a_key_twice_is_400(waiting: tuple[Api, str]) -> None:
    api, run_id = waiting
    body = f'{{"runId":"{run_id}","name":"go","name":"stop"}}'
    error = await refused(api, "POST", "/apps/orders/signals", body, 400, "invalid_request")
    assert "duplicate key 'name'" in error["error"]["message"]


async def test_an_input_at_the_limit_is_stored(waiting: tuple[Api, str]) -> None:
    api, _ = waiting
    r = await send(api, "POST", "/apps/orders/runs", f'{{"workflow":"small","input":{nested(MAX_DEPTH)}}}')
    assert r.status_code == 201, r.text
    assert r.json()["input"] == json.loads(nested(MAX_DEPTH))


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 400, 2000])
async def test_a_too_deep_signal_payload_is_400(waiting: tuple[Api, str], depth: int) -> None:
    api, run_id = waiting
    body = f'{{"runId":"{run_id}","name":"go","payload":{nested(depth)}}}'
    await refused(api, "POST", "/apps/orders/signals", body, 400, "invalid_request")


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 2000])
async def test_a_too_deep_state_edit_is_400(waiting: tuple[Api, str], depth: int) -> None:
    api, run_id = waiting
    body = f'{{"reason":"r","set":{{"w":{nested(depth)}}}}}'
    await refused(api, "PATCH", f"/apps/orders/runs/{run_id}/state", body, 400, "invalid_request")


async def test_a_state_edit_value_at_the_limit_is_kept(waiting: tuple[Api, str]) -> None:
    api, run_id = waiting
    body = f'{{"reason":"r","set":{{"w":{nested(MAX_DEPTH)}}}}}'
    r = await send(api, "PATCH", f"/apps/orders/runs/{run_id}/state", body)
    assert r.status_code == 200, r.text


async def test_a_too_deep_workflow_document_is_400(api: Api) -> None:
    await refused(api, "POST", "/apps/orders/workflows", nested(5000), 400, "invalid_request")


async def test_a_handler_answering_too_deep_fails_the_step_once(api: Api) -> None:
    """Before: a 350-deep answer killed the SQLite writer, and each restart re-delivered it."""
    api.handler.route("a", lambda b, h: (200, {}, nested(350).encode()))
    await api.register(HANDLED)
    run = await api.start("handled")
    with trio.fail_after(10):
        done = await api.until(run["runId"], "failed")
    assert done["error"]["class"] == "invalid_output" and "a" not in done["state"]
    assert len(api.handler.received) == 1  # not retried
    types = [e["type"] for e in await api.events(run["runId"])]
    assert "retry_scheduled" not in types
    await alive(api)


async def _accepted(api: Api) -> tuple[str, str]:
    api.handler.route("a", lambda b, h: (202, {}, b""))
    await api.register(HANDLED)
    run = await api.start("handled")
    await api.handler.wait_for(1)
    await api.engine.runs.wait_for(run["runId"], lambda r: r.task is not None and r.task.accepted)
    return run["runId"], str(api.handler.received[0].body["taskToken"])


async def test_complete_with_a_too_deep_output_answers_400_invalid_output(api: Api) -> None:
    run_id, token = await _accepted(api)
    r = await send(
        api, "POST", f"/apps/orders/tasks/{token}/complete", f'{{"output":{nested(MAX_DEPTH + 1)}}}'
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_output", r.text
    done = await api.until(run_id, "failed")
    assert done["error"]["class"] == "invalid_output" and "a" not in done["state"]
    await alive(api)


async def test_complete_with_a_body_too_deep_to_parse_changes_nothing(api: Api) -> None:
    _run_id, token = await _accepted(api)
    body = f'{{"output":{nested(2000)}}}'
    await refused(api, "POST", f"/apps/orders/tasks/{token}/complete", body, 400, "invalid_request")


# --------------------------------------------------------------------------- 2. timestamps


async def test_an_until_path_in_year_10000_is_invalid_sleep_and_the_run_stays_readable(api: Api) -> None:
    await api.register(SLEEPY)
    run = await api.start("sleepy", {"at": YEAR_10000})
    done = await api.until(run["runId"], "failed")
    assert done["error"]["class"] == "invalid_sleep" and done["wakeAt"] is None
    assert (await api.run(run["runId"]))["status"] == "failed"
    assert [e["type"] for e in await api.events(run["runId"])][-1] == "run_failed"
    r = await api.call("GET", "/apps/orders/runs")
    assert r.status_code == 200 and run["runId"] in r.text


@pytest.mark.parametrize("until", [YEAR_10000, "0001-01-01T00:00:00+00:01", "٢٠٢٦-01-01T00:00:00Z"])
async def test_a_sleep_until_out_of_range_is_refused_at_registration(api: Api, until: str) -> None:
    doc = {"name": "far", "steps": [{"name": "s", "type": "sleep", "until": until}]}
    await refused(
        api, "POST", "/apps/orders/workflows", json.dumps(doc), 400, "invalid_request", "steps[0].until"
    )


# --------------------------------------------------------------------------- 3. numbers


async def test_a_duration_with_4400_digits_is_400(waiting: tuple[Api, str]) -> None:
    api, _ = waiting
    doc = {"name": "x", "steps": [{"name": "a", "type": "task", "timeout": "1" * 4400 + "s"}]}
    await refused(
        api, "POST", "/apps/orders/workflows", json.dumps(doc), 400, "invalid_request", "steps[0].timeout"
    )
    body = json.dumps({"workflow": "small", "runTimeout": "9" * 4400 + "ms"})
    await refused(api, "POST", "/apps/orders/runs", body, 400, "invalid_request", "runTimeout")


def _cursor(*parts: Any) -> str:
    import base64

    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"cursor": _cursor(10**30, "run_x")}, "cursor"),
        ({"cursor": _cursor(-(10**30), "run_x")}, "cursor"),
        ({"cursor": _cursor(True, "run_x")}, "cursor"),
        ({"cursor": _cursor(1, "x" * 100)}, "cursor"),
        ({"cursor": _cursor(1, "run_x") + "A" * 600}, "cursor"),
        ({"cursor": "W" * 2000}, "cursor"),
        ({"limit": "²"}, "limit"),
        ({"limit": "٣"}, "limit"),
        ({"limit": "1" * 5000}, "limit"),
        ({"limit": "-1"}, "limit"),
    ],
)
async def test_runs_list_numbers_are_bounded_ascii_digits(
    waiting: tuple[Api, str], query: dict[str, str], field: str
) -> None:
    api, _ = waiting
    path = "/apps/orders/runs?" + httpx.QueryParams(query).__str__()
    await refused(api, "GET", path, None, 400, "invalid_request", field)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"cursor": "1" + "0" * 30}, "cursor"),
        ({"cursor": "¹"}, "cursor"),
        ({"after": "¹"}, "after"),
        ({"after": "1" + "0" * 30}, "after"),
        ({"limit": "²"}, "limit"),
    ],
)
async def test_events_numbers_are_bounded_ascii_digits(
    waiting: tuple[Api, str], query: dict[str, str], field: str
) -> None:
    api, run_id = waiting
    path = f"/apps/orders/runs/{run_id}/events?" + str(httpx.QueryParams(query))
    await refused(api, "GET", path, None, 400, "invalid_request", field)


@pytest.mark.parametrize("version", ["99999999999999999999999", "9223372036854775808", "²", "٣", "0", "-1"])
async def test_workflow_versions_in_paths_are_bounded_ascii_digits(
    waiting: tuple[Api, str], version: str
) -> None:
    api, _ = waiting
    await refused(
        api,
        "GET",
        f"/apps/orders/workflows/small/versions/{version}",
        None,
        400,
        "invalid_request",
        "version",
    )


async def test_a_version_past_64_bits_in_a_body_is_400(waiting: tuple[Api, str]) -> None:
    api, run_id = waiting
    body = json.dumps({"workflow": "small", "version": 10**30})
    await refused(api, "POST", "/apps/orders/runs", body, 400, "invalid_request", "version")
    body = json.dumps({"toStep": "w", "version": 10**30})
    await refused(api, "POST", f"/apps/orders/runs/{run_id}/rewind", body, 400, "invalid_request", "version")


async def test_valid_numbers_still_work(waiting: tuple[Api, str]) -> None:
    api, run_id = waiting
    assert (await api.call("GET", "/apps/orders/workflows/small/versions/1")).status_code == 200
    assert (await api.call("GET", "/apps/orders/workflows/small/versions/0001")).status_code == 200
    assert (await api.call("GET", "/apps/orders/workflows/small/versions/7")).status_code == 404
    assert (await api.call("GET", "/apps/orders/runs?limit=1")).status_code == 200
    r = await api.call("GET", f"/apps/orders/runs/{run_id}/events?after=0&limit=1")
    assert r.status_code == 200 and r.json()["events"][0]["seq"] == 1
    cursor = r.json()["nextCursor"]
    assert cursor is not None
    r = await api.call("GET", f"/apps/orders/runs/{run_id}/events?cursor={cursor}")
    assert r.status_code == 200 and r.json()["events"][0]["seq"] == int(cursor) + 1


# --------------------------------------------------------------------------- 4. handler paths


@pytest.mark.parametrize(
    "handler",
    [
        "/../b/admin/wipe",
        "/x/%2e%2e/b",
        "/%2E%2E/b",
        "/.%2e/b",
        "/a%2f..%2fb",
        "/a\\..\\b",
        "/a?b",
        "//evil/x",
    ],
)
async def test_a_handler_path_escaping_the_base_is_refused(api: Api, handler: str) -> None:
    doc = {
        "name": "esc",
        "steps": [{"name": "a", "type": "task"}, {"name": "b", "type": "task", "handler": handler}],
    }
    await refused(
        api, "POST", "/apps/orders/workflows", json.dumps(doc), 400, "invalid_request", "steps[1].handler"
    )


async def test_a_plain_handler_path_is_pushed_below_the_base(api: Api) -> None:
    await api.register(
        {"name": "plain", "steps": [{"name": "a", "type": "task", "handler": "/hooks/a..b/x"}]}
    )
    run = await api.start("plain")
    await api.until(run["runId"], "completed")
    assert api.handler.received[0].path == "/hooks/a..b/x"


# --------------------------------------------------------------------------- 6. every answer is JSON


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "json"],
)
async def test_a_non_json_content_type_is_415(waiting: tuple[Api, str], content_type: str) -> None:
    api, _ = waiting
    body = json.dumps({"workflow": "small"})
    await refused(
        api,
        "POST",
        "/apps/orders/runs",
        body,
        415,
        "unsupported_media_type",
        **{"content-type": content_type},
    )


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/vnd.foliot+json",
        None,
    ],
)
async def test_json_content_types_and_none_are_accepted(
    waiting: tuple[Api, str], content_type: str | None
) -> None:
    api, _ = waiting
    headers = {**api.auth()}
    if content_type is not None:
        headers["content-type"] = content_type
    r = await api.client.post(
        "/apps/orders/runs", content=json.dumps({"workflow": "small"}).encode(), headers=headers
    )
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("encoding", ["gzip", "br", "deflate, gzip"])
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/apps/orders/runs", '{"workflow":"small"}'),  # a hot-path call
        ("/apps/orders/signals", '{"workflow":"small","businessKey":"bk-1","name":"go"}'),
        ("/apps/orders/workflows", json.dumps(HANDLED)),
    ],
)
async def test_a_content_encoding_foliot_does_not_decode_is_415(
    waiting: tuple[Api, str], encoding: str, path: str, body: str
) -> None:
    """The body is sent plain (a valid document): declared as compressed, it is refused (RFC
    9110 15.5.16), not read as if the header were not there, nor parsed as garbage."""
    api, _ = waiting
    error = await refused(
        api, "POST", path, body, 415, "unsupported_media_type", **{"content-encoding": encoding}
    )
    assert "Content-Encoding" in error["error"]["message"]


async def test_identity_content_encoding_is_plain(waiting: tuple[Api, str]) -> None:
    api, _ = waiting
    r = await send(
        api, "POST", "/apps/orders/runs", '{"workflow":"small"}', **{"content-encoding": "identity"}
    )
    assert r.status_code == 201, r.text


async def test_unknown_routes_and_methods_answer_json(api: Api) -> None:
    r = await api.call("GET", "/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = await api.call("DELETE", "/apps/orders/runs")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert {m.strip() for m in r.headers["allow"].split(",")} >= {"GET", "POST"}
    r = await api.call("PUT", "/healthz")
    assert r.status_code == 405 and "GET" in r.headers["allow"]


@pytest.mark.parametrize(
    ("path", "methods"),
    [("/apps/orders", {"GET", "HEAD", "PUT", "OPTIONS"}), ("/apps/orders/signals", {"POST", "OPTIONS"})],
)
async def test_options_lists_the_methods_and_answers_no_html(api: Api, path: str, methods: set[str]) -> None:
    """OPTIONS answers 204 with `Allow` and no body: never an empty `text/html` page."""
    r = await api.call("OPTIONS", path)
    assert r.status_code == 204, r.text
    assert {m.strip() for m in r.headers["allow"].split(",")} == methods
    assert r.content == b"" and "content-type" not in r.headers
    r = await api.call("OPTIONS", "/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    "path", ["/apps//orders", "//apps/orders", "/apps/orders//runs", "//healthz", "/apps/orders/runs//"]
)
async def test_double_slashes_never_redirect(api: Api, path: str) -> None:
    r = await api.call("GET", path)
    # httpx reads "//healthz" as an authority and asks for "/", which only serves POST (AWS SWF).
    assert r.status_code in (200, 404, 405), r.text
    assert r.headers["content-type"].startswith("application/json") and "location" not in r.headers
    if r.status_code == 404:
        assert r.json()["error"]["code"] == "not_found"
    if r.status_code == 405:
        assert path == "//healthz" and "POST" in r.headers["allow"]


@pytest.mark.parametrize("path", ["/apps/orders/", "/apps/orders/runs/", "/healthz/"])
async def test_a_trailing_slash_answers_the_route(api: Api, path: str) -> None:
    r = await api.call("GET", path)
    assert r.status_code == 200 and "location" not in r.headers


@pytest.mark.parametrize(
    ("method", "path", "content"),
    [
        ("POST", "/apps/orders/runs?workflow=small", '{"workflow":"small"}'),
        ("POST", "/apps/orders/signals?dryRun=true", '{"runId":"RUN","name":"go"}'),
        ("POST", "/apps/orders/runs/RUN/cancel?force=true", "{}"),
        ("PATCH", "/apps/orders/runs/RUN/state?x=1", '{"set":{"a":2}}'),
        (
            "POST",
            "/apps/orders/workflows?x=1",
            '{"name":"w2","steps":[{"name":"a","type":"sleep","duration":"1s"}]}',
        ),
        ("GET", "/apps/orders/runs/RUN?x=1", None),
    ],
)
async def test_a_query_parameter_a_route_does_not_take_is_400(
    waiting: tuple[Api, str], method: str, path: str, content: str | None
) -> None:
    """Only the routes that read a query (lists, events) take one; anywhere else a query is
    refused rather than silently ignored, and nothing changes."""
    api, run_id = waiting
    path, content = path.replace("RUN", run_id), content and content.replace("RUN", run_id)
    error = await refused(api, method, path, content, 400, "invalid_request")
    assert error["error"]["field"] == path.split("?")[1].split("=")[0]


async def test_routes_that_read_a_query_still_take_theirs(waiting: tuple[Api, str]) -> None:
    api, run_id = waiting
    for path in (
        "/apps/orders/runs?limit=1",
        f"/apps/orders/runs/{run_id}/events?limit=1",
        "/apps/orders/workflows?limit=1",
    ):
        r = await api.call("GET", path)
        assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/apps/orders/runs", '{"workflow":"small"}'),  # a hot-path call
        ("POST", "/apps/orders/signals", '{"workflow":"small","businessKey":"bk-1","name":"go"}'),
        ("GET", "/apps/orders", None),
    ],
)
@pytest.mark.parametrize(
    ("header", "status", "code"),
    [("authorization", 401, "unauthorized"), ("idempotency-key", 400, "invalid_request")],
)
async def test_a_header_foliot_reads_given_twice_is_refused(
    waiting: tuple[Api, str], method: str, path: str, body: str | None, header: str, status: int, code: str
) -> None:
    """Two `Authorization` (or `Idempotency-Key`) headers are refused, not read as the first:
    a proxy or client reading the other one would disagree about who called, or which call
    this is. Both values here are valid, and equal: the rule is "once"."""
    api, _ = waiting
    value = api.auth()["Authorization"] if header == "authorization" else "key-1"
    headers = [("content-type", "application/json"), *api.auth().items(), (header, value)]
    if header == "idempotency-key":
        headers.append((header, value))
    before = await snapshot(api)
    with trio.fail_after(10):
        r = await api.client.request(method, path, content=body, headers=headers)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert header in r.json()["error"]["message"].lower()
    assert await snapshot(api) == before


async def test_nul_in_a_path_or_query_is_400(waiting: tuple[Api, str]) -> None:
    api, _ = waiting
    await refused(api, "GET", "/apps/orders/runs/run%00x", None, 400, "invalid_request")
    await refused(api, "GET", "/apps/orders/runs?businessKey=a%00", None, 400, "invalid_request")


# --------------------------------------------------------------------------- 7. property test

FIELDS = [
    *("workflow", "version", "input", "businessKey", "runTimeout", "name", "payload", "runId", "signalId"),
    *("queue", "waitSeconds", "maxTasks", "output", "next", "error", "class", "message", "retryable"),
    *("reason", "set", "unset", "toStep", "handlerBaseUrl", "description", "graceSeconds", "steps"),
    *("type", "handler", "until", "untilPath", "duration", "timeout", "retry", "maxAttempts"),
]
ODD_NUMBERS = ["1e999", "-1e999", "-0", "1E400", "1" * 5000, "0.1e-400", "9223372036854775808", "-9" * 30]
HOSTILE_TEXT = [
    *("²", "¹", "٣", "1" + "0" * 30, "-1", "9" * 4400 + "s", YEAR_10000, "/../b/admin/wipe", "/%2e%2e/x"),
    *("..", "\u2028", "a\nb", "$end", "", "W" * 3000),
]
Request = tuple[str, str, dict[str, str], dict[str, str], str | None]


def _bodies() -> Any:
    """Arbitrary JSON documents, and text that only looks like JSON."""
    from hypothesis import strategies as st

    text = st.text(max_size=12) | st.sampled_from(HOSTILE_TEXT)
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(10**40), max_value=10**40)
        | st.floats(allow_nan=False, allow_infinity=False)
        | text
    )
    values = st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(FIELDS) | text, inner, max_size=3)
        ),
        max_leaves=12,
    )
    field = st.sampled_from(FIELDS)
    documents = st.builds(
        lambda value, ascii_only: json.dumps(value, ensure_ascii=ascii_only),
        st.dictionaries(field, values, max_size=5) | values,
        st.booleans(),
    )
    deep = st.builds(
        lambda name, depth: f'{{"{name}":{nested(depth)}}}',
        field,
        st.sampled_from([MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 2, 350, 2000, 20_000]),
    )
    odd = st.builds(lambda name, num: f'{{"{name}":{num}}}', field, st.sampled_from(ODD_NUMBERS))
    escapes = st.builds(
        lambda name, esc: f'{{"{name}":"{esc}"}}',
        field,
        st.sampled_from(["\\ud800", "\\udfff", "x\\udbff", "\\ud83d\\ude00", "\\u0000"]),
    )
    raw = st.sampled_from(['{"a":', "[1]", '"x"', "null", "\udcff\udcfe", "{}", "{" * 3000, " "])
    return st.one_of(st.none(), documents, documents, deep, deep, odd, escapes, raw)


def _requests(spec: dict[str, Any], known: dict[str, list[str]]) -> Any:
    """(method, path, query, headers, body) for any route of the OpenAPI document."""
    from urllib.parse import quote

    from hypothesis import strategies as st

    routes = sorted(
        (method.upper(), path, op) for path, ops in spec["paths"].items() for method, op in ops.items()
    )
    text = st.text(max_size=12) | st.sampled_from(HOSTILE_TEXT)
    header_text = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20)
    headers = st.fixed_dictionaries(
        {
            "authorization": st.sampled_from(known["auth"]),
            "content-type": st.sampled_from(
                ["application/json"] * 6 + ["text/plain", "application/x-www-form-urlencoded", "a/b+json"]
            ),
        },
        optional={
            "idempotency-key": header_text,
            "foliot-signature": header_text,
            "x-amz-target": header_text,
        },
    )
    bodies = _bodies()

    @st.composite
    def request(draw: Any) -> Request:
        method, path, op = draw(st.sampled_from(routes))
        for param in op["parameters"]:
            if param["in"] == "path":
                usual = st.sampled_from(known[param["name"]])
                value = draw(st.one_of(usual, usual, usual, text))  # mostly a real one: reach the body
                path = path.replace("{" + param["name"] + "}", quote(value, safe="") or "x", 1)
        names = [p["name"] for p in op["parameters"] if p["in"] == "query"] + ["x"]
        query = draw(st.dictionaries(st.sampled_from(names), text, max_size=3))
        body = draw(bodies)
        if path.endswith("/tasks/poll") and body is not None and body.startswith("{"):
            body = '{"waitSeconds":0' + ("," + body[1:] if body != "{}" else "}")  # no long poll here
        return method, path, query, draw(headers), body

    return request()


class TestNoServerErrors:
    @pytest.fixture
    def database_url(self, tmp_path: Any) -> str:
        return f"sqlite:///{tmp_path / 'foliot.db'}"  # SQLite only: bounded in time

    async def test_arbitrary_documents_queries_and_headers_never_answer_5xx(self, api: Api) -> None:
        from hypothesis import HealthCheck, example, given, settings

        await api.register(SMALL)
        run_id = (await api.start("small", {"a": 1}))["runId"]
        _other, token = await _accepted(api)
        spec = (await api.client.get("/openapi.json")).json()
        admin, app = "Bearer test-admin-token", f"Bearer {api.key}"
        known = {
            "auth": [admin, admin, app],
            "app": ["orders"],
            "runId": [run_id],
            "name": ["small"],
            "version": ["1"],
            "token": [token],
            "keyId": ["fk_nope"],
            "accessKeyId": ["FKIANOPE000000000000"],
            "tokenId": ["op_nope"],
            "sessionId": ["ses_nope"],
            "region": ["us-east-1"],
        }
        statuses: list[int] = []

        async def perform(
            method: str, path: str, query: dict[str, str], headers: dict[str, str], body: str | None
        ) -> None:
            content = body.encode("utf-8", "surrogateescape") if body is not None else None
            with trio.fail_after(15):
                r = await api.client.request(method, path, params=query, headers=headers, content=content)
            statuses.append(r.status_code)
            assert r.status_code < 500, (
                f"{method} {path} {query} {headers} {body!r:.300} -> {r.status_code} {r.text}"
            )
            # POST / is AWS SWF: its answers are application/x-amz-json-1.0.
            json_types = ("application/json", "text/plain", "application/x-amz-json-1.0")
            if r.status_code == 200 and path in ("/reference", "/schemas/workflow.json"):
                json_types = ("text/html", "application/schema+json")  # the rendered page, the schema
            assert r.headers["content-type"].startswith(json_types), r.headers

        json_h = {"authorization": app, "content-type": "application/json"}

        # The defects issue 7 reported, always tried first; then generated requests.
        @example(("POST", "/apps/orders/runs", {}, json_h, f'{{"workflow":"small","input":{nested(2000)}}}'))
        @example(("POST", "/apps/orders/runs", {}, json_h, f'{{"workflow":"small","input":{nested(400)}}}'))
        @example(("GET", "/apps/orders/runs", {"limit": "²"}, json_h, None))
        @example(("GET", "/apps/orders/runs", {"cursor": _cursor(10**30, "r")}, json_h, None))
        @example(("GET", f"/apps/orders/runs/{run_id}/events", {"after": "¹"}, json_h, None))
        @example(("GET", f"/apps/orders/runs/{run_id}/events", {"cursor": "1" + "0" * 30}, json_h, None))
        @example(("GET", "/apps/orders/workflows/small/versions/99999999999999999999", {}, json_h, None))
        @example(
            (
                "POST",
                "/apps/orders/runs",
                {},
                json_h,
                '{"workflow":"small","runTimeout":"' + "1" * 4400 + 's"}',
            )
        )
        @settings(
            max_examples=250,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(_requests(spec, known))
        def no_5xx(request: Request) -> None:
            trio.from_thread.run(perform, *request)

        await trio.to_thread.run_sync(no_5xx)
        assert len(statuses) > 250 and any(200 <= s < 300 for s in statuses) and statuses.count(400) > 20
        await alive(api)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/apps/orders/runs", {"workflow": "small", "businessKey": "a\u0000b"}, "businessKey"),
        ("/apps/orders/signals", {"name": "go", "runId": "run_x", "signalId": "s\u0000"}, "signalId"),
    ],
)
async def test_nul_in_a_named_string_field_is_400(
    waiting: tuple[Api, str], path: str, body: dict[str, Any], field: str
) -> None:
    """Such fields get columns of their own; PostgreSQL text cannot hold U+0000."""
    api, _ = waiting
    await refused(api, "POST", path, json.dumps(body), 400, "invalid_request", field)


@pytest.mark.parametrize("text", ['[1,"run_\\ud800"]', '[1,"run_\\u0000"]'])
async def test_a_tampered_runs_cursor_holding_unstorable_text_is_400(
    waiting: tuple[Api, str], text: str
) -> None:
    """It reached the store's query: SQLite raised (a 500), PostgreSQL cannot bind NUL."""
    api, _ = waiting
    cursor = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
    await refused(api, "GET", f"/apps/orders/runs?cursor={cursor}", None, 400, "invalid_request", "cursor")
    body = json.dumps({"workflow": "small", "cursor": cursor})
    await refused(api, "POST", "/apps/orders/runs/pause", body, 400, "invalid_request", "cursor")
