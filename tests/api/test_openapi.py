"""The OpenAPI document's shapes (issue 26 point 5): every answer the server gives validates
against the schema its operation declares, request bodies are the models the routes take,
the workflow definition's JSON Schema agrees with registration, and the page renders.

Every response the client receives while the scenario below runs is recorded and checked
against `/openapi.json` with `jsonschema` (2020-12), successes and errors alike.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import httpx
import jsonschema
import pytest

from foliot.core.workflow.definition import parse_definition
from foliot.core.workflow.jsonconv import ValidationError
from foliot.core.workflow.schema import workflow_json_schema
from foliot.http.openapi import BODIES, OPERATIONS

from ..conftest import Api
from ..helpers import answer_json
from .test_order_flow import ORDER

FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


class Recorder:
    """Every response the client got: (method, path, status, media type, body)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int, str, Any]] = []

    async def __call__(self, response: httpx.Response) -> None:
        await response.aread()
        media = response.headers.get("content-type", "").partition(";")[0]
        body = response.json() if media.endswith("json") and response.content else response.text
        self.seen.append(
            (response.request.method, response.request.url.path, response.status_code, media, body)
        )


def _template(spec: dict[str, Any], method: str, path: str) -> str:
    """The document's path template for a concrete path (the most literal one that matches)."""
    matches = []
    for template, ops in spec["paths"].items():
        if method.lower() not in ops:
            continue
        pattern = "^" + re.sub(r"\\{[A-Za-z]+\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path):
            matches.append((template.count("{"), template))
    assert matches, f"{method} {path} is in no path of the document"
    return min(matches)[1]


def check_conforms(spec: dict[str, Any], seen: list[tuple[str, str, int, str, Any]]) -> set[str]:
    """Validate each recorded answer; the operations (`METHOD template`) seen answering 2xx."""
    succeeded = set()
    for method, path, status, media, body in seen:
        template = _template(spec, method, path)
        op = spec["paths"][template][method.lower()]
        declared = op["responses"].get(str(status)) or op["responses"]["default"]
        if 200 <= status < 300:
            assert str(status) in op["responses"], f"{method} {template} answered {status}, not declared"
            succeeded.add(f"{method} {template}")
        content = declared["content"]
        assert media in content, f"{method} {path} -> {status} {media}, declared {sorted(content)}"
        schema = {**content[media]["schema"], "components": spec["components"]}
        errors = list(jsonschema.Draft202012Validator(schema, format_checker=FORMATS).iter_errors(body))
        assert not errors, f"{method} {path} -> {status}: {errors[0].message} at {list(errors[0].path)}"
    return succeeded


async def test_every_answer_validates_against_its_declared_schema(api: Api) -> None:
    recorder = Recorder()
    api.client.event_hooks["response"].append(recorder)
    admin = api.admin()
    base = f"/apps/{api.app}"
    api.handler.route(
        "fail", lambda body, headers: answer_json({"error": {"class": "x", "retryable": False}}, 500)
    )
    spec = (await api.client.get("/openapi.json")).json()

    # apps, keys, secrets
    assert (await api.client.get(base, headers=admin)).status_code == 200
    updated = await api.client.put(base, json={"handlerBaseUrl": api.handler.url}, headers=admin)
    assert updated.status_code == 200
    minted = (await api.client.post(f"{base}/api-keys", json={}, headers=admin)).json()
    await api.client.request("DELETE", f"{base}/api-keys/{minted['keyId']}", headers=admin)
    await api.client.post(f"{base}/signing-secrets", json={"graceSeconds": 60}, headers=admin)
    # workflows
    await api.register(copy.deepcopy(ORDER))
    await api.register(
        {"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}, {"name": "t", "type": "task"}]}
    )
    await api.register({"name": "boom", "steps": [{"name": "fail", "type": "task"}]})
    await api.register({"name": "q", "steps": [{"name": "pulled", "type": "task", "queue": "jobs"}]})
    await api.call("GET", f"{base}/workflows")
    await api.call("GET", f"{base}/workflows/w")
    await api.call("GET", f"{base}/workflows/w/versions/1")
    # runs: start, read, list, history, diagnosis, signals, interventions
    run = await api.start("w", {"x": 1}, businessKey="k-1")
    await api.until(run["runId"], "waiting")
    again = await api.call(
        "POST", f"{base}/runs", {"workflow": "w"}, headers={**api.auth(), "Idempotency-Key": "i1"}
    )
    await api.call("POST", f"{base}/runs", {"workflow": "w"}, headers={**api.auth(), "Idempotency-Key": "i1"})
    await api.call("GET", f"{base}/runs/{run['runId']}")
    await api.call("GET", f"{base}/runs", params={"workflow": "w", "limit": 1})
    await api.call("GET", f"{base}/runs/{run['runId']}/events")
    await api.call("GET", f"{base}/runs/{run['runId']}/diagnosis")
    # safe deploys
    order_v2 = copy.deepcopy(ORDER)
    dry = await api.call("POST", f"{base}/workflows/{order_v2['name']}/dry-run", order_v2)
    assert dry.status_code == 200, dry.text
    migrated = await api.call("POST", f"{base}/workflows/{order_v2['name']}/migrate", {"toVersion": 1})
    assert migrated.status_code == 200, migrated.text
    # child runs, debounced starts
    await api.register(
        {"name": "fan", "steps": [{"name": "m", "type": "map", "itemsPath": "input", "workflow": "w"}]}
    )
    fan = await api.start("fan", [1, 2])
    await api.call("GET", f"{base}/runs/{fan['runId']}")
    await api.call("GET", f"{base}/runs", params={"parentRunId": fan["runId"]})
    debounced = {"workflow": "w", "debounce": {"key": "d", "period": "1h"}}
    assert (await api.call("POST", f"{base}/runs", debounced)).status_code == 202
    leading = {"workflow": "w", "debounce": {"key": "l", "period": "1h", "mode": "leading"}}
    await api.call("POST", f"{base}/runs", leading)
    assert (await api.call("POST", f"{base}/runs", leading)).status_code == 202
    # schedules
    sched = {"workflow": "w", "cron": "0 9 * * 1-5", "timezone": "Europe/Berlin", "overlap": "allow"}
    assert (await api.call("PUT", f"{base}/schedules/daily", sched)).status_code == 201
    assert (await api.call("PUT", f"{base}/schedules/daily", sched)).status_code == 200
    await api.call("GET", f"{base}/schedules")
    await api.call("GET", f"{base}/schedules/daily")
    await api.call("POST", f"{base}/schedules/daily/pause", {"reason": "holiday"})
    await api.call("POST", f"{base}/schedules/daily/unpause", {})
    assert (await api.call("POST", f"{base}/schedules/daily/trigger", {})).status_code == 200
    backfilled = await api.call(
        "POST",
        f"{base}/schedules/daily/backfill",
        {"from": "2026-11-02T00:00:00Z", "to": "2026-11-04T00:00:00Z"},
    )
    assert backfilled.status_code == 200, backfilled.text
    await api.call("GET", f"{base}/schedules/daily")
    assert (await api.call("DELETE", f"{base}/schedules/daily", {})).status_code == 200
    await api.call("POST", f"{base}/runs/{run['runId']}/pause", {"reason": "look"})
    await api.call("POST", f"{base}/runs/{run['runId']}/unpause", {})
    await api.call("PATCH", f"{base}/runs/{run['runId']}/state", {"set": {"w": 1}, "reason": "fix"})
    await api.call("POST", f"{base}/signals", {"name": "go", "runId": run["runId"], "payload": {"ok": True}})
    await api.call(
        "POST",
        f"{base}/signals",
        {"name": "go", "workflow": "w", "businessKey": "k-2", "startIfMissing": {"input": 1}},
    )
    skipped = await api.start("w")
    await api.until(skipped["runId"], "waiting")
    assert (
        await api.call("POST", f"{base}/runs/{skipped['runId']}/skip", {"reason": "n/a"})
    ).status_code == 200
    failed = await api.start("boom")
    await api.until(failed["runId"], "failed")
    await api.call("POST", f"{base}/runs/{failed['runId']}/redrive", {})
    await api.until(failed["runId"], "failed")
    await api.call("POST", f"{base}/runs/{failed['runId']}/rewind", {"toStep": "fail"})
    await api.call("POST", f"{base}/runs/{again.json()['runId']}/cancel", {"reason": "done"})
    await api.call("POST", f"{base}/runs/pause", {"workflow": "w", "limit": 10})
    await api.call("POST", f"{base}/runs/unpause", {"workflow": "w"})
    await api.call("POST", f"{base}/runs/cancel", {"workflow": "w"})
    await api.call("POST", f"{base}/runs/redrive", {"workflow": "boom"})
    # pull tasks
    pulled = await api.start("q")
    await api.until(pulled["runId"], "running")
    tasks = (await api.call("POST", f"{base}/tasks/poll", {"queue": "jobs", "waitSeconds": 0})).json()[
        "tasks"
    ]
    token = tasks[0]["taskToken"]
    await api.call("POST", f"{base}/tasks/{token}/heartbeat", {})
    await api.call("POST", f"{base}/tasks/{token}/complete", {"output": {"done": True}})
    # errors: each answers the Error schema
    await api.call("GET", f"{base}/runs/run_nope")
    await api.call("POST", f"{base}/runs", {"workflow": "w", "bogus": 1})
    await api.call("GET", f"{base}/runs", params={"status": "nope"})
    await api.client.get(base)
    # operations
    for path in ("/healthz", "/readyz", "/openapi.json", "/schemas/workflow.json", "/reference"):
        assert (await api.client.get(path)).status_code == 200
    for path in (
        "/metrics",
        "/admin/actors",
        f"/admin/actors/{run['runId']}",
        "/admin/timers",
        "/admin/queues",
        "/admin/cluster",
        "/admin/runs/overdue",
        "/admin/sessions",
        "/admin/operator-tokens",
        "/admin/swf/credentials",
        "/admin/swf/parked",
        "/admin/lambda",
        "/admin/lambda/us-east-1",
    ):
        await api.client.get(path, headers=admin)
    token_made = (
        await api.client.post("/admin/operator-tokens", json={"role": "viewer"}, headers=admin)
    ).json()
    await api.client.request("DELETE", f"/admin/operator-tokens/{token_made['tokenId']}", headers=admin)
    key = (await api.client.post("/admin/swf/credentials", json={}, headers=admin)).json()
    await api.client.request("DELETE", f"/admin/swf/credentials/{key['accessKeyId']}", headers=admin)
    await api.client.put("/admin/lambda/us-east-1/fn", json={"url": "http://127.0.0.1:9/fn"}, headers=admin)
    await api.client.put("/admin/lambda/us-east-1/fn", json={"url": "http://127.0.0.1:9/fn2"}, headers=admin)
    await api.client.get("/admin/lambda/us-east-1/fn", headers=admin)
    await api.client.request("DELETE", "/admin/lambda/us-east-1/fn", headers=admin)
    await api.client.request("DELETE", "/admin/sessions/ses_nope", headers=admin)
    limits = {"maxTreeRuns": 50, "scheduleFireRate": 2.5}
    put = await api.client.put(f"/admin/apps/{api.app}/limits", json=limits, headers=admin)
    assert put.status_code == 200, put.text
    assert (await api.client.get(f"/admin/apps/{api.app}/limits", headers=admin)).status_code == 200

    succeeded = check_conforms(spec, recorder.seen)
    public = {f"{m} {p}" for (m, p) in OPERATIONS if p.startswith("/apps/")}
    missing = public - succeeded
    assert not missing, f"operations this test never saw succeed: {sorted(missing)}"
    assert len(recorder.seen) > 60


async def test_the_document_describes_every_operation(api: Api) -> None:
    spec = (await api.client.get("/openapi.json")).json()
    jsonschema.Draft202012Validator.check_schema({"components": spec["components"]})
    for path, ops in spec["paths"].items():
        assert not path.startswith("/internal/"), path
        assert "_" not in "".join(re.findall(r"{([^}]+)}", path)), path  # {app}, {runId}: as the docs say
        for method, op in ops.items():
            successes = [s for s in op["responses"] if s.startswith("2")]
            assert successes, (method, path)
            for status in successes:
                (content,) = op["responses"][status]["content"].values()
                assert content["schema"], (method, path, status)
    for name in BODIES:
        assert spec["components"]["schemas"][name]["additionalProperties"] is False
    # Run documents follow their typed view: a member added to `RunView` is published.
    run = spec["components"]["schemas"]["RunView"]
    assert {"runId", "status", "state", "createdAt", "error"} <= set(run["properties"])
    assert set(run["required"]) == set(run["properties"])


async def test_the_reference_page_lists_every_operation_and_schema(api: Api) -> None:
    spec = (await api.client.get("/openapi.json")).json()
    page = await api.client.get("/reference")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<script" not in page.text and "http" not in page.text.split("<body>")[0].replace("http-equiv", "")
    for path in spec["paths"]:
        assert f"<code>{path}</code>" in page.text, path
    for name in spec["components"]["schemas"]:
        assert f'id="schema-{name}"' in page.text


# ------------------------------------------------------------------ the definition's schema

VALID = [
    ORDER,
    {
        "name": "w",
        "steps": [{"name": "a", "type": "task", "retry": {"maxAttempts": 5, "backoffCoefficient": 1.5}}],
    },
    {"name": "w", "steps": [{"name": "s", "type": "sleep", "until": "2030-01-01T00:00:00Z"}]},
    {"name": "w", "steps": [{"name": "s", "type": "sleep", "untilPath": "input.at"}]},
    {
        "name": "w",
        "steps": [
            {"name": "w", "type": "wait", "signals": ["a", "b"], "onSignal": {"b": "$end"}, "timeout": "1h"},
            {"name": "t", "type": "task", "queue": "q", "queueTimeout": "5m", "onFailure": "$fail"},
        ],
        "defaults": {"timeout": "10s", "retry": {"retryOn": ["x"]}},
        "runTimeout": "14d",
    },
    {"name": "w", "steps": [{"name": "a", "type": "task", "next": None, "retry": None}]},  # null: the default
]

# Documents registration refuses that the schema alone can tell: (document, why).
INVALID = [
    ({"name": "w"}, "no steps"),
    ({"name": "w", "steps": []}, "no step"),
    ({"name": "$w", "steps": [{"name": "a", "type": "task"}]}, "bad name"),
    ({"name": "w", "steps": [{"name": "a", "type": "task"}], "extra": 1}, "unknown member"),
    ({"name": "w", "steps": [{"name": "a", "type": "lambda"}]}, "unknown type"),
    ({"name": "w", "steps": [{"name": "a", "type": "task", "duration": "1s"}]}, "not on a task"),
    ({"name": "w", "steps": [{"name": "a", "type": "sleep", "duration": "1.5s"}]}, "bad duration"),
    ({"name": "w", "steps": [{"name": "a", "type": "sleep"}]}, "a sleep needs a member"),
    ({"name": "w", "steps": [{"name": "a", "type": "wait", "signal": "x", "signals": ["a", "b"]}]}, "both"),
    ({"name": "w", "steps": [{"name": "a", "type": "choice"}]}, "no choices"),
    ({"name": "w", "steps": [{"name": "a", "type": "task", "retry": {"maxAttempts": "3"}}]}, "a string"),
    ({"name": "w", "steps": [{"name": "a", "type": "task", "timeout": 30}]}, "a number"),
]


@pytest.mark.parametrize("doc", VALID)
def test_valid_definitions_validate_against_the_schema(doc: dict[str, Any]) -> None:
    parse_definition(copy.deepcopy(doc))  # registration takes it
    jsonschema.Draft202012Validator(workflow_json_schema()).validate(doc)


@pytest.mark.parametrize(("doc", "why"), INVALID)
def test_refused_definitions_fail_the_schema_too(doc: dict[str, Any], why: str) -> None:
    with pytest.raises(ValidationError):
        parse_definition(copy.deepcopy(doc))
    assert not jsonschema.Draft202012Validator(workflow_json_schema()).is_valid(doc), why


def test_the_schema_follows_the_models() -> None:
    """Step types and members come from `definition.py`: a type added there is in the schema."""
    from foliot.core.workflow import definition

    schema = workflow_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    step = schema["$defs"]["StepSpec"]
    assert step["properties"]["type"]["enum"][: len(definition.STEP_KINDS)] == list(definition.STEP_KINDS)
    assert set(step["properties"]) == {
        "".join([a.name.split("_")[0], *(p.title() for p in a.name.split("_")[1:])])
        for a in definition.attrs.fields(definition.StepSpec)
    }
    assert len(step["allOf"]) == len(definition.STEP_KINDS)


async def test_the_definition_schema_is_served(api: Api) -> None:
    r = await api.client.get("/schemas/workflow.json")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/schema+json")
    assert r.json() == workflow_json_schema()
