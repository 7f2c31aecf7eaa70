"""The SWF registry actions: domains (with tags) and workflow/activity types, per region.

Each action is `async def action(ctx, body) -> dict`, called with a body that already passed
`shapes.validate`; what the service model cannot say (name rules, durations, the 90-day
retention cap, tag characters) is checked here before anything is stored. State changes are
guarded in the store (`foliot.storage.swf`), so a fault answers what the store found.

Pages: `maximumPageSize` 0 or absent means 1000; `nextPageToken` is opaque (base64 of the
action, the filter and the last key returned) and is refused when replayed on another action,
region, domain or filter.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from ...core.swf import messages as m
from ...core.swf.errors import (
    DomainAlreadyExistsFault,
    DomainDeprecatedFault,
    LimitExceededFault,
    OperationNotPermittedFault,
    TooManyTagsFault,
    TypeAlreadyExistsFault,
    TypeDeprecatedFault,
    TypeNotDeprecatedFault,
    UnknownResourceFault,
    ValidationException,
)
from ...core.swf.faults import Fault
from ...core.swf.shapes import name_problem, refuse
from ...storage.base import decode_cursor, encode_cursor
from ...storage.swf import (
    ACTIVITY,
    DEPRECATED,
    REGISTERED,
    WORKFLOW,
    Insert,
    SwfDomain,
    SwfStore,
    SwfType,
)

if TYPE_CHECKING:
    from ...actors.pull import Pull

ACCOUNT_ID = "000000000000"
MAX_DOMAINS = 100  # per region, registered and deprecated together (AWS's quota)
MAX_TYPES = 10_000  # per domain and kind, registered and deprecated together (AWS's quota)
MAX_TAGS = 50
MAX_RETENTION_DAYS = 90
MAX_EXECUTION_SECONDS = 365 * 24 * 3600
DEFAULT_PAGE = 1000
_TAG_TEXT = re.compile(r"^[\w\s_.:/=+\-@]*$", re.UNICODE)
_DOMAIN_ARN = re.compile(r"^arn:aws:swf:([^:]+):([^:]+):/domain/(.+)$")

# The registered defaults, in the order of `WorkflowTypeInfo` and `ActivityTypeInfo` fields.
WORKFLOW_DEFAULTS = (
    "defaultTaskStartToCloseTimeout",
    "defaultExecutionStartToCloseTimeout",
    "defaultTaskList",
    "defaultTaskPriority",
    "defaultChildPolicy",
    "defaultLambdaRole",
)
ACTIVITY_DEFAULTS = (
    "defaultTaskStartToCloseTimeout",
    "defaultTaskHeartbeatTimeout",
    "defaultTaskList",
    "defaultTaskPriority",
    "defaultTaskScheduleToStartTimeout",
    "defaultTaskScheduleToCloseTimeout",
)


@attrs.frozen
class Ctx:
    """One authenticated request: the store, the time (epoch ms) and the caller's region;
    `runtime`, the engine, for the actions that go through an execution's actor."""

    store: SwfStore
    now: int
    region: str
    runtime: SwfRuntime | None = None


Action = Callable[[Ctx, dict[str, Any]], Awaitable[dict[str, Any]]]


class SwfRuntime(Protocol):
    """What the write actions need of the SWF kind (`service.Swf`): start an execution,
    message its actor, long-poll a task list."""

    async def start(self, region: str, request: m.StartRequest) -> m.Transition | Fault: ...

    async def ask(self, region: str, run_id: str, message: Any) -> tuple[m.Transition | Fault, Any]: ...

    async def poll(
        self, region: str, domain: str, kind: str, task_list: str, identity: str | None, wait_until: float
    ) -> tuple[m.Transition, Any] | None: ...

    def token_key(self) -> bytes: ...

    @property
    def pull(self) -> Pull | None:
        """Several nodes: the pull queues across them (`foliot.actors.pull`), else None."""
        ...


# ---------------------------------------------------------------------- pure checks


def seconds(ms: int | None) -> float | None:
    """A stored time as the JSON protocol's timestamp: epoch seconds."""
    return None if ms is None else ms / 1000


