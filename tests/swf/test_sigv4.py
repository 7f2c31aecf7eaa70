"""SigV4 verification against vectors signed by botocore's own `SigV4Auth`, at fixed times."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from unittest import mock

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from foliot.core.swf import sigv4
from foliot.core.swf.errors import (
    IncompleteSignatureException,
    InvalidSignatureException,
    MissingAuthenticationTokenException,
    SwfFault,
)

KEY, SECRET = "FKIAEXAMPLEKEY000001", "s3cr3t/EXAMPLE+key0000000000000000000000"
SIGNED_AT = dt.datetime(2026, 11, 30, 3, 0, 0, tzinfo=dt.UTC)
SIGNED_MS = int(SIGNED_AT.timestamp() * 1000)
MINUTE = 60_000


def botocore_signed(
    body: bytes = b'{"name":"orders"}',
    *,
    url: str = "http://127.0.0.1:8080/",
    region: str = "us-east-1",
    service: str = "swf",
    secret: str = SECRET,
    extra: dict[str, str] | None = None,
) -> tuple[sigv4.SignedRequest, str]:
    """A request as botocore signs it (its clock pinned to SIGNED_AT), seen from the server."""
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "SimpleWorkflowService.RegisterDomain",
        "User-Agent": "Boto3/1.0 test",
        **(extra or {}),
    }
    request = AWSRequest(method="POST", url=url, data=body, headers=headers)
    with mock.patch("botocore.auth.get_current_datetime", return_value=SIGNED_AT):
        SigV4Auth(Credentials(KEY, secret), service, region).add_auth(request)
    path, _, query = url.split("//", 1)[1].partition("/")[2].partition("?")
    host = url.split("//", 1)[1].split("/", 1)[0]
    wire = [("host", host), *((k, str(v)) for k, v in request.headers.items())]
    return (
        sigv4.SignedRequest("POST", "/" + path, query, wire, body),
        request.headers["Authorization"],
    )


def check(request: sigv4.SignedRequest, header: str, now: int = SIGNED_MS, secret: str = SECRET) -> None:
    auth = sigv4.parse_authorization(header)
    date_text = sigv4.check_request(request, auth, now)
    sigv4.verify(request, auth, secret, date_text)


def test_botocore_signature_verifies() -> None:
    request, header = botocore_signed()
    auth = sigv4.parse_authorization(header)
    assert (auth.access_key_id, auth.region, auth.service) == (KEY, "us-east-1", "swf")
    assert "host" in auth.signed_headers and "x-amz-target" in auth.signed_headers
    check(request, header)


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-3", "ap-southeast-2"])
def test_region_comes_from_the_scope(region: str) -> None:
    request, header = botocore_signed(region=region)
    check(request, header)
    assert sigv4.parse_authorization(header).region == region


def test_paths_and_queries_are_canonicalised_like_botocore() -> None:
    request, header = botocore_signed(url="http://h:1/a/./b/../c%2Fd//e?z=1&a=%2F&a=0&m")
    check(request, header)


def test_empty_body_and_odd_header_spacing() -> None:
    request, header = botocore_signed(b"", extra={"X-Custom": "  two   spaces  here "})
    check(request, header)


def test_tampered_body_is_refused() -> None:
    request, header = botocore_signed()
    forged = sigv4.SignedRequest(
        request.method, request.raw_path, request.raw_query, request.headers, b'{"name":"other"}'
    )
    with pytest.raises(InvalidSignatureException, match="does not match"):
        check(forged, header)


def test_tampered_signed_header_is_refused() -> None:
    request, header = botocore_signed()
    headers = [
        (k, "SimpleWorkflowService.DeprecateDomain" if k.lower() == "x-amz-target" else v)
        for k, v in request.headers
    ]
    forged = sigv4.SignedRequest(request.method, request.raw_path, request.raw_query, headers, request.body)
    with pytest.raises(InvalidSignatureException):
        check(forged, header)


def test_unsigned_header_may_change() -> None:
    request, header = botocore_signed()
    headers = [*request.headers, ("X-Forwarded-For", "10.0.0.1")]
    check(sigv4.SignedRequest("POST", "/", "", headers, request.body), header)


def test_wrong_secret_is_refused() -> None:
    request, header = botocore_signed(secret="not-the-secret")
    with pytest.raises(InvalidSignatureException, match="does not match"):
        check(request, header)


@pytest.mark.parametrize("minutes", [-14, 0, 14])
def test_within_fifteen_minutes_is_accepted(minutes: int) -> None:
    request, header = botocore_signed()
    check(request, header, now=SIGNED_MS + minutes * MINUTE)


def test_replay_twenty_minutes_later_is_refused() -> None:
    request, header = botocore_signed()
    with pytest.raises(InvalidSignatureException, match="Signature expired: 20261130T030000Z"):
        check(request, header, now=SIGNED_MS + 20 * MINUTE)


def test_signature_from_the_future_is_refused() -> None:
    request, header = botocore_signed()
    with pytest.raises(InvalidSignatureException, match="not yet current"):
        check(request, header, now=SIGNED_MS - 16 * MINUTE)


def test_wrong_service_is_refused() -> None:
    request, header = botocore_signed(service="sqs")
    with pytest.raises(InvalidSignatureException, match="correct service: 'swf'"):
        check(request, header)


def test_scope_date_must_match_x_amz_date() -> None:
    request, header = botocore_signed()
    forged = header.replace("/20261130/", "/20261129/")
    with pytest.raises(InvalidSignatureException, match="Date in Credential scope"):
        check(request, forged)


def test_content_sha256_header_must_match_the_body() -> None:
    body = b'{"name":"orders"}'
    request, header = botocore_signed(body, extra={"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"})
    with pytest.raises(InvalidSignatureException, match="x-amz-content-sha256"):
        check(request, header)


@pytest.mark.parametrize(
    ("header", "fault"),
    [
        (None, MissingAuthenticationTokenException),
        ("", MissingAuthenticationTokenException),
        ("Bearer abc", IncompleteSignatureException),
        ("AWS4-HMAC-SHA256 Credential=a/b/c/d/e, SignedHeaders=host", IncompleteSignatureException),
        ("AWS4-HMAC-SHA256 Credential=a/b/c, SignedHeaders=host, Signature=00", IncompleteSignatureException),
        ("AWS4-HMAC-SHA256 Credential=a/b/c/d/e SignedHeaders=host", IncompleteSignatureException),
        (
            "AWS4-HMAC-SHA256 Credential=a/b/c/d/e, SignedHeaders=Host, Signature=0",
            IncompleteSignatureException,
        ),
    ],
)
def test_malformed_authorization(header: str | None, fault: type[SwfFault]) -> None:
    with pytest.raises(fault):
        sigv4.parse_authorization(header)


def test_missing_or_bad_x_amz_date() -> None:
    request, header = botocore_signed()
    auth = sigv4.parse_authorization(header)
    without = [(k, v) for k, v in request.headers if k.lower() != "x-amz-date"]
    with pytest.raises(IncompleteSignatureException, match="X-Amz-Date"):
        sigv4.check_request(sigv4.SignedRequest("POST", "/", "", without, b""), auth, SIGNED_MS)
    bad = [*without, ("X-Amz-Date", "2026-11-30T03:00:00Z")]
    with pytest.raises(IncompleteSignatureException, match="ISO8601"):
        sigv4.check_request(sigv4.SignedRequest("POST", "/", "", bad, b""), auth, SIGNED_MS)


def test_host_must_be_signed() -> None:
    request, header = botocore_signed()
    auth = sigv4.parse_authorization(header)
    stripped = header.replace("SignedHeaders=", "SignedHeaders=x;").replace("host;", "")
    with pytest.raises(InvalidSignatureException, match="Host"):
        sigv4.check_request(request, sigv4.parse_authorization(stripped), SIGNED_MS)
    assert auth.signed_headers[0] != "x"


def test_pure_helpers() -> None:
    assert sigv4.remove_dot_segments("") == "/"
    assert sigv4.remove_dot_segments("/a/../../b/./c/") == "/b/c/"
    assert sigv4.canonical_uri("/a b/%2F") == "/a%20b/%252F"
    assert sigv4.canonical_query("b=2&a=%7e&a=1") == "a=1&a=~&b=2"
    assert sigv4.format_amz_date(SIGNED_MS) == "20261130T030000Z"
    key = sigv4.signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam")
    # The derived key of AWS's documented example (General Reference, "Examples of how to derive
    # a signing key for Signature Version 4").
    assert key.hex() == "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"


def test_vector_fixture_is_json() -> None:
    request, _ = botocore_signed()
    body: Any = json.loads(request.body)
    assert body == {"name": "orders"}
