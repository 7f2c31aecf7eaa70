"""The AWS SWF JSON 1.0 face: `POST /` with `X-Amz-Target: SimpleWorkflowService.<Action>`,
and the admin routes for SWF access keys (`/admin/swf/credentials`).

A request goes: SigV4 (`foliot.swf.sigv4`, the key's secret from `foliot.swf.keys`) → target →
JSON body → validation against the service model (`foliot.swf.shapes`) → the action. Every
refusal is an AWS fault (`{"__type", "message"}`, `application/x-amz-json-1.0`), never a
Foliot error body, so SDKs raise their own exception classes. Routes only translate; the
registry's logic is in `foliot.swf.registry`.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any
from urllib.parse import urlsplit

import attrs
from quart import Blueprint, Response, current_app, request

from ..cluster.placement import Elsewhere
from ..errors import ApiError, InvalidRequest, NotFound, StorageUnavailable
from ..errors import Conflict as ApiConflict
from ..storage.swf import SwfLambdaFunction
from ..swf import queries, registry, shapes, sigv4, writes
from ..swf.errors import (
    InternalFailure,
    NotImplementedFault,
    SerializationException,
    ServiceUnavailable,
    SwfFault,
    UnknownOperationException,
    UnrecognizedClientException,
)
from ..swf.keys import SwfKeys
from ..swf.registry import Action, Ctx
from ..workflow.duration import format_timestamp as ts
from ..workflow.payload import DepthError, loads
from .app import (
    EmptyBody,
    body,
    check_query,
    engine,
    json_response,
    query_int,
    reads_query,
    require_admin,
    settings,
)
from .forward import quart_incoming, quart_response, relay

log = logging.getLogger("foliot.swf")
blueprint = Blueprint("swf", __name__)

CONTENT_TYPE = "application/x-amz-json-1.0"
TARGET_PREFIX = "SimpleWorkflowService."
BODY_MAX_DEPTH = 64  # SWF payloads (input, result, details) are strings: shapes nest a few levels

# The actions served, by SWF action name. The model's other actions are validated, then answer
# NotImplemented; the execution actions join this table when they are built.
ACTIONS: dict[str, Action] = {**registry.ACTIONS, **queries.ACTIONS, **writes.ACTIONS}


def keys() -> SwfKeys:
    """This app's key book, made on first use from the engine's store and vault."""
    found = current_app.config.get("FOLIOT_SWF_KEYS")
    if found is None:
        eng = engine()
        found = SwfKeys(eng.store, eng.vault, eng.clock.now, dict(settings().swf_credentials))
        current_app.config["FOLIOT_SWF_KEYS"] = found
    assert isinstance(found, SwfKeys)
    return found


def aws_response(body: dict[str, Any], status: int = 200) -> Response:
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return Response(
        text, status=status, content_type=CONTENT_TYPE, headers={"x-amzn-RequestId": str(uuid.uuid4())}
    )


def signed_request(raw_body: bytes) -> sigv4.SignedRequest:
    scope = request.scope
    raw_path = scope.get("raw_path") or scope["path"].encode()
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
    return sigv4.SignedRequest(
        request.method,
        raw_path.decode("latin-1"),
        scope.get("query_string", b"").decode("latin-1"),
        headers,
        raw_body,
    )


async def authenticate(raw_body: bytes) -> str:
    """The SigV4-verified request's region; an AWS fault otherwise."""
    signed = signed_request(raw_body)
    auth = sigv4.parse_authorization(request.headers.get("Authorization"))
    date_text = sigv4.check_request(signed, auth, engine().clock.now())
    secret = await keys().secret(auth.access_key_id)
    if secret is None:
        raise UnrecognizedClientException("The security token included in the request is invalid.")
    sigv4.verify(signed, auth, secret, date_text)
    return auth.region


def target() -> str:
    raw = request.headers.get("X-Amz-Target", "")
    if not raw.startswith(TARGET_PREFIX):
        raise UnknownOperationException(
            f"X-Amz-Target must be {TARGET_PREFIX}<Action>, got {raw[:100]!r}"
            if raw
            else "Missing X-Amz-Target header: SimpleWorkflowService.<Action>"
        )
    action = raw[len(TARGET_PREFIX) :]
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


async def handle(raw_body: bytes) -> dict[str, Any]:
    region = await authenticate(raw_body)
    action = target()
    body = decode(raw_body)
    shapes.validate(action, body)
    run = ACTIONS.get(action)
    if run is None:
        raise NotImplementedFault(
            f"{action} is not implemented by this Foliot yet; docs/swf.md lists the actions served."
        )
    eng = engine()
    return await run(Ctx(eng.store, eng.clock.now(), region, eng), body)


@blueprint.post("/")
@reads_query
async def swf() -> Response:
    raw_body = await request.get_data(cache=True, as_text=False)
    assert isinstance(raw_body, bytes)
    try:
        return aws_response(await handle(raw_body))
    except Elsewhere as elsewhere:  # the execution lives on another node: its answer, as given
        try:
            relayed = await relay(engine().forwarder, elsewhere, await quart_incoming())
        except ApiError as refused:
            fault = ServiceUnavailable(refused.message)
            return aws_response(fault.body(), refused.status)
        return quart_response(relayed)
    except SwfFault as fault:
        return aws_response(fault.body(), fault.status)
    except StorageUnavailable as exc:
        log.warning("SWF: storage unavailable: %s", exc)
        down = ServiceUnavailable("Storage is unavailable; nothing was changed. Retry.")
        return aws_response(down.body(), down.status)
    except Exception:
        log.exception("SWF: unhandled error for %s", request.headers.get("X-Amz-Target"))
        failure = InternalFailure("Internal failure; see the server log.")
        return aws_response(failure.body(), failure.status)


# ---------------------------------------------------------------------- admin: access keys


@blueprint.post("/admin/swf/credentials")
async def mint_credential() -> Response:
    await require_admin()
    check_query(set())
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
    parts = urlsplit(url)
    if len(url) > 2048:
        raise InvalidRequest("is longer than 2048 characters", field="url")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise InvalidRequest("must not hold whitespace or control characters", field="url")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment:
        raise InvalidRequest("must be an http(s) URL with a host and no fragment", field="url")
    return url


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
    if not await engine().swf.resume(_region(region), run_id):
        raise NotFound(f"no parked SWF execution {run_id!r} in {region}")
    return json_response({"region": region, "runId": run_id, "resumed": True})
