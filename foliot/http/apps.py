"""Apps and their credentials: API keys (hashed) and signing secrets (encrypted, rotated)."""

from __future__ import annotations

from typing import Any

import attrs
from quart import Blueprint, Response

from ..core import credentials
from ..core.errors import InvalidRequest, NotFound
from ..core.limits import effective, parse_overrides
from ..core.limits import view as limits_view
from ..core.workflow.duration import format_timestamp as ts
from ..core.workflow.flow import parse_rate_limit
from ..core.workflow.jsonconv import ValidationError
from ..storage.base import ApiKeyRecord, AppRecord, SecretRecord
from ..storage.flow import AppFlow
from .app import (
    EmptyBody,
    body,
    check_name,
    engine,
    json_response,
    parse,
    raw_json,
    require_admin,
    require_app,
)
from .urls import UrlError, check_http_url

blueprint = Blueprint("apps", __name__)

MAX_GRACE_SECONDS = 30 * 86_400


MAX_WEIGHT = 100


@attrs.frozen
class AppBody:
    handler_base_url: str
    description: str | None = None
    weight: Any = None  # 1..100 (issue 23); omitted: unchanged (1 for a new app)
    rate_limit: Any = None  # {limit, period} for all the app's pushes; null clears; omitted: unchanged


def _flow_of(
    raw: dict[str, Any], spec: AppBody, current: AppFlow | None, app: str, now: int
) -> AppFlow | None:
    """The app's flow settings after this PUT (validated: 400 naming the field), None when it
    sets none and has none."""
    weight = current.weight if current is not None else 1
    limit = current.rate_limit if current is not None else None
    period = current.rate_period_ms if current is not None else None
    if spec.weight is not None:
        value = spec.weight
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WEIGHT:
            raise InvalidRequest(f"must be an integer 1..{MAX_WEIGHT}", field="weight")
        weight = value
    if "rateLimit" in raw:
        if spec.rate_limit is None:
            limit = period = None
        else:
            try:
                parsed = parse_rate_limit(spec.rate_limit, "rateLimit", keyed=False)
            except ValidationError as exc:
                raise InvalidRequest(exc.message, field=exc.field) from None
            limit, period = parsed.limit, parsed.period_ms
    if current is None and weight == 1 and limit is None:
        return None
    return AppFlow(app, weight, limit, period, now)


def flow_view(flow: AppFlow | None) -> dict[str, Any]:
    if flow is None or flow.rate_limit is None or flow.rate_period_ms is None:
        rate = None
    else:
        rate = {"limit": flow.rate_limit, "periodMs": flow.rate_period_ms}
    return {"weight": flow.weight if flow is not None else 1, "rateLimit": rate}


@attrs.frozen
class RotateBody:
    grace_seconds: int = 86_400


def _check_url(url: str) -> str:
    try:
        return check_http_url(url, query=False).rstrip("/")
    except UrlError as exc:
        raise InvalidRequest(str(exc), field="handlerBaseUrl") from None


def _app_view(app: AppRecord, keys: list[ApiKeyRecord], secrets: list[SecretRecord]) -> dict[str, object]:
    return {
        "app": app.name,
        "handlerBaseUrl": app.handler_base_url,
        "description": app.description,
        "createdAt": ts(app.created_at),
        "updatedAt": ts(app.updated_at),
        "apiKeys": [{"keyId": k.key_id, "createdAt": ts(k.created_at)} for k in keys],
        "signingSecrets": [
            {"secretId": s.secret_id, "createdAt": ts(s.created_at), "expiresAt": ts(s.expires_at)}
            for s in secrets
        ],
    }


@blueprint.put("/apps/<app_name>")
async def put_app(app_name: str) -> Response:
    await require_admin()
    check_name(app_name, "app")
    raw = await raw_json()
    spec = parse(raw, AppBody)
    url = _check_url(spec.handler_base_url)
    if spec.description is not None and len(spec.description) > 1024:
        raise InvalidRequest("is longer than 1024 characters", field="description")
    eng = engine()
    now = eng.clock.now()
    current = await eng.store.get_app_flow(app_name)
    flow = _flow_of(raw, spec, current, app_name, now)  # validated before anything is stored
    key_id, api_key, key_hash = credentials.new_api_key()
    secret_id = credentials.new_id("sec_")
    signing_secret = credentials.new_signing_secret()
    created = await eng.store.create_app(
        AppRecord(app_name, url, spec.description, now, now),
        ApiKeyRecord(key_id, app_name, key_hash, now),
        SecretRecord(secret_id, app_name, eng.vault.encrypt(signing_secret), now, None),
    )
    if flow is not None and flow != current:
        await eng.store.put_app_flow(flow)
    eng.directory.forget_app(app_name)
    if created:
        return json_response(
            {
                "app": app_name,
                "handlerBaseUrl": url,
                "description": spec.description,
                "apiKey": api_key,
                "keyId": key_id,
                "signingSecret": signing_secret,
                "secretId": secret_id,
                **flow_view(flow),
            },
            201,
        )
    record, _ = await eng.store.put_app(app_name, url, spec.description, now)
    return await _full_view(record)


