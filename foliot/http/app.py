"""The quart-trio application: factory, authentication, strict bodies, error mapping.

Every response is JSON, errors as `{"error": {"code", "message", ...}}` (unknown routes 404,
wrong methods 405 with `Allow`, never an HTML redirect); no stack trace ever leaves. Bodies
over `2 * FOLIOT_PAYLOAD_MAX_BYTES + 64 KiB` are refused from their Content-Length (or as soon
as the stream passes the limit) before they are read in full; a body must be JSON (415
otherwise) nested at most `BODY_MAX_DEPTH` levels; numbers in paths and query strings are ASCII
digits within bounds.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import attrs
from quart import Blueprint, Quart, Response, current_app, g, has_request_context, request
from quart.globals import request_ctx
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException, MethodNotAllowed, RequestEntityTooLarge

from ..actors.placement import Elsewhere
from ..core import credentials
from ..core.config import Settings
from ..core.digits import INT64_MAX, ascii_int
from ..core.errors import (
    Forbidden,
    Internal,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    Refused,
    StorageUnavailable,
    Unauthorized,
    storage_refusal,
)
from ..core.swf import errors as swf_errors
from ..core.workflow.jsonconv import ValidationError, is_name, structure
from ..core.workflow.payload import MAX_DEPTH, DepthError, loads
from .conn import FinishingHTTPConnection
from .errors import Answer, UnsupportedMediaType, headers_of, status_of
from .forward import quart_incoming, quart_response, relay
from .services import Services

T = TypeVar("T")
log = logging.getLogger("foliot.http")

_HTTP_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
}

BODY_TIMEOUT_S = 60
"""How long a request body may take to arrive (then 408)."""

BODY_MAX_DEPTH = MAX_DEPTH + 2
"""A body's own object and one wrapper (`set` of a state edit) come on top of a value's levels."""


def is_json_media_type(content_type: str) -> bool:
    """`application/json`, `application/*+json` and the SWF protocol's `application/x-amz-json-*`,
    with any parameters (`; charset=utf-8`)."""
    mime = content_type.partition(";")[0].strip().lower()
    kind, _, subtype = mime.partition("/")
    return kind == "application" and (
        subtype == "json" or subtype.endswith("+json") or subtype.startswith("x-amz-json-")
    )


@attrs.frozen
class Caller:
    admin: bool
    app: str | None = None
    key_id: str | None = None
    role: str | None = None  # an operator token's role (viewer | operator | admin), else None


# The calls an `operator` token may make besides reads: the interventions, one run or in bulk.
_INTERVENTION = re.compile(
    r"^/apps/[^/]+/(?:runs(?:/[^/]+)?/(?:cancel|redrive|rewind|skip|state|pause|unpause)"
    r"|workflows/[^/]+/(?:dry-run|migrate))$"
)


@attrs.frozen
class Call:
    """What the hot routes (start, signal) read of a request: the same whether it came through
    Quart or straight from the ASGI edge (`foliot/http/hot.py`)."""

    engine: Services
    admin_token: str
    authorization: str
    method: str
    path: str
    idempotency_key: str | None = None
    read: Callable[[], Awaitable[bytes]] | None = None  # the body

    async def body(self) -> bytes:
        assert self.read is not None
        return await self.read()


def quart_call() -> Call:
    """The hot routes' view of the Quart request being served."""

    async def read() -> bytes:
        data = await request.get_data(cache=True, as_text=False)
        assert isinstance(data, bytes)
        return data

    return Call(
        engine(),
        g.admin_token,
        request.headers.get("Authorization", ""),
        request.method,
        request.path,
        request.headers.get("Idempotency-Key"),
        read,
    )


@attrs.frozen
class EmptyBody:
    """A body that must be empty or `{}`."""


def engine() -> Services:
    e: Services = g.engine
    return e


def settings() -> Settings:
    s: Settings = g.settings
    return s


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return Response(text, status=status, content_type="application/json", headers=headers)


SWF_CONTENT_ENCODING = "amz-1.0"
"""The `Content-Encoding` boto 2 sends to the SWF endpoint; AWS reads the body as it is."""


def is_swf_endpoint() -> bool:
    """The request is for the SWF face (`POST /`), which answers nothing but AWS faults."""
    return has_request_context() and request.method == "POST" and request.path == "/"


def error_response(error: Refused) -> Response:
    if is_swf_endpoint():
        return aws_error_response(error)
    return json_response(error.body(), status_of(error), headers_of(error))


