"""Scoped operator tokens (admin only): `viewer` reads every app, `operator` also intervenes
on runs, `admin` may do what the admin token does. Stored hashed; shown once."""

from __future__ import annotations

import attrs
from quart import Blueprint, Response

from ..core import credentials
from ..core.errors import InvalidRequest, NotFound
from ..core.workflow.duration import format_timestamp as ts
from ..storage.console import ROLES, OperatorTokenRecord
from .app import EmptyBody, body, check_name, check_query, engine, json_response, require_admin

blueprint = Blueprint("operators", __name__)


@attrs.frozen
class TokenBody:
    role: str
    name: str | None = None


def token_view(record: OperatorTokenRecord) -> dict[str, object]:
    return {
        "tokenId": record.token_id,
        "name": record.name,
        "role": record.role,
        "createdAt": ts(record.created_at),
    }


@blueprint.post("/admin/operator-tokens")
async def create_token() -> Response:
    await require_admin()
    spec = await body(TokenBody)
    if spec.role not in ROLES:
        raise InvalidRequest(f"must be one of {list(ROLES)}", field="role")
    if spec.name is not None:
        check_name(spec.name, "name")
    token_id, token, secret_hash = credentials.new_operator_token()
    record = OperatorTokenRecord(token_id, spec.name, spec.role, secret_hash, engine().clock.now())
    await engine().store.add_operator_token(record)
    return json_response({**token_view(record), "token": token}, 201)


@blueprint.get("/admin/operator-tokens")
async def list_tokens() -> Response:
    await require_admin()
    check_query(set())
    return json_response({"tokens": [token_view(r) for r in await engine().store.list_operator_tokens()]})


@blueprint.delete("/admin/operator-tokens/<token_id>")
async def revoke_token(token_id: str) -> Response:
    await require_admin()
    await body(EmptyBody, empty_ok=True)
    if len(token_id) > 64 or not await engine().store.revoke_operator_token(token_id, engine().clock.now()):
        raise NotFound(f"operator token {token_id!r} not found (or already revoked)")
    await engine().store.end_console_sessions(engine().clock.now(), subject=token_id)
    return json_response({"tokenId": token_id, "revoked": True})
