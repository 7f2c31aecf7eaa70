"""The AWS SWF JSON 1.0 face: `POST /` with `X-Amz-Target: SimpleWorkflowService.<Action>`,
and the admin routes for SWF access keys (`/admin/swf/credentials`).

A request goes: SigV4 (`foliot.core.swf.sigv4`, the key's secret from `foliot.kinds.swf.keys`) → target →
JSON body → validation against the service model (`foliot.core.swf.shapes`) → the action. Every
refusal is an AWS fault (`{"__type", "message"}`, `application/x-amz-json-1.0`), never a
Foliot error body, so SDKs raise their own exception classes. Routes only translate; the
registry's logic is in `foliot.kinds.swf.registry`.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any

import attrs
from hypercorn.typing import ASGIFramework, ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope
from quart import Blueprint, Response, current_app, request
from werkzeug.datastructures import Headers as QuartHeaders

from ..actors.placement import Elsewhere
from ..core.errors import (
    CommitInDoubt,
    CommitUnknown,
    InvalidRequest,
    NotFound,
    Refused,
    StorageUnavailable,
    Unavailable,
)
from ..core.errors import Conflict as ApiConflict
from ..core.swf import errors as swf_errors
from ..core.swf import shapes, sigv4
from ..core.swf.errors import (
    InternalFailure,
    NotImplementedFault,
    SerializationException,
    ServiceUnavailable,
    SwfFault,
    UnknownOperationException,
    UnrecognizedClientException,
)
from ..core.workflow.duration import format_timestamp as ts
from ..core.workflow.payload import DepthError, loads
from ..kinds.swf import queries, registry, writes
from ..kinds.swf.keys import SwfKeys
from ..kinds.swf.registry import Action, Ctx
from ..storage.swf import SwfLambdaFunction
from .app import (
    EmptyBody,
    body,
    check_query,
    engine,
    is_json_media_type,
    json_response,
    query_int,
    reads_query,
    require_admin,
)
from .errors import status_of
from .forward import Incoming, RawHeaders, Relayed, relay
from .hot import Body, Disconnected, error_answer, plain_headers, send_answer
from .services import Services
from .urls import UrlError, check_http_url

log = logging.getLogger("foliot.swf")
blueprint = Blueprint("swf", __name__)

CONTENT_TYPE = "application/x-amz-json-1.0"
CONTENT_TYPE_BYTES = CONTENT_TYPE.encode()
TARGET_PREFIX = "SimpleWorkflowService."
# boto 2 names the service in full; AWS accepts both.
LONG_TARGET_PREFIX = "com.amazonaws.swf.service.model.SimpleWorkflowService."
BODY_MAX_DEPTH = 64  # SWF payloads (input, result, details) are strings: shapes nest a few levels

# The actions served, by SWF action name. The model's other actions are validated, then answer
# NotImplemented; the execution actions join this table when they are built.
ACTIONS: dict[str, Action] = {**registry.ACTIONS, **queries.ACTIONS, **writes.ACTIONS}

Answer = Relayed  # an answer to send as it is: status, raw headers, body


def keys() -> SwfKeys:
    """This app's key book, made on first use from the engine's store and vault."""
    return key_book(current_app.config, engine())


def key_book(config: Any, eng: Services) -> SwfKeys:
    """The key book kept in an app's config (made on first use): the Quart route and the edge
    (`SwfEdge`) share it, so a revocation drops the one cache."""
    found = config.get("FOLIOT_SWF_KEYS")
    if found is None:
        found = SwfKeys(eng.store, eng.vault, eng.clock.now, dict(eng.settings.swf_credentials))
        config["FOLIOT_SWF_KEYS"] = found
    assert isinstance(found, SwfKeys)
    return found


def aws_answer(body: dict[str, Any], status: int = 200) -> Answer:
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    headers = [(b"content-type", CONTENT_TYPE_BYTES), (b"x-amzn-requestid", str(uuid.uuid4()).encode())]
    return Answer(status, headers, text)


def aws_response(body: dict[str, Any], status: int = 200) -> Response:
    return quart_answer(aws_answer(body, status))


def quart_answer(answer: Answer) -> Response:
    headers = QuartHeaders([(k.decode("latin-1"), v.decode("latin-1")) for k, v in answer.headers])
    return Response(answer.body, status=answer.status, headers=headers)


def header(headers: RawHeaders, name: bytes) -> str | None:
    """The first value of header `name` (lower-case), as Quart's `request.headers.get` gives it."""
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def signed_request(scope: Any, raw_body: bytes) -> sigv4.SignedRequest:
    raw_path = scope.get("raw_path") or scope["path"].encode()
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
    return sigv4.SignedRequest(
        scope["method"],
        raw_path.decode("latin-1"),
        scope.get("query_string", b"").decode("latin-1"),
        headers,
        raw_body,
    )


