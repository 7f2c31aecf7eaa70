"""The protocol edge against a live Foliot: SigV4 refusals, access keys, bad input refused with
nothing stored, unknown and not-yet-built actions, raw protocol errors."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from unittest import mock

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from .conftest import PRESET_KEY, PRESET_SECRET, Swf, admin, call, raises


def signed(
    url: str,
    action: str,
    body: Any,
    *,
    at: dt.datetime | None = None,
    key: str = PRESET_KEY,
    secret: str = PRESET_SECRET,
    region: str = "us-east-1",
    service: str = "swf",
) -> AWSRequest:
    """A request signed by botocore's SigV4Auth, optionally at a chosen time."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = AWSRequest(
        method="POST",
        url=url + "/",
        data=data,
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": f"SimpleWorkflowService.{action}",
        },
    )
    with mock.patch("botocore.auth.get_current_datetime", return_value=at or dt.datetime.now(dt.UTC)):
        SigV4Auth(Credentials(key, secret), service, region).add_auth(request)
    return request


async def send(request: AWSRequest, body: bytes | None = None) -> httpx.Response:
    """Send what botocore signed (or, with `body`, the same headers over another body)."""
    headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
    async with httpx.AsyncClient() as client:
        return await client.post(request.url, content=request.body if body is None else body, headers=headers)


def fault(r: httpx.Response) -> str:
    assert r.headers["content-type"] == "application/x-amz-json-1.0"
    body = r.json()
    assert set(body) == {"__type", "message"}
    code: str = body["__type"].rsplit("#", 1)[1]
    return code


async def test_unknown_key_and_wrong_secret(swf: Swf) -> None:
    error = await raises(
        "UnrecognizedClientException",
        swf.client(key="FKIAUNKNOWN000000000").list_domains,
        registrationStatus="REGISTERED",
    )
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    error = await raises(
        "InvalidSignatureException",
        swf.client(secret="wrong-secret").register_domain,
        name="x",
        workflowExecutionRetentionPeriodInDays="1",
    )
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    await raises("UnknownResourceFault", swf.client().describe_domain, name="x")  # nothing stored


async def test_replayed_twenty_minutes_later_is_refused(swf: Swf) -> None:
    body = {"name": "late", "workflowExecutionRetentionPeriodInDays": "1"}
    old = signed(swf.url, "RegisterDomain", body, at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=20))
    r = await send(old)
    assert r.status_code == 400 and fault(r) == "InvalidSignatureException"
    assert "Signature expired" in r.json()["message"]
    fresh = signed(swf.url, "RegisterDomain", body)
    r = await send(fresh)
    assert r.status_code == 200, r.text
    assert r.headers["x-amzn-RequestId"]


async def test_tampered_body_wrong_service_and_missing_auth(swf: Swf) -> None:
    request = signed(swf.url, "RegisterDomain", {"name": "a", "workflowExecutionRetentionPeriodInDays": "1"})
    r = await send(request, json.dumps({"name": "b", "workflowExecutionRetentionPeriodInDays": "1"}).encode())
    assert (r.status_code, fault(r)) == (400, "InvalidSignatureException")

    r = await send(signed(swf.url, "ListDomains", {"registrationStatus": "REGISTERED"}, service="sqs"))
    assert (r.status_code, fault(r)) == (400, "InvalidSignatureException")
    assert "'swf'" in r.json()["message"]

    async with httpx.AsyncClient(base_url=swf.url) as client:
        r = await client.post(
            "/",
            content=b"{}",
            headers={
                "Content-Type": "application/x-amz-json-1.0",
                "X-Amz-Target": "SimpleWorkflowService.ListDomains",
            },
        )
        assert (r.status_code, fault(r)) == (400, "MissingAuthenticationTokenException")
        r = await client.post("/", content=b"{}", headers={"Authorization": "Bearer x"})
        assert (r.status_code, fault(r)) == (400, "IncompleteSignatureException")
    listed = await call(swf.client().list_domains, registrationStatus="REGISTERED")
    assert listed["domainInfos"] == []


