"""The type catalog a transition needs, looked up in the registry before the machine runs.

`machine.transition` reads types only through a `Catalog`; the runtime builds one per message
from the types it names (`decisions.referenced_types`, plus the execution's own type for a
ContinueAsNewWorkflowExecution), so the machine stays pure.
"""

from __future__ import annotations

import json
from typing import Any

from ...core.swf import messages as m
from ...core.swf.decisions import parse_decisions, referenced_types
from ...core.swf.model import ActivityTypeInfo, Execution, TypeRef, WorkflowTypeInfo
from ...storage.swf import ACTIVITY, WORKFLOW, SwfRegistryStore, SwfType
from .registry import ACTIVITY_DEFAULTS, WORKFLOW_DEFAULTS


def _defaults(t: SwfType, members: tuple[str, ...]) -> list[Any]:
    """The registered defaults in the type info's field order (a task list by its name)."""
    config = json.loads(t.config)
    out = [config.get(member) for member in members]
    return [v.get("name") if isinstance(v, dict) else v for v in out]


def workflow_info(t: SwfType) -> WorkflowTypeInfo:
    return WorkflowTypeInfo(TypeRef(t.name, t.version), t.status, *_defaults(t, WORKFLOW_DEFAULTS))


def activity_info(t: SwfType) -> ActivityTypeInfo:
    return ActivityTypeInfo(TypeRef(t.name, t.version), t.status, *_defaults(t, ACTIVITY_DEFAULTS))


async def lookup(
    store: SwfRegistryStore,
    region: str,
    domain: str,
    workflow_types: set[tuple[str, str]],
    activity_types: set[tuple[str, str]],
) -> m.StaticCatalog:
    workflows = [await store.swf_get_type(region, domain, WORKFLOW, n, v) for n, v in sorted(workflow_types)]
    activities = [await store.swf_get_type(region, domain, ACTIVITY, n, v) for n, v in sorted(activity_types)]
    return m.StaticCatalog(
        [workflow_info(t) for t in workflows if t is not None],
        [activity_info(t) for t in activities if t is not None],
    )


async def for_message(store: SwfRegistryStore, region: str, ex: Execution, msg: Any) -> m.Catalog:
    """The types `msg` may need: those its decisions name (none for other messages)."""
    if not isinstance(msg, m.CompleteDecision):
        return m.EMPTY_CATALOG
    decisions = parse_decisions(msg.decisions)
    if not isinstance(decisions, tuple):
        return m.EMPTY_CATALOG  # the machine refuses the batch
    activity_types, workflow_types = referenced_types(decisions)
    for d in decisions:
        if d.type == "ContinueAsNewWorkflowExecution":
            version = d.get("workflowTypeVersion") or ex.workflow_type.version
            workflow_types.add((ex.workflow_type.name, version))
    if not activity_types and not workflow_types:
        return m.EMPTY_CATALOG
    return await lookup(store, region, ex.domain, workflow_types, activity_types)