async def authenticate(eng: Services, book: SwfKeys, scope: Any, raw_body: bytes) -> str:
    """The SigV4-verified request's region; an AWS fault otherwise."""
    auth = sigv4.parse_authorization(header(scope["headers"], b"authorization"))
    signed = signed_request(scope, raw_body)
    date_text = sigv4.check_request(signed, auth, eng.clock.now())
    secret = await book.secret(auth.access_key_id)
    if secret is None:
        raise UnrecognizedClientException("The security token included in the request is invalid.")
    sigv4.verify_with_key(signed, auth, book.signing_key(secret, auth), date_text)
    return auth.region


def target(raw: str) -> str:
    """The action an `X-Amz-Target` names: `SimpleWorkflowService.<Action>`, or boto 2's
    `com.amazonaws.swf.service.model.SimpleWorkflowService.<Action>`."""
    if raw.startswith(TARGET_PREFIX):
        action = raw[len(TARGET_PREFIX) :]
    elif raw.startswith(LONG_TARGET_PREFIX):
        action = raw[len(LONG_TARGET_PREFIX) :]
    else:
        raise UnknownOperationException(
            f"X-Amz-Target must be {TARGET_PREFIX}<Action>, got {raw[:100]!r}"
            if raw
            else "Missing X-Amz-Target header: SimpleWorkflowService.<Action>"
        )
    shapes.input_shape(action)  # an action the model does not know: UnknownOperationException
    return action