async def test_minted_keys_work_list_and_revoke(swf: Swf) -> None:
    async with httpx.AsyncClient(base_url=swf.url) as http:
        r = await http.post("/admin/swf/credentials")
        assert r.status_code == 401
        r = await http.post("/admin/swf/credentials", headers=admin())
        assert r.status_code == 201, r.text
        minted = r.json()
        key, secret = minted["accessKeyId"], minted["secretAccessKey"]
        assert len(key) == 20 and key.startswith("FKIA") and len(secret) == 40

        c = swf.client(key=key, secret=secret)
        await call(c.register_domain, name="mine", workflowExecutionRetentionPeriodInDays="1")
        # The region, not the key, scopes the state: the preset key sees the same domain.
        await call(swf.client().describe_domain, name="mine")

        listed = (await http.get("/admin/swf/credentials", headers=admin())).json()["credentials"]
        assert {(k["accessKeyId"], k["source"]) for k in listed} == {
            (PRESET_KEY, "FOLIOT_SWF_CREDENTIALS"),
            (key, "admin"),
        }
        assert all("secretAccessKey" not in k for k in listed)
        assert secret not in json.dumps(listed)

        r = await http.delete(f"/admin/swf/credentials/{key}", headers=admin())
        assert r.status_code == 200, r.text
        await raises("UnrecognizedClientException", c.describe_domain, name="mine")
        assert (await http.delete(f"/admin/swf/credentials/{key}", headers=admin())).status_code == 404
        r = await http.delete(f"/admin/swf/credentials/{PRESET_KEY}", headers=admin())
        assert r.status_code == 409
        listed = (await http.get("/admin/swf/credentials", headers=admin())).json()["credentials"]
        assert [k["accessKeyId"] for k in listed] == [PRESET_KEY]


async def test_stored_secret_is_encrypted(swf: Swf) -> None:
    async with httpx.AsyncClient(base_url=swf.url) as http:
        minted = (await http.post("/admin/swf/credentials", headers=admin())).json()
    stored = await swf.running.engine.store.get_swf_credential(minted["accessKeyId"])
    assert stored is not None and minted["secretAccessKey"] not in stored.secret_enc
    assert swf.running.engine.vault.decrypt(stored.secret_enc) == minted["secretAccessKey"]