def aws_error_response(error: Refused) -> Response:
    """A refusal of `POST /` in AWS's shape (`{"__type", "message"}`), its status kept."""
    fault = swf_errors.refusal(status_of(error), error.message)
    text = json.dumps(fault.body(), separators=(",", ":"), ensure_ascii=False)
    headers = {"x-amzn-RequestId": str(uuid.uuid4()), **(headers_of(error) or {})}
    return Response(text, status=fault.status, headers=headers, content_type="application/x-amz-json-1.0")


# ---------------------------------------------------------------------- authentication


def bearer_token(header: str) -> str:
    """The key of an `Authorization: Bearer <key>` header (401 when missing or malformed)."""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("missing or malformed Authorization: Bearer <key>")
    return token.strip()


async def authenticate() -> Caller:
    return await authenticate_header(engine(), g.admin_token, request.headers.get("Authorization", ""))


async def authenticate_header(eng: Services, admin_token: str, header: str) -> Caller:
    """The caller an Authorization header stands for (401 unless a live key); then, under
    Quart, 400 for a query parameter the route does not take (so an unknown caller learns
    nothing from the query, as from the body)."""
    caller = await _caller(eng, admin_token, header)
    if has_request_context() and request.endpoint is not None:
        unread = unread_query(current_app.view_functions.get(request.endpoint))
        if unread is not None:
            raise InvalidRequest("unknown query parameter (this route takes none)", field=unread)
    return caller


async def _caller(eng: Services, admin_token: str, header: str) -> Caller:
    token = bearer_token(header)
    if hmac.compare_digest(token.encode(), admin_token.encode()):
        return Caller(admin=True)
    parts = credentials.split_api_key(token)
    if parts is not None:
        key_id, secret = parts
        record = await eng.directory.api_key(key_id)
        if (
            record is not None
            and record.revoked_at is None
            and credentials.matches(secret, record.secret_hash)
        ):
            return Caller(admin=False, app=record.app, key_id=key_id)
    operator = await operator_caller(token, eng)
    if operator is not None:
        return operator
    raise Unauthorized("invalid or revoked key")


async def operator_caller(token: str, eng: Services | None = None) -> Caller | None:
    """The caller an operator token stands for (None: not a live operator token)."""
    parts = credentials.split_operator_token(token)
    if parts is None:
        return None
    token_id, secret = parts
    record = await (eng or engine()).store.get_operator_token(token_id)
    if record is None or record.revoked_at is not None or not credentials.matches(secret, record.secret_hash):
        return None
    return Caller(admin=record.role == "admin", key_id=token_id, role=record.role)


def check_operator_scope(caller: Caller, method: str, path: str) -> None:
    """A `viewer` token only reads; an `operator` token also intervenes; 403 otherwise."""
    if caller.role not in ("viewer", "operator") or method in ("GET", "HEAD"):
        return
    if caller.role == "viewer":
        raise Forbidden("a viewer token can only read")
    if not _INTERVENTION.match(path):
        raise Forbidden("an operator token can read and intervene on runs; this call needs an app key")


async def require_admin() -> Caller:
    caller = await authenticate()
    if not caller.admin:
        raise Forbidden("this call needs the admin token")
    return caller


async def require_app(app: str) -> Caller:
    """Admin, or a key of this very app; the app must exist."""
    return await require_app_call(
        Call(engine(), g.admin_token, request.headers.get("Authorization", ""), request.method, request.path),
        app,
    )


async def require_app_call(call: Call, app: str) -> Caller:
    caller = await authenticate_header(call.engine, call.admin_token, call.authorization)
    if caller.role in ("viewer", "operator"):
        check_operator_scope(caller, call.method, call.path)
    elif not caller.admin:
        if caller.app != app:
            raise Forbidden(f"this key does not belong to app {app!r}")
        return caller  # a live key's app exists (the key row references it)
    if not is_name(app) or await call.engine.directory.app_record(app) is None:
        raise NotFound(f"app {app!r} not found")
    return caller


# ---------------------------------------------------------------------- bodies and queries


async def raw_json(*, empty_ok: bool = False) -> Any:
    data = await request.get_data(cache=True, as_text=False)
    assert isinstance(data, bytes)
    return decode_json(data, empty_ok=empty_ok)


