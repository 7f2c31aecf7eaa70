"""boto 2 against a live Foliot (issue 26, point 15), as raw HTTP shaped exactly as boto 2's
`boto.swf.layer1.Layer1.make_request` sends it: `Content-Encoding: amz-1.0`, the long target
`com.amazonaws.swf.service.model.SimpleWorkflowService.<Action>`, `Content-Type:
application/json; charset=UTF-8`, and boto 2's SigV4 (`HmacAuthV4Handler`: only `host` and the
`x-amz-*` headers signed, the Authorization parts joined by `,` without spaces). And every
refusal of `POST /`, the HTTP layer's own included, is an AWS fault."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio

from .conftest import PRESET_KEY, PRESET_SECRET, Swf, call, raises
from .test_edge_boto3 import fault, send, signed

LONG_TARGET = "com.amazonaws.swf.service.model.SimpleWorkflowService"


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def boto2_request(
    url: str, action: str, body: dict[str, Any], *, region: str = "us-east-1", **extra: str
) -> tuple[bytes, dict[str, str]]:
    """The body and headers boto 2 sends for `action`, signed as its HmacAuthV4Handler signs."""
    data = json.dumps(body).encode()
    host = urlsplit(url).netloc
    now = dt.datetime.now(dt.UTC)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    headers = {
        "X-Amz-Target": f"{LONG_TARGET}.{action}",
        "Host": host,
        "Content-Type": "application/json; charset=UTF-8",
        "Content-Encoding": "amz-1.0",
        "Content-Length": str(len(data)),
        "User-Agent": "Boto/2.49.0 Python/3.12 Linux",
        "X-Amz-Date": amz_date,
        **extra,
    }
    to_sign = {k.lower(): " ".join(v.strip().split()) for k, v in headers.items()}
    to_sign = {k: v for k, v in to_sign.items() if k == "host" or k.startswith("x-amz")}
    names = sorted(to_sign)
    canonical = "\n".join(
        [
            "POST",
            "/",
            "",
            "".join(f"{n}:{to_sign[n]}\n" for n in names),
            ";".join(names),
            hashlib.sha256(data).hexdigest(),
        ]
    )
    day = amz_date[:8]
    scope = f"{day}/{region}/swf/aws4_request"
    string_to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _hmac(("AWS4" + PRESET_SECRET).encode(), day)
    for part in (region, "swf", "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = ",".join(
        [
            f"AWS4-HMAC-SHA256 Credential={PRESET_KEY}/{scope}",
            f"SignedHeaders={';'.join(names)}",
            f"Signature={signature}",
        ]
    )
    return data, headers


async def boto2(swf: Swf, action: str, body: dict[str, Any], **extra: str) -> httpx.Response:
    data, headers = boto2_request(swf.url, action, body, **extra)
    async with httpx.AsyncClient() as client:
        return await client.post(swf.url + "/", content=data, headers=headers)


async def test_boto2_calls_are_served(swf: Swf) -> None:
    r = await boto2(swf, "RegisterDomain", {"name": "b2", "workflowExecutionRetentionPeriodInDays": "1"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-amz-json-1.0"
    r = await boto2(swf, "DescribeDomain", {"name": "b2"})
    assert r.status_code == 200 and r.json()["domainInfo"]["name"] == "b2"
    # boto 2 reads a fault's `__type`: an AWS fault, not Foliot's error body.
    r = await boto2(swf, "RegisterDomain", {"name": "b2", "workflowExecutionRetentionPeriodInDays": "1"})
    assert (r.status_code, fault(r)) == (400, "DomainAlreadyExistsFault")
    assert r.json()["__type"] == "com.amazonaws.swf.base.model#DomainAlreadyExistsFault"
    r = await boto2(swf, "LaunchRocket", {})
    assert (r.status_code, fault(r)) == (400, "UnknownOperationException")
    listed = await call(swf.client().list_domains, registrationStatus="REGISTERED")
    assert [d["name"] for d in listed["domainInfos"]] == ["b2"]


async def test_boto2_drives_an_execution(swf: Swf) -> None:
    """The calls boto 2's decider and worker make, start to close."""
    assert (
        await boto2(swf, "RegisterDomain", {"name": "d", "workflowExecutionRetentionPeriodInDays": "1"})
    ).is_success
    wf = {"domain": "d", "name": "W", "version": "1"}
    defaults = {
        "defaultTaskStartToCloseTimeout": "60",
        "defaultExecutionStartToCloseTimeout": "600",
        "defaultTaskList": {"name": "tl"},
        "defaultChildPolicy": "TERMINATE",
    }
    assert (await boto2(swf, "RegisterWorkflowType", {**wf, **defaults})).is_success
    started = await boto2(
        swf,
        "StartWorkflowExecution",
        {"domain": "d", "workflowId": "w1", "workflowType": {"name": "W", "version": "1"}},
    )
    assert started.status_code == 200, started.text
    task = (await boto2(swf, "PollForDecisionTask", {"domain": "d", "taskList": {"name": "tl"}})).json()
    assert task["workflowExecution"]["workflowId"] == "w1"
    done = {"decisionType": "CompleteWorkflowExecution", "completeWorkflowExecutionDecisionAttributes": {}}
    r = await boto2(
        swf, "RespondDecisionTaskCompleted", {"taskToken": task["taskToken"], "decisions": [done]}
    )
    assert r.status_code == 200, r.text
    execution = {"workflowId": "w1", "runId": started.json()["runId"]}
    described = await boto2(swf, "DescribeWorkflowExecution", {"domain": "d", "execution": execution})
    assert described.json()["executionInfo"]["closeStatus"] == "COMPLETED"


