"""AWS Signature Version 4 verification, pure: a request's parts and `now` in, a verdict out.

`parse_authorization` reads the `Authorization` header; `verify` rebuilds the canonical request
the way AWS (and botocore's `SigV4Auth`) builds it, derives the signing key from the secret and
the credential scope, and compares signatures in constant time. Nothing here reads the clock or
the network, so every rule is tested with fixed times and botocore-signed vectors.

The rules checked, in the order AWS reports them:
- the header names `AWS4-HMAC-SHA256` with `Credential`, `SignedHeaders` and `Signature`
  (else `IncompleteSignatureException`);
- `X-Amz-Date` is present and signed, `host` is signed;
- the scope is `<yyyymmdd>/<region>/swf/aws4_request` and its date is X-Amz-Date's day;
- X-Amz-Date is within 15 minutes of `now` either way;
- the payload hash is the body's SHA-256 (a sent `X-Amz-Content-SHA256` must match it);
- the signature matches (else `InvalidSignatureException`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from urllib.parse import quote, unquote

import attrs

from .errors import (
    IncompleteSignatureException,
    InvalidSignatureException,
    MissingAuthenticationTokenException,
)

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "swf"
TERMINATOR = "aws4_request"
MAX_SKEW_MS = 15 * 60 * 1000
_AMZ_DATE = "%Y%m%dT%H%M%SZ"
_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_DATE = re.compile(r"^\d{8}$")
_AMZ_DATE_FIELDS = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z")


@attrs.frozen
class Authorization:
    """The parts of an `AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…` header."""

    access_key_id: str
    date: str  # yyyymmdd
    region: str
    service: str
    terminator: str
    signed_headers: tuple[str, ...]
    signature: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/{self.terminator}"


@attrs.frozen
class SignedRequest:
    """What a signature covers. `headers` are (name, value) pairs as received, any case."""

    method: str
    raw_path: str  # as sent on the wire, percent-encoding included
    raw_query: str
    headers: Sequence[tuple[str, str]]
    body: bytes

    def header_values(self, name: str) -> list[str]:
        lname = name.lower()
        return [v for k, v in self.headers if k.lower() == lname]


def parse_authorization(header: str | None) -> Authorization:
    """The Authorization header's parts, or the AWS exception for a missing or malformed one."""
    if header is None or not header.strip():
        raise MissingAuthenticationTokenException("Missing Authentication Token")
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise IncompleteSignatureException(
            f"Unsupported Authorization Type: {algorithm!r}; only {ALGORITHM} is accepted"
        )
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise IncompleteSignatureException(f"Authorization header requires a key=value list: {part!r}")
        fields[key.strip()] = value.strip()
    missing = [k for k in ("Credential", "SignedHeaders", "Signature") if not fields.get(k)]
    if missing:
        raise IncompleteSignatureException(
            "Authorization header requires " + ", ".join(f"'{k}'" for k in missing) + " parameter(s)"
        )
    credential = fields["Credential"].split("/")
    if len(credential) != 5 or not all(credential):
        raise IncompleteSignatureException(
            "Credential must have exactly 5 slash-delimited elements, "
            "e.g. keyid/date/region/service/term, got " + repr(fields["Credential"])
        )
    key_id, date, region, service, terminator = credential
    signed = tuple(fields["SignedHeaders"].split(";"))
    if any(h != h.lower() or not h for h in signed):
        raise IncompleteSignatureException("SignedHeaders must be lower-case names separated by ';'")
    return Authorization(key_id, date, region, service, terminator, signed, fields["Signature"])


def amz_date(request: SignedRequest) -> tuple[str, int]:
    """The request's signing time: its X-Amz-Date text and that instant in epoch ms."""
    values = request.header_values("x-amz-date")
    if values:
        text = values[0].strip()
        try:
            fields = _AMZ_DATE_FIELDS.fullmatch(text)  # the usual form, without strptime's cost
            if fields is not None:
                y, mo, d, h, mi, sec = map(int, fields.groups())
                at = datetime(y, mo, d, h, mi, sec, tzinfo=UTC)
            else:
                at = datetime.strptime(text, _AMZ_DATE).replace(tzinfo=UTC)
        except ValueError:
            raise IncompleteSignatureException(
                f"X-Amz-Date must be in the ISO8601 basic format yyyyMMdd'T'HHmmss'Z', got {text!r}"
            ) from None
        return text, int(at.timestamp() * 1000)
    raise IncompleteSignatureException("Authorization header requires existence of a 'X-Amz-Date' header")