def decode_json(data: bytes, *, empty_ok: bool = False) -> Any:
    """A request body as JSON (400 when empty, malformed or nested too deep)."""
    if not data.strip():
        if empty_ok:
            return {}
        raise InvalidRequest("the request body must be a JSON object")
    try:
        return loads(data.decode("utf-8"), BODY_MAX_DEPTH)
    except DepthError:
        raise InvalidRequest(
            f"the request body nests arrays/objects deeper than {BODY_MAX_DEPTH} levels "
            f"(a value may nest {MAX_DEPTH})"
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidRequest(f"malformed JSON: {exc}") from None


async def body(cls: type[T], *, empty_ok: bool = False) -> T:
    return parse(await raw_json(empty_ok=empty_ok), cls)


def parse(raw: Any, cls: type[T]) -> T:
    """Structure a parsed body strictly into `cls`; 400 naming the field on any problem."""
    if not isinstance(raw, dict):
        raise InvalidRequest("the request body must be a JSON object")
    try:
        return structure(raw, cls)
    except ValidationError as exc:
        raise InvalidRequest(exc.message, field=exc.field or None) from None


def number(raw: str, field: str, low: int = 0, high: int = INT64_MAX) -> int:
    """A number from a query string, cursor or path: ASCII digits in `low..high`, else 400."""
    try:
        return ascii_int(raw, low, high)
    except ValueError:
        raise InvalidRequest(f"must be a whole number {low}..{high}", field=field) from None


def query_int(name: str, default: int, low: int, high: int) -> int:
    _check_declared({name})
    raw = request.args.get(name)
    return default if raw is None else number(raw, name, low, high)


def check_query(allowed: set[str]) -> None:
    """Every parameter is one the route takes, given once: `status=a&status=b` is refused
    rather than read as `a` (no list parameters; a silent first-wins would hide the mistake)."""
    _check_declared(allowed)
    for key in request.args:
        if key not in allowed:
            raise InvalidRequest("unknown query parameter", field=key)
        if len(request.args.getlist(key)) > 1:
            raise InvalidRequest("query parameter given more than once", field=key)


_READS_QUERY: set[Callable[..., Any]] = set()
V = TypeVar("V", bound=Callable[..., Any])


class UndeclaredQuery(RuntimeError):
    """A view reads a query parameter but is not marked `@reads_query`: the gate in
    `authenticate_header` refuses every query to it, so the parameter could never be given.
    A programming error (a 500, logged), never the caller's: tests/api/test_query_declared.py
    finds every such view without calling it."""


def reads_query(view: V) -> V:
    """Mark a view that reads query parameters (it checks them with `check_query`); a request
    with a query to any other API route is refused before the view runs. Put it right under
    the route decorator (it marks the function the route calls)."""
    _READS_QUERY.add(view)
    return view


def _check_declared(names: set[str]) -> None:
    """Raise `UndeclaredQuery` when this request's view reads `names` but is not marked."""
    if not names or not has_request_context() or request.endpoint is None:
        return
    view = current_app.view_functions.get(request.endpoint)
    if view is not None and view not in _READS_QUERY:
        raise UndeclaredQuery(
            f"view {request.endpoint!r} reads query parameters {sorted(names)} but is not marked "
            "@reads_query (every query to it is refused before it runs)"
        )


def unread_query(view: Callable[..., Any] | None) -> str | None:
    """The first query parameter of this request when its view takes none."""
    if not request.args or view is None or view in _READS_QUERY:
        return None
    return next(iter(request.args))


def check_name(value: str, field: str) -> None:
    if not is_name(value):
        raise InvalidRequest("must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$", field=field)


# ---------------------------------------------------------------------- the factory


def create_app(
    engine_: Services, settings_: Settings, admin_token: str, faces: Sequence[Blueprint] = ()
) -> Quart:
    app = QuartTrio("foliot")
    app.asgi_http_class = FinishingHTTPConnection  # closes what it says it closes (conn.py)
    app.config["MAX_CONTENT_LENGTH"] = settings_.body_max_bytes
    app.config["BODY_TIMEOUT"] = BODY_TIMEOUT_S
    app.config["JSON_SORT_KEYS"] = False
    # `/runs/` answers like `/runs`, and `/apps//x` is a JSON 404: werkzeug would otherwise
    # answer either with an HTML redirect.
    app.url_map.strict_slashes = False
    app.url_map.merge_slashes = False

    async def _options() -> Response:
        """OPTIONS on a route: 204 with `Allow`, no body (Quart's default is an empty text/html)."""
        adapter = request_ctx.url_adapter
        methods = adapter.allowed_methods() if adapter is not None else []
        response = Response("", status=204, headers={"Allow": ", ".join(sorted(methods))})
        del response.headers["Content-Type"]
        return response

    app.make_default_options_response = _options  # type: ignore[method-assign]

    @app.before_request
    async def _context() -> Response | None:
        g.engine = engine_
        g.settings = settings_
        g.admin_token = admin_token
        length = request.content_length
        if length is not None and length > settings_.body_max_bytes:
            return error_response(
                PayloadTooLarge(
                    f"request body of {length} bytes is over the {settings_.body_max_bytes}-byte limit"
                )
            )
        has_body = bool(length) or "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        content_type = request.headers.get("Content-Type")
        # No Content-Type at all is taken as JSON (docs/decisions.md); any other type is refused.
        # The console's pages post HTML forms (foliot/console/); everything else speaks JSON.
        form_ok = request.path.startswith("/console/")
        if has_body and content_type is not None and not is_json_media_type(content_type) and not form_ok:
            return error_response(
                UnsupportedMediaType("request bodies are JSON: send Content-Type: application/json")
            )
        if "Transfer-Encoding" in request.headers and "Content-Length" in request.headers:
            # Two framings: how requests are smuggled past a proxy (RFC 9112 6.1). Refused, closed.
            refused = error_response(InvalidRequest("send Content-Length or Transfer-Encoding, not both"))
            refused.headers["Connection"] = "close"
            return refused
        encoding = request.headers.get("Content-Encoding", "").strip().lower()
        swf_encoding = encoding == SWF_CONTENT_ENCODING and is_swf_endpoint()
        if has_body and encoding not in ("", "identity") and not swf_encoding:
            return error_response(
                UnsupportedMediaType(
                    f"Content-Encoding {encoding[:40]!r} is not supported: send the body uncompressed"
                )
            )
        if len(request.headers.getlist("Authorization")) > 1:
            # A singleton field (RFC 9110): which of two keys called is for nobody to guess.
            return error_response(Unauthorized("send one Authorization header, not several"))
        if len(request.headers.getlist("Idempotency-Key")) > 1:
            return error_response(
                InvalidRequest("send one Idempotency-Key header, not several", field="Idempotency-Key")
            )
        if "\x00" in request.path or any("\x00" in k or "\x00" in v for k, v in request.args.items(True)):
            return error_response(InvalidRequest("NUL characters are not allowed in paths or queries"))
        return None

    @app.after_request
    async def _settle_body(response: Response) -> Response:
        """An error answered before the body was read: read a small body so the connection
        stays in step for its next request; close the connection after a large one."""
        if response.status_code >= 400 and request.method in ("POST", "PUT", "PATCH", "DELETE"):
            length = request.content_length
            if length is not None and length <= settings_.body_max_bytes and response.status_code != 413:
                try:
                    await request.get_data(cache=True)
                except Exception:
                    response.headers["Connection"] = "close"
            else:
                response.headers["Connection"] = "close"
        return response

    @app.errorhandler(Refused)
    async def _api_error(error: Refused) -> Response:
        return error_response(error)

    @app.errorhandler(Elsewhere)
    async def _elsewhere(error: Elsewhere) -> Response:
        """The addressed actor lives on another node: its answer, as it gave it."""
        try:
            relayed = await relay(engine_.forwarder, error, await quart_incoming())
        except Refused as refused:
            return error_response(refused)
        return quart_response(relayed)

    @app.errorhandler(StorageUnavailable)
    async def _storage_down(error: StorageUnavailable) -> Response:
        log.warning("storage unavailable: %s", error)
        return error_response(storage_refusal(error))

    @app.errorhandler(RequestEntityTooLarge)
    async def _too_large(error: RequestEntityTooLarge) -> Response:
        return error_response(
            PayloadTooLarge(f"request body is over the {settings_.body_max_bytes}-byte limit")
        )

    @app.errorhandler(HTTPException)
    async def _http_error(error: HTTPException) -> Response:
        status = error.code or 500
        if status < 400:  # a routing redirect: answer JSON, never werkzeug's HTML page
            status = 404
        code = _HTTP_CODES.get(status, "invalid_request" if status < 500 else "internal")
        if status == 404:
            message = f"no route {request.path!r}"[:300]
        elif isinstance(error, MethodNotAllowed):
            message = f"{request.method} is not allowed here"
        else:
            message = error.description or error.name
        response = error_response(Answer(status, code, message))
        if isinstance(error, MethodNotAllowed) and error.valid_methods:
            response.headers["Allow"] = ", ".join(sorted(error.valid_methods))
        return response

    @app.errorhandler(Exception)
    async def _unexpected(error: Exception) -> Response:
        if isinstance(error, Refused):
            return error_response(error)
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(Internal("internal error; see the server log"))

    from . import (
        admin,
        apps,
        bulk,
        deploys,
        diagnosis,
        internal,
        operators,
        runs,
        schedules,
        signals,
        swf,
        tasks,
        workflows,
    )

    for module in (
        apps,
        workflows,
        deploys,
        runs,
        bulk,
        signals,
        tasks,
        schedules,
        admin,
        diagnosis,
        operators,
    ):
        app.register_blueprint(module.blueprint)
    for face in faces:  # the console, mounted by the composition root
        app.register_blueprint(face)
    app.register_blueprint(swf.blueprint)
    app.register_blueprint(internal.blueprint)
    return app