def domain_arn(region: str, name: str) -> str:
    return f"arn:aws:swf:{region}:{ACCOUNT_ID}:/domain/{name}"


def retention_problem(value: str) -> str | None:
    if value == "NONE" or (value.isascii() and value.isdigit() and int(value) <= MAX_RETENTION_DAYS):
        return None
    return (
        f"Value '{value}' at 'workflowExecutionRetentionPeriodInDays' failed to satisfy constraint: "
        f"Member must be NONE or a whole number of days from 0 to {MAX_RETENTION_DAYS}"
    )


def duration_problem(value: str, path: str, *, none_ok: bool = True, cap: int | None = None) -> str | None:
    if none_ok and value == "NONE":
        return None
    if value.isascii() and value.isdigit() and (cap is None or int(value) <= cap):
        return None
    allowed = "NONE or " if none_ok else ""
    limit = f" up to {cap}" if cap is not None else ""
    return (
        f"Value '{value}' at '{path}' failed to satisfy constraint: "
        f"Member must be {allowed}a whole number of seconds{limit}"
    )


def priority_problem(value: str, path: str) -> str | None:
    try:
        number = int(value) if re.fullmatch(r"[+-]?\d{1,10}", value) else None
    except ValueError:
        number = None
    if number is not None and -(2**31) <= number < 2**31:
        return None
    return (
        f"Value '{value}' at '{path}' failed to satisfy constraint: "
        "Member must be an integer from -2147483648 to 2147483647"
    )


def tag_problems(tags: list[dict[str, Any]], path: str = "tags") -> list[str]:
    found = []
    for i, tag in enumerate(tags, start=1):
        for part in ("key", "value"):
            text = tag.get(part)
            if isinstance(text, str) and not _TAG_TEXT.match(text):
                found.append(
                    f"Value '{text}' at '{path}.{i}.member.{part}' failed to satisfy constraint: Member may "
                    "only contain unicode letters, digits, whitespace, or _ . : / = + - @"
                )
    return found


def config_problems(kind: str, body: dict[str, Any]) -> list[str]:
    """A type registration's defaults: durations, priority, task-list name."""
    found: list[str] = []
    names = WORKFLOW_DEFAULTS if kind == WORKFLOW else ACTIVITY_DEFAULTS
    for member in names:
        value = body.get(member)
        if value is None:
            continue
        problem: str | None = None
        if member == "defaultExecutionStartToCloseTimeout":
            problem = duration_problem(value, member, none_ok=False, cap=MAX_EXECUTION_SECONDS)
        elif member.endswith("Timeout"):
            problem = duration_problem(value, member)
        elif member == "defaultTaskPriority":
            problem = priority_problem(value, member)
        elif member == "defaultTaskList":
            problem = name_problem(value["name"], f"{member}.name")
        if problem:
            found.append(problem)
    return found


def page_size(body: dict[str, Any]) -> int:
    size = body.get("maximumPageSize") or 0
    return size if size > 0 else DEFAULT_PAGE


def next_token(scope: list[Any], key: list[Any]) -> str:
    return encode_cursor(scope, key)


def read_token(body: dict[str, Any], scope: list[Any], arity: int) -> list[Any] | None:
    """The last key of the previous page, or None on a first call; a token made for another
    action, region or filter is a ValidationException."""
    token = body.get("nextPageToken")
    if token is None:
        return None
    parts = decode_cursor(token, 2)
    if parts is None or parts[0] != scope or not isinstance(parts[1], list) or len(parts[1]) != arity:
        raise ValidationException(
            "Invalid nextPageToken: it was not returned by this action with these arguments"
        )
    if not all(isinstance(p, str) for p in parts[1]):
        raise ValidationException("Invalid nextPageToken")
    return parts[1]


# ---------------------------------------------------------------------- domains


def domain_info(domain: SwfDomain) -> dict[str, Any]:
    info: dict[str, Any] = {"name": domain.name, "status": domain.status}
    if domain.description is not None:
        info["description"] = domain.description
    info["arn"] = domain_arn(domain.region, domain.name)
    return info