def format_amz_date(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime(_AMZ_DATE)


def check_scope(auth: Authorization, date_text: str) -> None:
    """The credential scope names this service, a plausible region and the signing day."""
    if auth.terminator != TERMINATOR:
        raise IncompleteSignatureException(
            f"Credential should be scoped with a valid terminator: '{TERMINATOR}', not '{auth.terminator}'."
        )
    if auth.service != SERVICE:
        raise InvalidSignatureException(f"Credential should be scoped to correct service: '{SERVICE}'.")
    if not _DATE.match(auth.date) or auth.date != date_text[:8]:
        raise InvalidSignatureException(
            f"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: "
            f"'{auth.date}' != '{date_text[:8]}', from '{date_text}'."
        )
    if not _REGION.match(auth.region):
        raise InvalidSignatureException(
            f"Credential should be scoped to a valid region, not '{auth.region}'."
        )


def is_region(name: str) -> bool:
    """A region name as Foliot accepts one in a credential scope."""
    return _REGION.fullmatch(name) is not None


def check_skew(signed_at_ms: int, now_ms: int) -> None:
    """AWS refuses a signature more than 15 minutes away from its own clock, either way."""
    if signed_at_ms < now_ms - MAX_SKEW_MS:
        raise InvalidSignatureException(
            f"Signature expired: {format_amz_date(signed_at_ms)} is now earlier than "
            f"{format_amz_date(now_ms - MAX_SKEW_MS)} ({format_amz_date(now_ms)} - 15 min.)"
        )
    if signed_at_ms > now_ms + MAX_SKEW_MS:
        raise InvalidSignatureException(
            f"Signature not yet current: {format_amz_date(signed_at_ms)} is still later than "
            f"{format_amz_date(now_ms + MAX_SKEW_MS)} ({format_amz_date(now_ms)} + 15 min.)"
        )


def remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4, with empty segments dropped too (AWS collapses `//`)."""
    if not path:
        return "/"
    out: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if out:
                out.pop()
        else:
            out.append(segment)
    first = "/" if path.startswith("/") else ""
    last = "/" if path.endswith("/") and out else ""
    return first + "/".join(out) + last


def canonical_uri(raw_path: str) -> str:
    """Non-S3 services encode the path once more on top of the wire form (so `%2F` → `%252F`)."""
    return quote(remove_dot_segments(raw_path or "/"), safe="/~")


def canonical_query(raw_query: str) -> str:
    """Each name and value URI-encoded (RFC 3986 unreserved kept), sorted by name then value."""
    if not raw_query:
        return ""
    pairs = []
    for pair in raw_query.split("&"):
        if not pair:
            continue
        key, _, value = pair.partition("=")
        pairs.append(
            (quote(unquote(key), safe="-_.~"), quote(unquote(value.replace("+", "%20")), safe="-_.~"))
        )
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def canonical_headers(request: SignedRequest, signed: Sequence[str]) -> str:
    lines = []
    for name in signed:
        values = request.header_values(name)
        if not values:
            raise InvalidSignatureException(
                f"The request signature names header '{name}', which was not sent."
            )
        lines.append(f"{name}:" + ",".join(" ".join(v.split()) for v in values))
    return "\n".join(lines) + "\n"


def payload_hash(request: SignedRequest) -> str:
    computed = hashlib.sha256(request.body).hexdigest()
    sent = request.header_values("x-amz-content-sha256")
    if sent and sent[0].strip().lower() != computed:
        raise InvalidSignatureException(
            "The provided x-amz-content-sha256 header does not match the SHA-256 of the payload."
        )
    return computed


def canonical_request(request: SignedRequest, auth: Authorization) -> str:
    return "\n".join(
        [
            request.method.upper(),
            canonical_uri(request.raw_path),
            canonical_query(request.raw_query),
            canonical_headers(request, auth.signed_headers),
            ";".join(auth.signed_headers),
            payload_hash(request),
        ]
    )


def string_to_sign(date_text: str, scope: str, canonical: str) -> str:
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return f"{ALGORITHM}\n{date_text}\n{scope}\n{digest}"


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = hmac.new(f"AWS4{secret}".encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, TERMINATOR):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def signature(secret: str, auth: Authorization, date_text: str, canonical: str) -> str:
    return signature_with_key(
        signing_key(secret, auth.date, auth.region, auth.service), auth, date_text, canonical
    )


def signature_with_key(key: bytes, auth: Authorization, date_text: str, canonical: str) -> str:
    """The signature under a derived signing key (`signing_key` of the secret and `auth`'s scope)."""
    return hmac.new(
        key, string_to_sign(date_text, auth.scope, canonical).encode(), hashlib.sha256
    ).hexdigest()


def check_request(request: SignedRequest, auth: Authorization, now_ms: int) -> str:
    """Every check that needs no secret; returns the X-Amz-Date text. Done before the key is
    looked up so that a stale or malformed request costs no storage read."""
    date_text, signed_at = amz_date(request)
    if "host" not in auth.signed_headers:
        raise InvalidSignatureException("'Host' must be a signed header.")
    if "x-amz-date" not in auth.signed_headers:
        raise InvalidSignatureException("'X-Amz-Date' must be a signed header.")
    check_scope(auth, date_text)
    check_skew(signed_at, now_ms)
    return date_text


def verify(request: SignedRequest, auth: Authorization, secret: str, date_text: str) -> None:
    """Raise `InvalidSignatureException` unless `auth.signature` signs `request` under `secret`."""
    key = signing_key(secret, auth.date, auth.region, auth.service)
    verify_with_key(request, auth, key, date_text)


def verify_with_key(request: SignedRequest, auth: Authorization, key: bytes, date_text: str) -> None:
    """`verify` with the signing key derived already (it depends on the secret and the scope
    only, so a caller may keep it for the day: `foliot.kinds.swf.keys.SwfKeys.signing_key`)."""
    expected = signature_with_key(key, auth, date_text, canonical_request(request, auth))
    if not hmac.compare_digest(expected.encode(), auth.signature.encode()):
        raise InvalidSignatureException(
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method."
        )
