"""What SWF needs from a store: the registry (access keys, domains, types) and the executions
(documents, history events, pending tasks), all per region.

Both backends implement `SwfRegistryStore` and `SwfExecutionStore` (`swf_sqlite.py`,
`swf_postgres.py`) and pass one contract suite. Every method is one transaction; writes that
depend on what is there (an insert under a limit, a status change, a tag edit, an execution's
version, the one open run of a workflow id, a task claim) are guarded inside that transaction
and answer what they found, so two callers can never both win.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from typing import Any, Final, Protocol

import attrs

from ..core.swf.events import HistoryEvent
from ..core.swf.model import Execution, execution_from_dict, execution_to_dict
from .fence import Fence

REGISTERED = "REGISTERED"
DEPRECATED = "DEPRECATED"
WORKFLOW = "workflow"
ACTIVITY = "activity"


@attrs.frozen
class SwfCredential:
    access_key_id: str
    secret_enc: str
    created_at: int
    revoked_at: int | None = None


@attrs.frozen
class SwfDomain:
    region: str
    name: str
    status: str
    description: str | None
    retention_days: str
    tags: str  # JSON: [[key, value], ...] in the order they were first set
    created_at: int
    deprecated_at: int | None = None


@attrs.frozen
class SwfType:
    region: str
    domain: str
    kind: str  # WORKFLOW or ACTIVITY
    name: str
    version: str
    status: str
    description: str | None
    config: str  # JSON: the registered defaults, as sent
    created_at: int
    deprecated_at: int | None = None


class Insert(enum.Enum):
    """The outcome of a guarded registration."""

    OK = "ok"
    EXISTS = "exists"
    LIMIT = "limit"
    NO_DOMAIN = "no_domain"
    DOMAIN_DEPRECATED = "domain_deprecated"


class SwfRegistryStore(Protocol):
    # access keys
    async def add_swf_credential(self, credential: SwfCredential) -> None: ...

    async def get_swf_credential(self, access_key_id: str) -> SwfCredential | None: ...

    async def list_swf_credentials(self) -> list[SwfCredential]:
        """Live (unrevoked) keys, oldest first."""
        ...

    async def revoke_swf_credential(self, access_key_id: str, now: int) -> bool: ...

    # domains
    async def swf_insert_domain(self, domain: SwfDomain, max_domains: int) -> Insert:
        """OK, EXISTS (registered or deprecated), or LIMIT (the region holds `max_domains`)."""
        ...

    async def swf_get_domain(self, region: str, name: str) -> SwfDomain | None: ...

    async def swf_list_domains(
        self, region: str, status: str, after: str | None, reverse: bool, limit: int
    ) -> list[SwfDomain]:
        """Domains with `status`, by name (descending when `reverse`), strictly past `after`."""
        ...

    async def swf_set_domain_status(self, region: str, name: str, status: str, now: int) -> bool:
        """Move the domain to `status` from the other one; False when it was not in the other."""
        ...

    async def swf_replace_domain_tags(self, region: str, name: str, expected: str, tags: str) -> bool:
        """Set the tags where they still equal `expected` (compare-and-set)."""
        ...

    # types
    async def swf_insert_type(self, type_: SwfType, max_types: int) -> Insert:
        """OK, EXISTS, LIMIT (`max_types` of this kind in the domain), NO_DOMAIN or
        DOMAIN_DEPRECATED, checked in the same transaction as the insert."""
        ...

    async def swf_get_type(
        self, region: str, domain: str, kind: str, name: str, version: str
    ) -> SwfType | None: ...

    async def swf_list_types(
        self,
        region: str,
        domain: str,
        kind: str,
        status: str,
        name: str | None,
        after: tuple[str, str] | None,
        reverse: bool,
        limit: int,
    ) -> list[SwfType]:
        """Types by (name, version) (descending when `reverse`), strictly past `after`."""
        ...

    async def swf_set_type_status(
        self, region: str, domain: str, kind: str, name: str, version: str, status: str, now: int
    ) -> bool: ...

    async def swf_delete_type(self, region: str, domain: str, kind: str, name: str, version: str) -> bool:
        """Delete a DEPRECATED type; False when there is none in that state."""
        ...


# ---------------------------------------------------------------------- executions

# An SWF execution's actor id (and the owner of its rows in `timers`, of kind "swf"); run ids
# never contain ":", nor do region names.
SWF_ACTOR_PREFIX: Final = "swf:"


def swf_actor_id(region: str, run_id: str) -> str:
    return f"{SWF_ACTOR_PREFIX}{region}:{run_id}"


DECISION: Final = "decision"
ACTIVITY_TASK: Final = "activity"
# The constraint a `UniqueViolation` names when a start finds the workflow id open already.
SWF_OPEN_WORKFLOW_UNIQUE: Final = "swf_executions_open_workflow"


@attrs.frozen
class SwfStored:
    """An execution as stored: its region, document and version (the write guard)."""

    region: str
    execution: Execution
    version: int


@attrs.frozen
class SwfUnit:
    """Everything one SWF transition changes, committed atomically by `swf_commit`.

    - The document: inserted when `expected_version` is None (a start: refused with
      `UniqueViolation(SWF_OPEN_WORKFLOW_UNIQUE)` when the domain holds an open execution with
      this workflow id), else updated where the stored version still equals `expected_version`
      (`StaleWrite` otherwise). The stored version becomes `version`.
    - `events`: appended; their ids must run on without a gap to `execution.last_event_id`
      (checked here; the store's key refuses an id written twice).
    - The pending task rows are derived from the document (`pending_tasks`): rows no longer
      pending (started, timed out, canceled, closed) are deleted, new ones inserted. Nobody
      passes task rows, so they can never disagree with the document.
    - The listing rows (`facets`) are written at the start and closed with the execution.
    - `continued`: ContinueAsNewWorkflowExecution's next run (an insert), committed in the
      same transaction after this unit closed the current one.
    - `owed`: the close owes effects to other executions; an `swf_owed` row remembers it until
      `swf_settle_owed` (start-up performs them again while it is there).
    """

    region: str
    execution: Execution
    expected_version: int | None
    events: tuple[HistoryEvent, ...] = ()
    continued: SwfUnit | None = None
    # The execution closed owing effects to others (a child policy, its parent's notice): a
    # `swf_owed` row is written with the close and deleted once they are acknowledged.
    owed: bool = False
    # The leases it is written under (its own partition's and a continued run's), when several
    # nodes share the database (`foliot.storage.fence`).
    fences: tuple[Fence, ...] = ()

    def __attrs_post_init__(self) -> None:
        last = self.execution.last_event_id
        ids = [e.event_id for e in self.events]
        if ids != list(range(last - len(ids) + 1, last + 1)):
            raise ValueError(f"events {ids} do not end contiguously at last_event_id {last}")
        if self.continued is not None and self.continued.expected_version is not None:
            raise ValueError("a continued run is a new execution (expected_version None)")

    @property
    def version(self) -> int:
        return 1 if self.expected_version is None else self.expected_version + 1


@attrs.frozen
class SwfTask:
    """A pending task: scheduled and not yet started (decision or activity), one row each.

    Polls claim these rows (`swf_claim_task`), CountPending* counts them, and they survive a
    restart. Higher `priority` first (SWF's `taskPriority`, 0 when unset), then the oldest."""

    region: str
    domain: str
    kind: str  # DECISION or ACTIVITY_TASK
    task_list: str
    workflow_id: str
    run_id: str
    scheduled_event_id: int
    priority: int
    scheduled_at: int
    claimed_until: int | None = None


@attrs.frozen
class SwfLambdaFunction:
    """A function ScheduleLambdaFunction may invoke: its name in a region and the URL Foliot
    POSTs the input to (registered with `PUT /admin/lambda/{region}/{name}`)."""

    region: str
    name: str
    url: str
    created_at: int
    updated_at: int


@attrs.frozen
class SwfParked:
    """An execution parked after its actor crashed too often; an operator resumes it."""

    region: str
    run_id: str
    reason: str
    parked_at: int


@attrs.frozen
class SwfQuery:
    """List/Count{Open,Closed}WorkflowExecutions: one domain, open or closed, a time window on
    the start time (or the close time, `by_close`, closed only), at most one filter `facet`
    (see `facets`; "" is every execution). Newest first unless `reverse`."""

    region: str
    domain: str
    open: bool
    oldest: int  # epoch ms, inclusive
    latest: int | None = None  # epoch ms, inclusive
    by_close: bool = False
    facet: str = ""
    reverse: bool = False


# A listing position: (start or close time, workflow id, run id) of the last row returned.
SwfCursor = tuple[int, str, str]

_FACET_SEP: Final = "\x1f"  # names, ids and types never hold control characters


def facet_type(name: str, version: str | None = None) -> str:
    return f"t{_FACET_SEP}{name}" if version is None else f"v{_FACET_SEP}{name}{_FACET_SEP}{version}"


def facet_tag(tag: str) -> str:
    return f"g{_FACET_SEP}{tag}"


def facet_workflow_id(workflow_id: str) -> str:
    return f"w{_FACET_SEP}{workflow_id}"


def facet_close_status(status: str) -> str:
    return f"s{_FACET_SEP}{status}"


def facets(ex: Execution) -> list[str]:
    """The listing keys an execution is found under: every execution (""), its type by name and
    by name and version, each tag, its workflow id, and once closed its close status. Each key
    is an index range ordered by time, so every filter is one keyset-paged index scan."""
    keys = [
        "",
        facet_type(ex.workflow_type.name),
        facet_type(ex.workflow_type.name, ex.workflow_type.version),
        facet_workflow_id(ex.workflow_id),
    ]
    keys += [facet_tag(tag) for tag in dict.fromkeys(ex.tags)]
    if ex.close_status is not None:
        keys.append(facet_close_status(ex.close_status))
    return keys


def _priority(text: str | None) -> int:
    return int(text) if text is not None else 0


def pending_tasks(region: str, ex: Execution) -> list[SwfTask]:
    """The task rows an execution's document implies: its decision task and each activity
    task that is scheduled and not started; none once closed. The same tasks as
    `history.pending_offers`."""
    if not ex.is_open:
        return []
    out: list[SwfTask] = []
    task = ex.decision
    if task is not None and task.started_event_id is None:
        out.append(
            SwfTask(
                region,
                ex.domain,
                DECISION,
                task.task_list,
                ex.workflow_id,
                ex.run_id,
                task.scheduled_event_id,
                _priority(ex.config.task_priority),
                task.scheduled_at,
            )
        )
    for act in ex.activities:
        if act.started_event_id is None:
            out.append(
                SwfTask(
                    region,
                    ex.domain,
                    ACTIVITY_TASK,
                    act.task_list,
                    ex.workflow_id,
                    ex.run_id,
                    act.scheduled_event_id,
                    _priority(act.task_priority),
                    act.scheduled_at,
                )
            )
    return out


def retention_ms(retention_days: str) -> int:
    """A domain's `workflowExecutionRetentionPeriodInDays` as a period: NONE and 0 keep a
    closed execution no time at all (AWS deletes it as soon as it closes)."""
    days = 0 if retention_days == "NONE" else int(retention_days)
    return days * 86_400_000


class SwfExecutionStore(Protocol):
    """Executions, their history and pending tasks. Keys: an execution is (region, run id) —
    run ids are unique in a region (the runtime makes them) — and belongs to a domain and a
    workflow id; at most one execution per (region, domain, workflow id) is open."""

    async def swf_commit(self, unit: SwfUnit) -> None:
        """Commit one transition (see `SwfUnit`) in one transaction: all of it or nothing.
        `StaleWrite` when the version moved (reload and retry), `UniqueViolation(
        SWF_OPEN_WORKFLOW_UNIQUE)` when a start (or `continued`) finds its workflow id open."""
        ...

    async def swf_load(self, region: str, run_id: str) -> SwfStored | None:
        """The execution with this run id (open or closed)."""
        ...

    async def swf_find(
        self, region: str, domain: str, workflow_id: str, run_id: str | None = None
    ) -> SwfStored | None:
        """The execution (domain, workflow id, run id); with `run_id` None, the open one."""
        ...

    async def swf_open_executions(self, after: tuple[str, str] | None, limit: int) -> list[SwfStored]:
        """Open executions of every region by (region, run id), strictly past `after`:
        rehydration pages through them after a restart."""
        ...

    async def swf_events(
        self, region: str, run_id: str, after: int | None, reverse: bool, limit: int
    ) -> list[HistoryEvent]:
        """History events by id (descending when `reverse`), strictly past event id `after`."""
        ...

    async def swf_list_executions(
        self, query: SwfQuery, after: SwfCursor | None, limit: int
    ) -> list[SwfStored]:
        """Executions matching `query`, newest first (oldest first when `query.reverse`) by
        start time (close time with `by_close`), then workflow id and run id; strictly past
        `after`. One index range scan: the work is the page, not the table."""
        ...

    async def swf_count_executions(self, query: SwfQuery, cap: int) -> int:
        """How many executions match `query`, counting no further than `cap` (so the work is
        bounded: a result equal to `cap` means "at least")."""
        ...

    async def swf_claim_task(
        self, region: str, domain: str, kind: str, task_list: str, now: int, lease_ms: int
    ) -> SwfTask | None:
        """Claim the next pending task of `kind` on a task list (highest priority, then oldest
        scheduled) that nobody holds (`claimed_until` unset or past): a guarded update sets
        `claimed_until = now + lease_ms` and returns the row, so concurrent pollers never get
        the same task. The claimant then asks the execution to start it; that unit deletes the
        row (the task is no longer pending). A claimant that gives up releases it
        (`swf_release_task`); one that dies lets the lease run out."""
        ...

    async def swf_release_task(self, region: str, run_id: str, scheduled_event_id: int) -> None:
        """Give a claimed task back at once (the poller went away before starting it)."""
        ...

    async def swf_count_pending(self, region: str, domain: str, kind: str, task_list: str, cap: int) -> int:
        """Pending tasks of `kind` on a task list (claimed or not), counting no further than `cap`."""
        ...

    async def swf_prune_closed(self, now: int, limit: int) -> int:
        """Delete executions closed longer ago than their domain's retention
        (`retention_ms`), with their events, tasks and listing rows: at most `limit`
        executions, fewer when their histories are long (`base.prune_pick`); never one that
        still owes closing effects (`swf_owed`). Returns how many."""
        ...

    # closed executions owing effects (`SwfUnit.owed`)
    async def swf_owed_executions(self, after: tuple[str, str] | None, limit: int) -> list[SwfStored]:
        """Closed executions with an `swf_owed` row, by (region, run id) past `after`."""
        ...

    async def swf_settle_owed(self, region: str, run_id: str) -> None:
        """Every closing effect of the execution was acknowledged: forget the row."""
        ...

    # Lambda functions (admin registry)
    async def swf_put_lambda(self, function: SwfLambdaFunction) -> SwfLambdaFunction:
        """Register or re-point a function; keeps `created_at` of an existing one. Returns the
        stored record (its `created_at == updated_at` when it was created)."""
        ...

    async def swf_get_lambda(self, region: str, name: str) -> SwfLambdaFunction | None: ...

    async def swf_list_lambdas(self, region: str | None, limit: int) -> list[SwfLambdaFunction]:
        """Functions of one region (or all), by (region, name), at most `limit`."""
        ...

    async def swf_delete_lambda(self, region: str, name: str) -> bool: ...

    # parked executions (an actor that crashed too often)
    async def swf_park(self, parked: SwfParked) -> None:
        """Park the execution (a second park replaces the reason and time)."""
        ...

    async def swf_get_parked(self, region: str, run_id: str) -> SwfParked | None: ...

    async def swf_list_parked(self, after: tuple[str, str] | None, limit: int) -> list[SwfParked]:
        """Parked executions by (region, run id) past `after`."""
        ...

    async def swf_unpark(self, region: str, run_id: str) -> bool:
        """False when it was not parked."""
        ...

    async def swf_counts(self) -> dict[str, int]:
        """`{"open": open executions, "parked": parked ones}` of every region (for /metrics)."""
        ...


class SwfStore(SwfRegistryStore, SwfExecutionStore, Protocol):
    """Everything SWF needs from a store (both backends are one)."""


def other_status(status: str) -> str:
    return DEPRECATED if status == REGISTERED else REGISTERED


def attrs_tuple(record: Any) -> tuple[Any, ...]:
    """A record's fields in declaration order: the column order of both backends' INSERTs."""
    return attrs.astuple(record, recurse=False)


# ---------------------------------------------------------------------- rows (both backends)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def execution_row(region: str, ex: Execution, version: int) -> tuple[Any, ...]:
    """(region, run_id, domain, workflow_id, is_open, version, last_event_id, started_at,
    closed_at, doc)"""
    return (
        region,
        ex.run_id,
        ex.domain,
        ex.workflow_id,
        1 if ex.is_open else 0,
        version,
        ex.last_event_id,
        ex.started_at,
        ex.closed_at,
        _json(execution_to_dict(ex)),
    )


def stored_execution(region: str, version: int, doc: str) -> SwfStored:
    return SwfStored(region, execution_from_dict(json.loads(doc)), version)


def event_rows(region: str, run_id: str, events: Sequence[HistoryEvent]) -> list[tuple[Any, ...]]:
    """(region, run_id, event_id, at, type, attrs)"""
    return [(region, run_id, e.event_id, e.timestamp, e.event_type, _json(e.attributes)) for e in events]


def event_from_row(event_id: int, at: int, type_: str, attributes: str) -> HistoryEvent:
    return HistoryEvent(event_id, at, type_, json.loads(attributes))


def task_rows(tasks: Sequence[SwfTask]) -> list[tuple[Any, ...]]:
    """(region, run_id, scheduled_event_id, domain, kind, task_list, workflow_id, priority,
    scheduled_at, claimed_until)"""
    return [
        (
            t.region,
            t.run_id,
            t.scheduled_event_id,
            t.domain,
            t.kind,
            t.task_list,
            t.workflow_id,
            t.priority,
            t.scheduled_at,
            t.claimed_until,
        )
        for t in tasks
    ]


def listing_rows(region: str, ex: Execution, keys: Sequence[str]) -> list[tuple[Any, ...]]:
    """(region, run_id, facet, domain, is_open, started_at, closed_at, workflow_id)"""
    is_open = 1 if ex.is_open else 0
    return [
        (region, ex.run_id, key, ex.domain, is_open, ex.started_at, ex.closed_at, ex.workflow_id)
        for key in keys
    ]


def units_of(unit: SwfUnit) -> list[SwfUnit]:
    """The unit and the continued run's, in commit order."""
    out = [unit]
    while out[-1].continued is not None:
        out.append(out[-1].continued)
    return out