async def domain_of(ctx: Ctx, name: str) -> SwfDomain:
    """The caller's domain `name`; `UnknownResourceFault` when the region has none."""
    found = await ctx.store.swf_get_domain(ctx.region, name)
    if found is None:
        raise UnknownResourceFault(f"Unknown domain: {name}")
    return found


# Domains known to exist, per store. SWF never deletes a domain (it is deprecated, and the record
# stays), so "it exists" never goes stale: a poll, which needs no more than that, asks the store
# once per domain instead of once per call.
_EXISTING: weakref.WeakKeyDictionary[Any, set[tuple[str, str]]] = weakref.WeakKeyDictionary()


async def domain_exists(ctx: Ctx, name: str) -> None:
    """`UnknownResourceFault` unless the caller's region has a domain `name` (in any status)."""
    known = _EXISTING.setdefault(ctx.store, set())
    if (ctx.region, name) not in known:
        await domain_of(ctx, name)
        known.add((ctx.region, name))


def _tag_list(tags: list[dict[str, Any]]) -> list[list[str]]:
    """Tags in order, a repeated key keeping its first place and its last value."""
    merged: dict[str, str] = {}
    for tag in tags:
        merged[tag["key"]] = tag.get("value") or ""
    return [[k, v] for k, v in merged.items()]