async def test_boto2_signature_still_guards_the_call(swf: Swf) -> None:
    data, headers = boto2_request(swf.url, "ListDomains", {"registrationStatus": "REGISTERED"})
    async with httpx.AsyncClient() as client:
        tampered = {**headers, "X-Amz-Target": f"{LONG_TARGET}.DeprecateDomain"}
        r = await client.post(swf.url + "/", content=data, headers=tampered)
        assert (r.status_code, fault(r)) == (400, "InvalidSignatureException")
        gzip = {**headers, "Content-Encoding": "gzip"}  # not signed, but not readable either
        r = await client.post(swf.url + "/", content=data, headers=gzip)
        assert (r.status_code, fault(r)) == (415, "SerializationException")
        assert "gzip" in r.json()["message"] and r.headers["x-amzn-RequestId"]


async def test_the_http_layers_refusals_of_post_slash_are_aws_faults(swf: Swf) -> None:
    """415 (media type), 413 (size, announced or streamed), 400 (two framings), 401 (two
    Authorization headers): `{"__type", "message"}`, the status kept; nothing stored."""
    listing = signed(swf.url, "ListDomains", {"registrationStatus": "REGISTERED"})
    limit = swf.running.engine.settings.body_max_bytes
    amz_json = {"Content-Type": "application/x-amz-json-1.0"}

    async def streamed() -> Any:
        yield b"{"
        yield b" " * (limit + 10)
        yield b"}"

    async with httpx.AsyncClient() as client:
        r = await client.post(
            listing.url, content=listing.body, headers={**listing.headers, "Content-Type": "text/plain"}
        )
        assert (r.status_code, fault(r)) == (415, "SerializationException")
        r = await client.post(listing.url, content=b"{" + b" " * limit + b"}", headers=amz_json)
        assert (r.status_code, fault(r)) == (413, "RequestEntityTooLargeException")
        r = await client.post(listing.url, content=streamed(), headers=amz_json)
        assert (r.status_code, fault(r)) == (413, "RequestEntityTooLargeException")
        twice = httpx.Headers([*listing.headers.items(), ("Authorization", "AWS4-HMAC-SHA256 x")])
        r = await client.post(listing.url, content=listing.body, headers=twice)
        assert (r.status_code, fault(r)) == (401, "IncompleteSignatureException")
    # Two framings, sent raw (httpx would not).
    host = urlsplit(swf.url)
    stream = await trio.open_tcp_stream(host.hostname or "127.0.0.1", host.port or 80)
    async with stream:
        await stream.send_all(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.0\r\n"
            b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
        )
        data = b""
        with trio.fail_after(10):
            while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), head
    assert b"content-type: application/x-amz-json-1.0" in head.lower()
    assert json.loads(payload)["__type"].endswith("#SerializationException")
    # Other routes keep Foliot's own error body.
    async with httpx.AsyncClient(base_url=swf.url) as client:
        r = await client.post("/apps", content=b"x", headers={"Content-Type": "text/plain"})
        assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    await raises("UnknownResourceFault", swf.client().describe_domain, name="anything")


async def test_a_body_that_does_not_arrive_in_time_is_an_aws_fault(swf: Swf, monkeypatch: Any) -> None:
    """The edge's own refusal (408) of a plain `POST /` whose body stops short."""
    from foliot.http import hot

    monkeypatch.setattr(hot, "BODY_TIMEOUT_S", 0.3)
    host = urlsplit(swf.url)
    stream = await trio.open_tcp_stream(host.hostname or "127.0.0.1", host.port or 80)
    async with stream:
        await stream.send_all(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.0\r\n"
            b"Content-Length: 10\r\n\r\n{"
        )
        data = b""
        with trio.fail_after(10):
            while True:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), head
    assert json.loads(payload)["__type"] == "com.amazon.coral.service#RequestTimeoutException"


async def test_boto3_still_answers_as_before(swf: Swf) -> None:
    r = await send(
        signed(swf.url, "RegisterDomain", {"name": "b3", "workflowExecutionRetentionPeriodInDays": "1"})
    )
    assert r.status_code == 200
    await raises(
        "DomainAlreadyExistsFault",
        swf.client().register_domain,
        name="b3",
        workflowExecutionRetentionPeriodInDays="1",
    )