async def _full_view(record: AppRecord) -> Response:
    store = engine().store
    keys = await store.list_api_keys(record.name)
    secrets = await store.list_signing_secrets(record.name)
    now = engine().clock.now()
    live = [s for s in secrets if s.expires_at is None or s.expires_at > now]
    view = _app_view(record, keys, live)
    view.update(flow_view(await store.get_app_flow(record.name)))
    return json_response(view)


@blueprint.get("/apps/<app_name>")
async def get_app(app_name: str) -> Response:
    await require_app(app_name)
    record = await engine().store.get_app(app_name)
    assert record is not None
    return await _full_view(record)


@blueprint.post("/apps/<app_name>/api-keys")
async def mint_key(app_name: str) -> Response:
    await require_admin()
    await _existing(app_name)
    await body(EmptyBody, empty_ok=True)
    eng = engine()
    key_id, api_key, key_hash = credentials.new_api_key()
    await eng.store.add_api_key(ApiKeyRecord(key_id, app_name, key_hash, eng.clock.now()))
    return json_response({"keyId": key_id, "apiKey": api_key}, 201)


@blueprint.delete("/apps/<app_name>/api-keys/<key_id>")
async def revoke_key(app_name: str, key_id: str) -> Response:
    await require_admin()
    await body(EmptyBody, empty_ok=True)
    await _existing(app_name)
    eng = engine()
    revoked = await eng.store.revoke_api_key(app_name, key_id, eng.clock.now())
    eng.directory.forget_api_key(key_id)
    if not revoked:
        raise NotFound(f"no live key {key_id!r} for app {app_name!r}")
    return json_response({"keyId": key_id, "revoked": True})


@blueprint.post("/apps/<app_name>/signing-secrets")
async def rotate_secret(app_name: str) -> Response:
    await require_admin()
    await _existing(app_name)
    spec = await body(RotateBody, empty_ok=True)
    if not 0 <= spec.grace_seconds <= MAX_GRACE_SECONDS:
        raise InvalidRequest(f"must be 0..{MAX_GRACE_SECONDS}", field="graceSeconds")
    eng = engine()
    now = eng.clock.now()
    secret_id = credentials.new_id("sec_")
    signing_secret = credentials.new_signing_secret()
    record = SecretRecord(secret_id, app_name, eng.vault.encrypt(signing_secret), now, None)

    async def rotate() -> None:  # the cached signing keys go with the commit, client gone or not
        await eng.store.rotate_signing_secret(record, grace_until=now + spec.grace_seconds * 1000)
        eng.directory.forget_app(app_name)

    await eng.outlive_caller(rotate)
    return json_response({"secretId": secret_id, "signingSecret": signing_secret, "createdAt": ts(now)}, 201)


@blueprint.put("/admin/apps/<app_name>/limits")
async def put_limits(app_name: str) -> Response:
    """Set or remove (null) overrides of the app's limits (issue 37); members not given are
    unchanged. Every member is checked before anything is stored."""
    await require_admin()
    await _existing(app_name)
    raw = await raw_json()
    eng = engine()
    current = await eng.store.get_app_limits(app_name)
    after = parse_overrides(raw, current)
    if after != current:
        await eng.store.put_app_limits(app_name, after, eng.clock.now())
    eng.directory.forget_limits(app_name)
    return json_response({"app": app_name, "limits": limits_view(effective(eng.settings, after))})


@blueprint.get("/admin/apps/<app_name>/limits")
async def get_limits(app_name: str) -> Response:
    """The app's effective limits: each one's value, its setting, and whether it is the
    setting's (`default`) or the app's own (`override`)."""
    await require_admin()
    await _existing(app_name)
    eng = engine()
    overrides = await eng.store.get_app_limits(app_name)
    return json_response({"app": app_name, "limits": limits_view(effective(eng.settings, overrides))})


async def _existing(app_name: str) -> AppRecord:
    record = await engine().store.get_app(app_name) if len(app_name) <= 128 else None
    if record is None:
        raise NotFound(f"app {app_name!r} not found")
    return record