async def register_domain(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    tags = body.get("tags") or []
    problems = [
        p
        for p in (
            name_problem(body["name"], "name"),
            retention_problem(body["workflowExecutionRetentionPeriodInDays"]),
        )
        if p
    ]
    refuse(problems + tag_problems(tags))
    merged = _tag_list(tags)
    if len(merged) > MAX_TAGS:
        raise TooManyTagsFault(f"A domain may carry at most {MAX_TAGS} tags; {len(merged)} were given.")
    domain = SwfDomain(
        region=ctx.region,
        name=body["name"],
        status=REGISTERED,
        description=body.get("description"),
        retention_days=body["workflowExecutionRetentionPeriodInDays"],
        tags=json.dumps(merged, ensure_ascii=False),
        created_at=ctx.now,
    )
    outcome = await ctx.store.swf_insert_domain(domain, MAX_DOMAINS)
    if outcome is Insert.EXISTS:
        raise DomainAlreadyExistsFault(body["name"])
    if outcome is Insert.LIMIT:
        raise LimitExceededFault(
            f"The region {ctx.region} already holds {MAX_DOMAINS} domains (registered and deprecated)."
        )
    return {}


async def describe_domain(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    domain = await domain_of(ctx, body["name"])
    return {
        "domainInfo": domain_info(domain),
        "configuration": {"workflowExecutionRetentionPeriodInDays": domain.retention_days},
    }


async def list_domains(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    status, reverse = body["registrationStatus"], bool(body.get("reverseOrder"))
    scope = ["ListDomains", ctx.region, status, reverse]
    after = read_token(body, scope, 1)
    size = page_size(body)
    rows = await ctx.store.swf_list_domains(
        ctx.region, status, after[0] if after else None, reverse, size + 1
    )
    out: dict[str, Any] = {"domainInfos": [domain_info(d) for d in rows[:size]]}
    if len(rows) > size:
        out["nextPageToken"] = next_token(scope, [rows[size - 1].name])
    return out


async def _set_domain_status(ctx: Ctx, name: str, status: str) -> None:
    if await ctx.store.swf_set_domain_status(ctx.region, name, status, ctx.now):
        return
    await domain_of(ctx, name)  # unknown: UnknownResourceFault
    if status == DEPRECATED:
        raise DomainDeprecatedFault(name)
    raise DomainAlreadyExistsFault(name)


async def deprecate_domain(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    await _set_domain_status(ctx, body["name"], DEPRECATED)
    return {}


async def undeprecate_domain(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    await _set_domain_status(ctx, body["name"], REGISTERED)
    return {}


async def _arn_domain(ctx: Ctx, arn: str) -> SwfDomain:
    """The domain an ARN names in the caller's region and account."""
    match = _DOMAIN_ARN.match(arn)
    if match is None:
        raise ValidationException(
            f"Value '{arn}' at 'resourceArn' failed to satisfy constraint: Member must be a domain ARN "
            "arn:aws:swf:<region>:<account>:/domain/<name>"
        )
    region, account, name = match.groups()
    if account != ACCOUNT_ID:
        raise OperationNotPermittedFault(f"Resources of account {account} are not reachable with this key.")
    if region != ctx.region:
        raise UnknownResourceFault(f"Unknown resource: {arn} (this request is signed for {ctx.region})")
    return await domain_of(ctx, name)


async def list_tags_for_resource(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    domain = await _arn_domain(ctx, body["resourceArn"])
    return {"tags": [{"key": k, "value": v} for k, v in json.loads(domain.tags)]}


async def _edit_tags(ctx: Ctx, arn: str, edit: Callable[[list[list[str]]], list[list[str]]]) -> None:
    """Read, edit, compare-and-set; a concurrent edit makes it start over (bounded)."""
    for _ in range(20):
        domain = await _arn_domain(ctx, arn)
        new = edit(json.loads(domain.tags))
        text = json.dumps(new, ensure_ascii=False)
        if text == domain.tags or await ctx.store.swf_replace_domain_tags(
            ctx.region, domain.name, domain.tags, text
        ):
            return
    raise LimitExceededFault("The tags of this domain are being changed too often; try again.")


async def tag_resource(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    tags = body["tags"]
    refuse(tag_problems(tags))

    def add(current: list[list[str]]) -> list[list[str]]:
        merged = _tag_list([{"key": k, "value": v} for k, v in current] + tags)
        if len(merged) > MAX_TAGS:
            raise TooManyTagsFault(
                f"A domain may carry at most {MAX_TAGS} tags; this would make {len(merged)}."
            )
        return merged

    await _edit_tags(ctx, body["resourceArn"], add)
    return {}


async def untag_resource(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    gone = set(body["tagKeys"])
    await _edit_tags(ctx, body["resourceArn"], lambda current: [t for t in current if t[0] not in gone])
    return {}


# ---------------------------------------------------------------------- types


def _type_key(kind: str) -> str:
    return "workflowType" if kind == WORKFLOW else "activityType"


def type_info(t: SwfType) -> dict[str, Any]:
    info: dict[str, Any] = {
        _type_key(t.kind): {"name": t.name, "version": t.version},
        "status": t.status,
    }
    if t.description is not None:
        info["description"] = t.description
    info["creationDate"] = seconds(t.created_at)
    if t.deprecated_at is not None:
        info["deprecationDate"] = seconds(t.deprecated_at)
    return info


async def _type(ctx: Ctx, kind: str, body: dict[str, Any]) -> SwfType:
    ref = body[_type_key(kind)]
    found = await ctx.store.swf_get_type(ctx.region, body["domain"], kind, ref["name"], ref["version"])
    if found is None:
        await domain_of(ctx, body["domain"])
        noun = "WorkflowType" if kind == WORKFLOW else "ActivityType"
        raise UnknownResourceFault(f"Unknown type: {noun}=[name={ref['name']}, version={ref['version']}]")
    return found


def register_type(kind: str) -> Action:
    async def action(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
        found = [
            p for p in (name_problem(body["name"], "name"), name_problem(body["version"], "version")) if p
        ]
        refuse(found + config_problems(kind, body))
        names = WORKFLOW_DEFAULTS if kind == WORKFLOW else ACTIVITY_DEFAULTS
        config = {k: body[k] for k in names if body.get(k) is not None}
        record = SwfType(
            region=ctx.region,
            domain=body["domain"],
            kind=kind,
            name=body["name"],
            version=body["version"],
            status=REGISTERED,
            description=body.get("description"),
            config=json.dumps(config, ensure_ascii=False, sort_keys=True),
            created_at=ctx.now,
        )
        outcome = await ctx.store.swf_insert_type(record, MAX_TYPES)
        noun = "WorkflowType" if kind == WORKFLOW else "ActivityType"
        if outcome is Insert.NO_DOMAIN:
            raise UnknownResourceFault(f"Unknown domain: {body['domain']}")
        if outcome is Insert.DOMAIN_DEPRECATED:
            raise DomainDeprecatedFault(body["domain"])
        if outcome is Insert.EXISTS:
            raise TypeAlreadyExistsFault(f"{noun}=[name={body['name']}, version={body['version']}]")
        if outcome is Insert.LIMIT:
            raise LimitExceededFault(
                f"The domain {body['domain']} already holds {MAX_TYPES} {kind} types"
                " (registered and deprecated)."
            )
        return {}

    return action


def describe_type(kind: str) -> Action:
    async def action(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
        found = await _type(ctx, kind, body)
        return {"typeInfo": type_info(found), "configuration": json.loads(found.config)}

    return action


def list_types(kind: str) -> Action:
    async def action(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
        status, reverse, name = body["registrationStatus"], bool(body.get("reverseOrder")), body.get("name")
        scope = [f"List{kind}Types", ctx.region, body["domain"], status, name, reverse]
        after = read_token(body, scope, 2)
        await domain_of(ctx, body["domain"])
        size = page_size(body)
        rows = await ctx.store.swf_list_types(
            ctx.region,
            body["domain"],
            kind,
            status,
            name,
            (after[0], after[1]) if after else None,
            reverse,
            size + 1,
        )
        out: dict[str, Any] = {"typeInfos": [type_info(t) for t in rows[:size]]}
        if len(rows) > size:
            last = rows[size - 1]
            out["nextPageToken"] = next_token(scope, [last.name, last.version])
        return out

    return action


def set_type_status(kind: str, status: str) -> Action:
    async def action(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
        ref = body[_type_key(kind)]
        if await ctx.store.swf_set_type_status(
            ctx.region, body["domain"], kind, ref["name"], ref["version"], status, ctx.now
        ):
            return {}
        await _type(ctx, kind, body)  # unknown: UnknownResourceFault
        noun = "WorkflowType" if kind == WORKFLOW else "ActivityType"
        text = f"{noun}=[name={ref['name']}, version={ref['version']}]"
        if status == DEPRECATED:
            raise TypeDeprecatedFault(text)
        raise TypeAlreadyExistsFault(text)

    return action


def delete_type(kind: str) -> Action:
    async def action(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
        ref = body[_type_key(kind)]
        if await ctx.store.swf_delete_type(ctx.region, body["domain"], kind, ref["name"], ref["version"]):
            return {}
        await _type(ctx, kind, body)  # unknown: UnknownResourceFault
        noun = "WorkflowType" if kind == WORKFLOW else "ActivityType"
        raise TypeNotDeprecatedFault(f"{noun}=[name={ref['name']}, version={ref['version']}]")

    return action


ACTIONS: dict[str, Action] = {
    "RegisterDomain": register_domain,
    "DescribeDomain": describe_domain,
    "ListDomains": list_domains,
    "DeprecateDomain": deprecate_domain,
    "UndeprecateDomain": undeprecate_domain,
    "TagResource": tag_resource,
    "UntagResource": untag_resource,
    "ListTagsForResource": list_tags_for_resource,
    "RegisterWorkflowType": register_type(WORKFLOW),
    "DescribeWorkflowType": describe_type(WORKFLOW),
    "ListWorkflowTypes": list_types(WORKFLOW),
    "DeprecateWorkflowType": set_type_status(WORKFLOW, DEPRECATED),
    "UndeprecateWorkflowType": set_type_status(WORKFLOW, REGISTERED),
    "DeleteWorkflowType": delete_type(WORKFLOW),
    "RegisterActivityType": register_type(ACTIVITY),
    "DescribeActivityType": describe_type(ACTIVITY),
    "ListActivityTypes": list_types(ACTIVITY),
    "DeprecateActivityType": set_type_status(ACTIVITY, DEPRECATED),
    "UndeprecateActivityType": set_type_status(ACTIVITY, REGISTERED),
    "DeleteActivityType": delete_type(ACTIVITY),
}
"""The registry's actions, by SWF action name."""