def decode(raw_body: bytes) -> Any:
    if not raw_body.strip():
        return {}
    try:
        return loads(raw_body.decode("utf-8"), BODY_MAX_DEPTH)
    except DepthError:
        raise SerializationException(f"The request body nests deeper than {BODY_MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise SerializationException(f"The request body is not valid JSON: {exc}") from None


async def handle(eng: Services, book: SwfKeys, scope: Any, raw_body: bytes) -> dict[str, Any]:
    region = await authenticate(eng, book, scope, raw_body)
    action = target(header(scope["headers"], b"x-amz-target") or "")
    body = decode(raw_body)
    shapes.validate(action, body)
    run = ACTIONS.get(action)
    if run is None:
        raise NotImplementedFault(
            f"{action} is not implemented by this Foliot yet; docs/swf.md lists the actions served."
        )
    return await run(Ctx(eng.store, eng.clock.now(), region, eng.swf), body)


async def answer(eng: Services, book: SwfKeys, scope: Any, raw_body: bytes) -> Answer:
    """One SWF call, its body read: the answer, or the owner's answer when the execution lives
    on another node. Every refusal is an AWS fault."""
    try:
        return aws_answer(await handle(eng, book, scope, raw_body))
    except Elsewhere as elsewhere:  # the execution lives on another node: its answer, as given
        path = (scope.get("raw_path") or scope["path"].encode("utf-8")).decode("latin-1")
        query = scope.get("query_string", b"").decode("latin-1")
        incoming = Incoming(
            scope["method"], path + (f"?{query}" if query else ""), list(scope["headers"]), raw_body
        )
        try:
            return await relay(eng.forwarder, elsewhere, incoming)
        except Refused as refused:
            return aws_answer(ServiceUnavailable(refused.message).body(), status_of(refused))
    except SwfFault as fault:
        return aws_answer(fault.body(), fault.status)
    except StorageUnavailable as exc:
        log.warning("SWF: storage unavailable: %s", exc)
        down = ServiceUnavailable(
            "Storage failed during the commit: the change may have been made. Read the execution."
            if isinstance(exc, CommitUnknown | CommitInDoubt)
            else "Storage is unavailable; nothing was changed. Retry."
        )
        return aws_answer(down.body(), down.status)
    except Unavailable as refused:  # an execution's actor could not commit (storage, shutdown)
        log.warning("SWF: unavailable: %s", refused.message)
        return aws_answer(ServiceUnavailable(refused.message).body(), status_of(refused))
    except Exception:
        log.exception("SWF: unhandled error for %s", header(scope["headers"], b"x-amz-target"))
        failure = InternalFailure("Internal failure; see the server log.")
        return aws_answer(failure.body(), failure.status)


@blueprint.post("/")
@reads_query
async def swf() -> Response:
    raw_body = await request.get_data(cache=True, as_text=False)
    assert isinstance(raw_body, bytes)
    return quart_answer(await answer(engine(), keys(), request.scope, raw_body))


class SwfEdge:
    """ASGI wrapper: a plain `POST /` (no query string, one numeric `Content-Length` within the
    body limit, a JSON media type or none, no `Transfer-Encoding` or `Expect`) is answered here
    by `answer`, without Quart's request and response machinery; anything else goes to `app`
    (the Quart route above, or Quart's own refusal), which answers it as before.

    Quart's hooks do nothing for such a request that is not done here: the size and media-type
    refusals only apply to requests this wrapper passes on, and the body is read first (within
    `BODY_TIMEOUT_S`) as the Quart route does, so the connection stays in step."""

    def __init__(self, app: ASGIFramework, engine: Services, config: Any) -> None:
        self.app = app
        self.engine = engine
        self.config = config
        self.body_max = engine.settings.body_max_bytes

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if (
            scope["type"] == "http"
            and scope["path"] == "/"
            and scope["method"] == "POST"
            and not scope["query_string"]
        ):
            headers = plain_headers(scope["headers"])
            if headers is not None:
                length = int(headers[b"content-length"])
                kind = headers.get(b"content-type")
                if length <= self.body_max and (kind is None or is_json_media_type(kind.decode("latin-1"))):
                    await self._serve(scope, Body(receive, length), send)
                    return
        await self.app(scope, receive, send)

    async def _serve(self, scope: HTTPScope, body: Body, send: ASGISendCallable) -> None:
        try:
            raw_body = await body.read()
        except Disconnected:
            return  # nobody to answer
        except Refused as error:  # the body did not arrive in time: 408, and the connection closes
            status, _, extra = error_answer(error)
            late = aws_answer(swf_errors.refusal(status, error.message).body(), status)
            await send_answer(
                send, status, [*late.headers, *extra.items(), (b"connection", b"close")], late.body
            )
            return
        out = await answer(self.engine, key_book(self.config, self.engine), scope, raw_body)
        await send_answer(send, out.status, out.headers, out.body)


# ---------------------------------------------------------------------- admin: access keys


@blueprint.post("/admin/swf/credentials")
async def mint_credential() -> Response:
    await require_admin()
    check_query(set())
    await body(EmptyBody, empty_ok=True)
    record, secret = await keys().mint()
    return json_response(
        {"accessKeyId": record.access_key_id, "secretAccessKey": secret, "createdAt": ts(record.created_at)},
        201,
    )


@blueprint.get("/admin/swf/credentials")
async def list_credentials() -> Response:
    await require_admin()
    check_query(set())
    book = keys()
    stored = await book.store.list_swf_credentials()
    out: list[dict[str, Any]] = [
        {"accessKeyId": key_id, "source": "FOLIOT_SWF_CREDENTIALS", "createdAt": None}
        for key_id in book.presets
    ]
    out += [
        {"accessKeyId": c.access_key_id, "source": "admin", "createdAt": ts(c.created_at)} for c in stored
    ]
    return json_response({"credentials": out})


@blueprint.delete("/admin/swf/credentials/<access_key_id>")
async def revoke_credential(access_key_id: str) -> Response:
    await require_admin()
    await body(EmptyBody, empty_ok=True)
    book = keys()
    if access_key_id in book.presets:
        raise ApiConflict(
            "this key is preset with FOLIOT_SWF_CREDENTIALS; remove it there and restart", code="preset_key"
        )
    if not await book.revoke(access_key_id):
        raise NotFound(f"no live SWF access key {access_key_id!r}")
    return json_response({"accessKeyId": access_key_id, "revoked": True})


# ---------------------------------------------------------------------- Lambda functions

_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_LAMBDAS_LISTED = 1000


@attrs.frozen
class LambdaBody:
    url: str


def _region(region: str) -> str:
    if not sigv4.is_region(region):
        raise InvalidRequest("must be a region name: lower-case letters, digits and '-'", field="region")
    return region


def _function_name(name: str) -> str:
    if not _FUNCTION_NAME.fullmatch(name):
        raise InvalidRequest("must match ^[A-Za-z0-9_-]{1,64}$", field="name")
    return name


def _function_url(url: str) -> str:
    try:
        return check_http_url(url, query=True)
    except UrlError as exc:
        raise InvalidRequest(str(exc), field="url") from None


def _function_view(fn: SwfLambdaFunction) -> dict[str, Any]:
    return {
        "region": fn.region,
        "name": fn.name,
        "url": fn.url,
        "createdAt": ts(fn.created_at),
        "updatedAt": ts(fn.updated_at),
    }


@blueprint.put("/admin/lambda/<region>/<name>")
async def put_lambda(region: str, name: str) -> Response:
    """Register (201) or re-point (200) the function ScheduleLambdaFunction invokes by `name`
    in `region`: Foliot POSTs the input to `url`."""
    await require_admin()
    check_query(set())
    _region(region)
    _function_name(name)
    url = _function_url((await body(LambdaBody)).url)
    now = engine().clock.now()
    stored = await engine().store.swf_put_lambda(SwfLambdaFunction(region, name, url, now, now))
    created = stored.created_at == now and stored.updated_at == now
    return json_response(_function_view(stored), 201 if created else 200)


@blueprint.get("/admin/lambda")
async def list_lambdas() -> Response:
    await require_admin()
    check_query(set())
    found = await engine().store.swf_list_lambdas(None, MAX_LAMBDAS_LISTED)
    return json_response({"functions": [_function_view(f) for f in found]})


@blueprint.get("/admin/lambda/<region>")
async def list_region_lambdas(region: str) -> Response:
    await require_admin()
    check_query(set())
    found = await engine().store.swf_list_lambdas(_region(region), MAX_LAMBDAS_LISTED)
    return json_response({"functions": [_function_view(f) for f in found]})


@blueprint.get("/admin/lambda/<region>/<name>")
async def get_lambda(region: str, name: str) -> Response:
    await require_admin()
    check_query(set())
    found = await engine().store.swf_get_lambda(_region(region), _function_name(name))
    if found is None:
        raise NotFound(f"no Lambda function {name!r} in {region}")
    return json_response(_function_view(found))


@blueprint.delete("/admin/lambda/<region>/<name>")
async def delete_lambda(region: str, name: str) -> Response:
    await require_admin()
    check_query(set())
    await body(EmptyBody, empty_ok=True)
    if not await engine().store.swf_delete_lambda(_region(region), _function_name(name)):
        raise NotFound(f"no Lambda function {name!r} in {region}")
    return json_response({"region": region, "name": name, "deleted": True})


# ---------------------------------------------------------------------- parked executions


@blueprint.get("/admin/swf/parked")
@reads_query
async def list_parked() -> Response:
    """Executions parked after their actor crashed too often, by (region, runId); `after`
    (`<region>/<runId>` of the last one seen) pages on."""
    await require_admin()
    check_query({"after", "limit"})
    limit = query_int("limit", 100, 1, 1000)
    after: tuple[str, str] | None = None
    raw = request.args.get("after")
    if raw is not None:
        region, sep, run_id = raw.partition("/")
        if not sep or not region or not run_id:
            raise InvalidRequest("must be <region>/<runId>", field="after")
        after = (region, run_id)
    store = engine().store
    page = await store.swf_list_parked(after, limit)
    out: list[dict[str, Any]] = []
    for p in page:
        stored = await store.swf_load(p.region, p.run_id)
        ex = stored.execution if stored is not None else None
        out.append(
            {
                "region": p.region,
                "domain": ex.domain if ex is not None else None,
                "workflowId": ex.workflow_id if ex is not None else None,
                "runId": p.run_id,
                "reason": p.reason,
                "parkedAt": ts(p.parked_at),
            }
        )
    more = len(page) == limit
    return json_response({"parked": out, "next": f"{page[-1].region}/{page[-1].run_id}" if more else None})


@blueprint.post("/admin/swf/parked/<region>/<run_id>/resume")
async def resume_parked(region: str, run_id: str) -> Response:
    await require_admin()
    check_query(set())
    await body(EmptyBody, empty_ok=True)
    if not await engine().swf.kind.resume(_region(region), run_id):
        raise NotFound(f"no parked SWF execution {run_id!r} in {region}")
    return json_response({"region": region, "runId": run_id, "resumed": True})