async def test_bad_input_is_refused_naming_the_member_and_nothing_is_stored(swf: Swf) -> None:
    raw = swf.client(validate=False)
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("register_domain", {"workflowExecutionRetentionPeriodInDays": "1"}, "'name'"),
        ("register_domain", {"name": "", "workflowExecutionRetentionPeriodInDays": "1"}, "'name'"),
        ("register_domain", {"name": "a" * 257, "workflowExecutionRetentionPeriodInDays": "1"}, "'name'"),
        ("register_domain", {"name": "a:b", "workflowExecutionRetentionPeriodInDays": "1"}, "'name'"),
        ("register_domain", {"name": " a", "workflowExecutionRetentionPeriodInDays": "1"}, "'name'"),
        ("register_domain", {"name": "arn", "workflowExecutionRetentionPeriodInDays": "1"}, "'name'"),
        ("register_domain", {"name": "a", "workflowExecutionRetentionPeriodInDays": "91"}, "RetentionPeriod"),
        ("register_domain", {"name": "a", "workflowExecutionRetentionPeriodInDays": "x"}, "RetentionPeriod"),
        (
            "register_domain",
            {"name": "a", "workflowExecutionRetentionPeriodInDays": "1", "tags": [{"value": "v"}]},
            "'tags.1.member.key'",
        ),
        (
            "register_workflow_type",
            {"domain": "d", "name": "w", "version": "1", "defaultChildPolicy": "KEEP"},
            "'defaultChildPolicy'",
        ),
        (
            "register_workflow_type",
            {"domain": "d", "name": "w", "version": "1", "defaultTaskStartToCloseTimeout": "1m"},
            "'defaultTaskStartToCloseTimeout'",
        ),
        (
            "register_workflow_type",
            {"domain": "d", "name": "w", "version": "1", "defaultExecutionStartToCloseTimeout": "NONE"},
            "'defaultExecutionStartToCloseTimeout'",
        ),
        (
            "register_workflow_type",
            {"domain": "d", "name": "w", "version": "1", "defaultTaskList": {}},
            "'defaultTaskList.name'",
        ),
        (
            "register_activity_type",
            {"domain": "d", "name": "a", "version": "1", "defaultTaskPriority": "high"},
            "'defaultTaskPriority'",
        ),
        ("list_domains", {"registrationStatus": "ACTIVE"}, "'registrationStatus'"),
        ("list_domains", {"registrationStatus": "REGISTERED", "maximumPageSize": 1001}, "'maximumPageSize'"),
        ("list_workflow_types", {"domain": "d"}, "'registrationStatus'"),
        ("describe_workflow_type", {"domain": "d", "workflowType": {"name": "w"}}, "'workflowType.version'"),
    ]
    # A member of the wrong JSON type does not deserialize: SerializationException (issue 26).
    wrong_types: list[tuple[str, dict[str, Any], str]] = [
        ("register_domain", {"name": "a", "workflowExecutionRetentionPeriodInDays": 1}, "RetentionPeriod"),
        ("list_domains", {"registrationStatus": "REGISTERED", "maximumPageSize": "10"}, "'maximumPageSize'"),
        ("list_domains", {"registrationStatus": "REGISTERED", "reverseOrder": "yes"}, "'reverseOrder'"),
    ]
    await call(swf.client().register_domain, name="d", workflowExecutionRetentionPeriodInDays="1")
    checks = [("ValidationException", *case) for case in cases]
    checks += [("SerializationException", *case) for case in wrong_types]
    for code, method, params, member in checks:
        error = await raises(code, getattr(raw, method), **params)
        assert member in error.response["Error"]["Message"], (
            method,
            params,
            error.response["Error"]["Message"],
        )
    # botocore cannot send a member its model lacks; a raw signed request can.
    unknown = {"name": "a", "workflowExecutionRetentionPeriodInDays": "1", "colour": "red"}
    r = await send(signed(swf.url, "RegisterDomain", unknown))
    assert (r.status_code, fault(r)) == (400, "ValidationException") and "'colour'" in r.json()["message"]
    not_a_list = {"resourceArn": "arn:aws:swf:us-east-1:000000000000:/domain/d", "tagKeys": "k"}
    r = await send(signed(swf.url, "UntagResource", not_a_list))
    assert (r.status_code, fault(r)) == (400, "SerializationException") and "'tagKeys'" in r.json()["message"]
    listed = await call(swf.client().list_domains, registrationStatus="REGISTERED")
    assert names(listed) == ["d"]
    types = await call(swf.client().list_workflow_types, domain="d", registrationStatus="REGISTERED")
    assert types["typeInfos"] == []
    assert (await call(swf.client().list_activity_types, domain="d", registrationStatus="REGISTERED"))[
        "typeInfos"
    ] == []


def names(listed: dict[str, Any]) -> list[str]:
    return [d["name"] for d in listed["domainInfos"]]


async def test_unknown_action_malformed_json_and_invalid_input(swf: Swf) -> None:
    r = await send(signed(swf.url, "LaunchRocket", {}))
    assert (r.status_code, fault(r)) == (400, "UnknownOperationException")
    r = await send(signed(swf.url, "ListDomains", b"{not json"))
    assert (r.status_code, fault(r)) == (400, "SerializationException")
    r = await send(signed(swf.url, "ListDomains", b"[]"))
    assert (r.status_code, fault(r)) == (400, "SerializationException")
    # A member of the wrong JSON type does not deserialize: SerializationException (issue 26).
    r = await send(
        signed(swf.url, "ListDomains", {"registrationStatus": "REGISTERED", "maximumPageSize": "5"})
    )
    assert (r.status_code, fault(r)) == (400, "SerializationException") and "'maximumPageSize'" in r.text
    r = await send(
        signed(swf.url, "RegisterDomain", {"name": 7, "workflowExecutionRetentionPeriodInDays": "1"})
    )
    assert (r.status_code, fault(r)) == (400, "SerializationException")
    await raises(
        "SerializationException",
        swf.client(validate=False).list_domains,
        registrationStatus="REGISTERED",
        reverseOrder="yes",
    )
    twice = b'{"name":"d2","name":"d3","workflowExecutionRetentionPeriodInDays":"1"}'
    r = await send(signed(swf.url, "RegisterDomain", twice))
    assert (r.status_code, fault(r)) == (400, "SerializationException") and "duplicate key" in r.text

    c = swf.client()
    await call(c.register_domain, name="d", workflowExecutionRetentionPeriodInDays="1")
    # Input is validated before the action runs.
    await raises("ValidationException", swf.client(validate=False).start_workflow_execution, domain="d")


async def test_every_model_action_answers_in_aws_shape(swf: Swf) -> None:
    """Each of the 39 actions answers a signed `{}` with an AWS-shaped answer, never a 5xx
    other than 501 for the ones not built yet, never a Foliot error body."""
    from foliot.core.swf.shapes import actions
    from foliot.http.swf import ACTIONS

    assert len(actions()) == 39
    for action in actions():
        r = await send(signed(swf.url, action, {}))
        code = fault(r)
        if action in ACTIONS:
            assert (r.status_code, code) == (400, "ValidationException"), (action, r.text)
        else:
            required = r.status_code == 400 and code == "ValidationException"
            assert required or (r.status_code, code) == (501, "NotImplemented"), (action, r.text)


async def test_plain_calls_are_served_at_the_edge_and_others_by_quart_alike(
    swf: Swf, monkeypatch: Any
) -> None:
    """A plain `POST /` is answered by `SwfEdge` without Quart; a chunked body goes to the
    Quart route; the answers are the same. Quart's refusals (an oversize body, a non-JSON
    media type) still apply to what the edge passes on."""
    from foliot.http.swf import SwfEdge

    served: list[str] = []
    original = SwfEdge._serve

    async def spy(self: SwfEdge, scope: Any, body: Any, send: Any) -> None:
        served.append(scope["path"])
        await original(self, scope, body, send)

    monkeypatch.setattr(SwfEdge, "_serve", spy)
    body = {"name": "edge", "workflowExecutionRetentionPeriodInDays": "1"}
    r = await send(signed(swf.url, "RegisterDomain", body))
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-amz-json-1.0"
    assert served == ["/"]

    def chunks(data: bytes) -> Any:
        async def gen() -> Any:
            yield data[:5]
            yield data[5:]

        return gen()

    again = signed(swf.url, "RegisterDomain", body)
    headers = {k: v for k, v in again.headers.items() if k.lower() != "content-length"}
    async with httpx.AsyncClient() as client:
        r = await client.post(again.url, content=chunks(again.body), headers=headers)
    assert r.status_code == 400 and fault(r) == "DomainAlreadyExistsFault"
    assert served == ["/"]  # Quart answered the chunked one, the same way
    describe = signed(swf.url, "DescribeDomain", {"name": "edge"})
    edge = await send(describe)
    async with httpx.AsyncClient() as client:
        plain = {k: v for k, v in describe.headers.items() if k.lower() != "content-length"}
        quart = await client.post(describe.url, content=chunks(describe.body), headers=plain)
    assert (edge.status_code, quart.status_code) == (200, 200)
    assert edge.json() == quart.json() and edge.json()["domainInfo"]["name"] == "edge"
    assert served == ["/", "/"]

    listing = signed(swf.url, "ListDomains", {"registrationStatus": "REGISTERED"})
    async with httpx.AsyncClient() as client:
        wrong_type = {**listing.headers, "Content-Type": "text/plain"}
        r = await client.post(listing.url, content=listing.body, headers=wrong_type)
        assert (r.status_code, fault(r)) == (415, "SerializationException")  # an AWS fault (issue 26)
        limit = swf.running.engine.settings.body_max_bytes
        big = b"{" + b" " * limit + b"}"
        amz_json = {"Content-Type": "application/x-amz-json-1.0"}
        r = await client.post(listing.url, content=big, headers=amz_json)
        assert (r.status_code, fault(r)) == (413, "RequestEntityTooLargeException")
    assert served == ["/", "/"]
    listed = await call(swf.client().list_domains, registrationStatus="REGISTERED")
    assert [d["name"] for d in listed["domainInfos"]] == ["edge"]
