"""The `Store` protocol: what the engine needs from a database, one unit of work per transition.

Both backends (SQLite, PostgreSQL) implement it and pass one contract suite
(`tests/storage/`). Rows cross this boundary as the frozen records of `foliot.core.workflow.model`
or the small records below; SQL never leaks out.
"""

from __future__ import annotations

import base64
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

import attrs

from ..core.workflow.compat import Fans
from ..core.workflow.flow import DEFAULT_PRIORITY, Bucket
from ..core.workflow.model import Event, FanOut, Run, TaskRow, run_to_dict
from .console import OperatorTokenRecord, RunQuery
from .deploy_sql import OpenGroup, OpenRunRow
from .fence import Fence
from .flow import FlowStore
from .health import ProbeStore
from .keycheck import KeyCheckStore
from .schedules import ScheduleFire, ScheduleStore
from .sessions import SessionStore
from .swf import SwfExecutionStore, SwfRegistryStore


@attrs.frozen
class AppRecord:
    name: str
    handler_base_url: str
    description: str | None
    created_at: int
    updated_at: int


@attrs.frozen
class ApiKeyRecord:
    key_id: str
    app: str
    secret_hash: str
    created_at: int
    revoked_at: int | None = None


@attrs.frozen
class SecretRecord:
    secret_id: str
    app: str
    secret_enc: str
    created_at: int
    expires_at: int | None


@attrs.frozen
class WorkflowRecord:
    app: str
    name: str
    version: int
    document: str  # canonical JSON
    created_at: int


@attrs.frozen
class TimerRecord:
    """One durable timer row. `run_id` is the id of the actor that holds the timer (a run's or
    an SWF execution's: ids are unique across kinds) and `actor_kind` its kind."""

    run_id: str
    slot: str
    kind: str
    key: str
    due_at: int
    actor_kind: str = "run"


@attrs.frozen
class IdempotencyRecord:
    app: str
    key: str
    request_hash: str
    run_id: str
    response: str
    created_at: int


# A pruning call takes at most this many events per run it may delete (see `prune_pick`).
PRUNE_EVENTS_PER_RUN: Final = 20

# The constraint a `UniqueViolation` names when a run takes a signalId it already took.
SIGNAL_ID_UNIQUE: Final = "signal_ids_pkey"


@attrs.frozen
class UnitOfWork:
    """Everything one transition changes, committed atomically.

    `expected_seq` guards the write: the run row is updated only where its `seq` still equals
    it (None: the run is new and is inserted). Timers are derived from `run.timers()`.
    `signal_ids` are recorded under a unique key: one already taken by the run fails the whole
    unit with `UniqueViolation(SIGNAL_ID_UNIQUE)`. An existing idempotency record for the same
    key is replaced only when it was created before `idempotency_expired_before` (it expired);
    otherwise the unit fails with `UniqueViolation("idempotency")`.
    """

    run: Run
    expected_seq: int | None
    events: tuple[Event, ...] = ()
    tasks: tuple[TaskRow, ...] = ()
    idempotency: IdempotencyRecord | None = None
    signal_ids: tuple[str, ...] = ()
    idempotency_expired_before: int | None = None
    # The lease this unit is written under, when several nodes share the database (`Fence`).
    fences: tuple[Fence, ...] = ()
    # Child runs the transition started (new runs, `expected_seq` None): written in the same
    # transaction, so a parent's step and its children exist together or not at all.
    children: tuple[UnitOfWork, ...] = ()
    # A concurrency slot the transition takes, waits for or gives up (`SlotChange`); a refused
    # admission fails the unit with `UniqueViolation(SLOT_TAKEN)`.
    slot: SlotChange | None = None
    # A debounce key the run claims (a new burst's run) or releases (it began, or closed).
    debounce: DebounceChange | None = None
    # A schedule's fire that starts this (new) run: a time already fired fails the unit with
    # `UniqueViolation("schedule_fire")`; such a unit is written on its own (`batch_plan`).
    fire: ScheduleFire | None = None
    # Written instead when this unit's slot admission is refused (a start admitted at once if a
    # slot is free, else queued: one commit, decided under the key's lock); `commit` answers
    # False then. Its run is this unit's, it takes no slot, claims no key, fires nothing.
    otherwise: UnitOfWork | None = None


SLOT_TAKEN: Final = "concurrency_slot"
DEBOUNCE_TAKEN: Final = "debounce"


@attrs.frozen
class DebounceChange:
    """`claim`: insert the burst's row (refused with `UniqueViolation(DEBOUNCE_TAKEN)` when the
    key has one); `release`: delete it (only while it still names this run)."""

    kind: str  # claim | release
    workflow: str
    key: str
    mode: str = "trailing"  # trailing | leading
    until: int = 0


@attrs.frozen
class DebounceRow:
    run_id: str
    mode: str
    until: int


@attrs.frozen
class SlotChange:
    """`admit`: take a slot of `key` (refused unless fewer than `limit` are held and no older run
    waits); `queue`: wait for one; `leave`: hold and wait for none (closed, or paused while
    queued)."""

    kind: str  # admit | queue | leave
    key: str
    limit: int = 0


@attrs.frozen
class QueuedKey:
    """A concurrency key runs wait for (`RunStore.queued_keys`): its oldest waiting run (`head`,
    of workflow `version`, created at `since`) and the slots of the key held."""

    app: str
    key: str
    head: str
    version: int
    since: int
    held: int


@attrs.frozen
class ChildLink:
    """A child run as recovery's page of links names it (`RunStore.child_links`): no document.
    `cursor` is where the next page starts."""

    run_id: str
    parent_run_id: str
    created_at: int
    is_open: bool

    @property
    def cursor(self) -> tuple[str, int, str]:
        return (self.parent_run_id, self.created_at, self.run_id)


@attrs.frozen
class ParentFan:
    """What recovery needs of a parent (`RunStore.parent_fans`): whether it is open, and its
    fan-out (the open children it waits for), read without the rest of its document."""

    run_id: str
    is_open: bool
    fan: FanOut | None


def flatten(units: Sequence[UnitOfWork]) -> list[UnitOfWork]:
    """`units` with the child runs each of them starts, parents first."""
    if not any(unit.children for unit in units):
        return list(units)
    out: list[UnitOfWork] = []
    stack = list(reversed(units))
    while stack:
        unit = stack.pop()
        out.append(unit)
        stack.extend(reversed(unit.children))
    return out


def parent_of(run: Run) -> str | None:
    """The `runs.parent_run_id` column (migration 0071)."""
    return run.parent.run_id if run.parent is not None else None


@attrs.frozen
class OverdueGroup:
    """Open runs pending at one step longer than a threshold (GET /admin/runs/overdue)."""

    app: str
    workflow: str
    step: str | None
    status: str
    count: int
    oldest_since: int


@attrs.frozen
class RunFilter:
    app: str
    workflow: str | None = None
    status: str | None = None
    business_key: str | None = None
    parent_run_id: str | None = None


def encode_cursor(*parts: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, arity: int) -> list[Any] | None:
    """The parts of a cursor made by `encode_cursor`, or None when it is not one."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        parts = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, TypeError):
        return None
    if not isinstance(parts, list) or len(parts) != arity:
        return None
    if not all(_storable(p) for p in parts if isinstance(p, str)):
        return None  # made from stored values, a cursor never holds NUL or a lone surrogate
    return parts


def _storable(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class CommitObserver(Protocol):
    """Told of every `Store.commit` (the metrics' commit latency, commits in progress and run
    tally): `commit_started` as it begins (its answer comes back as `started`), `commit_ended`
    as it ends, `committed` False when it raised."""

    def commit_started(self) -> float: ...

    def commit_ended(self, unit: UnitOfWork, started: float, committed: bool) -> None: ...


class AppStore(Protocol):
    """Apps, their API keys and signing secrets, and their workflow versions."""

    async def put_app(
        self, name: str, handler_base_url: str, description: str | None, now: int
    ) -> tuple[AppRecord, bool]: ...

    async def create_app(self, app: AppRecord, key: ApiKeyRecord, secret: SecretRecord) -> bool: ...

    async def get_app(self, name: str) -> AppRecord | None: ...

    async def add_api_key(self, key: ApiKeyRecord) -> None: ...

    async def revoke_api_key(self, app: str, key_id: str, now: int) -> bool: ...

    async def get_api_key(self, key_id: str) -> ApiKeyRecord | None: ...

    async def list_api_keys(self, app: str) -> list[ApiKeyRecord]: ...

    async def rotate_signing_secret(self, secret: SecretRecord, grace_until: int) -> None: ...

    async def list_signing_secrets(self, app: str) -> list[SecretRecord]: ...

    # workflows
    async def add_workflow_version(
        self, app: str, name: str, document: str, now: int
    ) -> tuple[WorkflowRecord, bool]: ...

    async def get_workflow(self, app: str, name: str, version: int | None) -> WorkflowRecord | None: ...

    async def list_workflows(
        self, app: str, limit: int, after: str | None = None
    ) -> list[WorkflowRecord]: ...


class RunStore(Protocol):
    """Runs: the engine's unit-of-work commits and the reads and retention around them."""

    async def commit(self, unit: UnitOfWork) -> bool:
        """Write the unit atomically: True; its `otherwise` instead (its admission refused):
        False. Refused: `StaleWrite`, `UniqueViolation`, ..."""
        ...

    def observe_commits(self, observer: CommitObserver | None) -> None:
        """Tell `observer` of every commit from now on, instead of the one told before (None:
        no one)."""
        ...

    async def get_run(self, run_id: str) -> Run | None: ...

    async def find_open_run(self, app: str, workflow: str, business_key: str) -> Run | None: ...

    async def list_runs(self, flt: RunFilter, limit: int, after: tuple[int, str] | None) -> list[Run]: ...

    async def children_of(
        self, parent_run_id: str, after: tuple[int, str] | None = None, limit: int | None = None
    ) -> list[Run]:
        """The child runs of a run (all its steps and generations), oldest first (`created_at`,
        `run_id`): those after the keyset cursor `after`, at most `limit` (None: every one)."""
        ...

    async def queue_heads(self, app: str, key: str, limit: int) -> list[str]:
        """The oldest runs waiting for a slot of a concurrency key."""
        ...

    async def queue_room(self, app: str, key: str, limit: int) -> tuple[int, list[tuple[str, int]]]:
        """(slots of a concurrency key held, its oldest `limit` runs waiting for one as
        `(run_id, workflow version)`), in one read; (0, []) when none waits."""
        ...

    async def get_debounce(self, app: str, workflow: str, key: str) -> DebounceRow | None: ...

    async def extend_debounce(self, app: str, workflow: str, key: str, run_id: str, until: int) -> bool:
        """Push a leading burst's window on (a start it dropped); False when the row is gone."""
        ...

    async def drop_debounce(self, app: str, workflow: str, key: str, run_id: str, now: int) -> bool:
        """Delete a leading burst's row whose window ended before `now`."""
        ...

    async def queue_ahead(self, run: Run) -> tuple[int, int]:
        """(runs queued before this one for its key, slots of the key held)."""
        ...

    async def key_counts(self, app: str, workflow: str, limit: int) -> list[tuple[str, int, int]]:
        """(key value, active runs, queued runs) of at most `limit` concurrency keys of a workflow:
        those with queued runs first (most first), then keys holding slots only (key order)."""
        ...

    async def queued_by_workflow(self) -> dict[tuple[str, str], int]:
        """Queued runs per (app, workflow), from the queue index (never a scan of all runs)."""
        ...

    async def queued_keys(self, after: tuple[str, str] | None, limit: int) -> list[QueuedKey]:
        """A page of the concurrency keys runs wait for: at most `limit` of them after `after`
        (app, key) in key order (None: from the first). Costs one index seek per key, however
        many runs wait behind each head."""
        ...

    async def child_links(self, after: tuple[str, int, str] | None, limit: int) -> list[ChildLink]:
        """A page of what recovery reconciles: every open child run, and every closed child of
        an open parent waiting on children (a child's close its parent may not have been told
        of; a child its closed or moved-on parent no longer waits for). At most `limit`, in
        (parent, created_at, run_id) order after the keyset cursor `after` (`ChildLink.cursor`;
        None: from the first). No document is read."""
        ...

    async def parent_fans(self, run_ids: Sequence[str]) -> dict[str, ParentFan]:
        """These runs' open flag and fan-out, by run id (a run not found is left out): the
        fan-out is read out of the document by the database, not the whole document."""
        ...

    async def get_runs(self, run_ids: Sequence[str]) -> dict[str, Run]:
        """These runs' documents by run id, in one read (a run not found is left out)."""
        ...

    async def list_events(self, run_id: str, after: int, limit: int) -> list[Event]: ...

    async def open_run_groups(self, app: str, workflow: str, max_version: int) -> list[OpenGroup]:
        """The workflow's open runs on versions 1..max_version counted by (version, current
        step, status), in no particular order (read from an index alone)."""
        ...

    async def open_group_page(
        self,
        app: str,
        workflow: str,
        group: OpenGroup,
        limit: int,
        after: tuple[int, str] | None,
        *,
        with_state: bool,
    ) -> list[OpenRunRow]:
        """A keyset page of one group's open runs, newest first by (created_at, run_id), after
        `after`; their input and state as JSON text when `with_state`."""
        ...

    async def open_group_lacking(
        self, app: str, workflow: str, group: OpenGroup, paths: Sequence[tuple[str, ...]]
    ) -> list[int]:
        """How many of one group's open runs have no `path` in their input and state, for each
        of `paths` (each `deploy_sql.expressible`): counted by the database."""
        ...

    async def open_group_lacking_newest(
        self, app: str, workflow: str, group: OpenGroup, path: tuple[str, ...], limit: int
    ) -> list[tuple[int, str]]:
        """The newest `limit` of one group's open runs lacking `path`, as (created_at, run_id),
        newest first."""
        ...

    async def open_group_fans(self, app: str, workflow: str, group: OpenGroup) -> Fans:
        """What the fan-outs of one group's open runs hold (`Run.fan`), summed: how many runs
        wait for children, and their children completed, failed, cancelled and open, and the
        items started of how many: counted by the database."""
        ...

    async def recent_closed_runs(
        self, app: str, workflow: str, limit: int, after: tuple[int, str] | None = None
    ) -> list[Run]:
        """The workflow's last `limit` closed runs, newest first (created_at, run_id), older
        than `after` when given (a keyset page)."""
        ...

    async def events_of(self, run_ids: Sequence[str], max_seq: int) -> dict[str, list[Event]]: ...

    async def get_idempotency(self, app: str, key: str) -> IdempotencyRecord | None: ...

    async def signal_taken(self, run_id: str, signal_id: str) -> bool:
        """Whether the run already took a signal with this signalId (kept until it is pruned)."""
        ...

    # retention: each call is one bounded transaction; callers repeat until it answers 0

    async def prune_closed_runs(self, closed_before: int, limit: int) -> int:
        """Delete up to `limit` runs closed before `closed_before` with their events, tasks,
        timers, signal ids, schedule fire records and debounce keys, oldest first; fewer when
        their histories are long (at most `limit * PRUNE_EVENTS_PER_RUN` events per call, but
        always one run). Returns the count."""
        ...

    async def prune_idempotency(self, created_before: int, limit: int) -> int:
        """Delete up to `limit` idempotency records created before `created_before`."""
        ...

    async def prune_debounce_keys(self, now: int, limit: int) -> int:
        """Delete up to `limit` leading debounce keys whose window ended by `now` and whose run
        is closed (or gone): the burst is over. Returns the count."""
        ...

    # tasks and timers
    async def get_task(self, token: str) -> TaskRow | None: ...

    async def open_tasks(
        self, after: tuple[int, str] | None = None, limit: int | None = None
    ) -> list[TaskRow]:
        """Open tasks in (created_at, token) order after the keyset cursor `after`, at most
        `limit` (None: every one)."""
        ...

    async def timers_due_before(
        self, before: int, limit: int, after: tuple[int, str, str] | None = None
    ) -> list[TimerRecord]: ...

    async def count_open_runs(self) -> dict[str, int]: ...


class ConsoleStore(Protocol):
    """The operator console's reads and its tokens (storage/console.py)."""

    async def timers_for_run(self, run_id: str) -> list[TimerRecord]: ...

    async def count_timers(self, cap: int) -> int:
        """How many timers are stored, counting no further than `cap` (a bounded index walk)."""
        ...

    async def run_counts(self) -> dict[tuple[str, str], int]:
        """Runs per (app, status), read from the counters triggers keep (no table scan)."""
        ...

    async def query_runs(self, q: RunQuery, limit: int, after: tuple[int, str] | None) -> list[Run]: ...

    async def count_runs(self, q: RunQuery, cap: int) -> int:
        """How many runs `q` selects, counting no further than `cap` (the walk `query_runs` does)."""
        ...

    async def add_operator_token(self, token: OperatorTokenRecord) -> None: ...

    async def get_operator_token(self, token_id: str) -> OperatorTokenRecord | None: ...

    async def list_operator_tokens(self) -> list[OperatorTokenRecord]: ...

    async def revoke_operator_token(self, token_id: str, now: int) -> bool: ...

    async def overdue_runs(self, since_before: int, limit: int) -> list[OverdueGroup]:
        """Open runs whose current step began before `since_before`, grouped by (app, workflow,
        step, status), largest group first (then oldest); at most `limit` groups."""
        ...


class Store(
    AppStore,
    RunStore,
    ConsoleStore,
    SwfRegistryStore,
    SwfExecutionStore,
    KeyCheckStore,
    ProbeStore,
    SessionStore,
    ScheduleStore,
    FlowStore,
    Protocol,
):
    """Durable state. Every method is one transaction; `commit` is the engine's hot path. A
    caller that needs one part asks for its protocol (`RunStore`, `AppStore`, `ConsoleStore`,
    the SWF ones)."""

    async def migrate(self) -> None: ...

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


def json_dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# A run's input never changes in place (a transition that changes it makes a new object), but
# the document holding it is written at every commit: a map parent's 10,000 items were encoded
# again for every child's close. Large inputs keep their text here, by identity, while in use.
_INPUT_TEXT_MIN: Final = 2048  # bytes of JSON below which encoding again is cheaper than caching
_INPUT_TEXTS: Final[OrderedDict[int, tuple[Any, str]]] = OrderedDict()
_INPUT_TEXTS_MAX: Final = 512
_INPUT_TEXTS_LOCK: Final = threading.Lock()  # SQLite's writer thread and the Trio thread both encode


def _input_text(value: Any) -> str | None:
    """The JSON text of a large list or object input, remembered by identity; None for small ones."""
    if not isinstance(value, (list, dict)) or not value:
        return None
    key = id(value)
    with _INPUT_TEXTS_LOCK:
        held = _INPUT_TEXTS.get(key)
        if held is not None and held[0] is value:
            _INPUT_TEXTS.move_to_end(key)
            return held[1]
    text = json_dumps(value)
    if len(text) < _INPUT_TEXT_MIN:
        return None
    with _INPUT_TEXTS_LOCK:
        _INPUT_TEXTS[key] = (value, text)  # the value is held, so its id is not reused meanwhile
        if len(_INPUT_TEXTS) > _INPUT_TEXTS_MAX:
            _INPUT_TEXTS.popitem(last=False)
    return text


def run_json(run: Run) -> str:
    """The run document's JSON text (`run_to_dict`), its input's text reused when it is large."""
    doc = run_to_dict(run)
    text = _input_text(doc["input"])
    if text is None:
        return json_dumps(doc)
    del doc["input"]
    rest = json_dumps(doc)
    return '{"input":' + text + ("}" if rest == "{}" else "," + rest[1:])


# Row tuples for a unit of work, in the column order both backends' INSERTs use.


def event_rows(unit: UnitOfWork) -> list[tuple[Any, ...]]:
    """(run_id, seq, at, generation, type, step, attempt, data)"""
    run_id = unit.run.run_id
    return [
        (run_id, e.seq, e.at, e.generation, e.type, e.step, e.attempt, json_dumps(e.data))
        for e in unit.events
    ]


def task_rows(unit: UnitOfWork) -> list[tuple[Any, ...]]:
    """(token, run_id, app, generation, step, attempt, queue, status, close_reason, deadline,
    created_at, priority, buckets): `priority` NULL when the default, `buckets` NULL when none
    (else `task_buckets`' JSON)."""
    return [
        (
            t.token,
            t.run_id,
            t.app,
            t.generation,
            t.step,
            t.attempt,
            t.queue,
            t.status,
            t.close_reason,
            t.deadline,
            t.created_at,
            None if t.priority == DEFAULT_PRIORITY else t.priority,
            task_buckets(t.buckets) if t.buckets else None,
        )
        for t in unit.tasks
    ]


def task_buckets(buckets: Sequence[Bucket]) -> str:
    """`tasks.buckets` (migration 0078): `[[name, interval_us, label], ...]`."""
    return json.dumps([[b.name, b.interval_us, b.label] for b in buckets], separators=(",", ":"))


def task_record(row: Mapping[str, Any]) -> TaskRow:
    """A `tasks` row as its record."""
    fields = dict(row)
    priority = fields.pop("priority", None)
    raw = fields.pop("buckets", None)
    buckets = tuple(Bucket(str(n), int(i), str(label)) for n, i, label in json.loads(raw)) if raw else ()
    return TaskRow(
        **fields, priority=DEFAULT_PRIORITY if priority is None else int(priority), buckets=buckets
    )


def timer_rows(run: Run) -> list[tuple[Any, ...]]:
    """(run_id, slot, kind, key, due_at)"""
    return [(run.run_id, slot, t.kind, t.key, t.due) for slot, t in run.timers()]


def signal_id_rows(unit: UnitOfWork) -> list[tuple[Any, ...]]:
    """(run_id, signal_id, at)"""
    return [(unit.run.run_id, signal_id, unit.run.updated_at) for signal_id in unit.signal_ids]


def run_row(run: Run) -> tuple[Any, ...]:
    """(run_id, app, workflow, status, business_key, is_open, created_at, seq, doc, closed_at)"""
    return (
        run.run_id,
        run.app,
        run.workflow,
        run.status,
        run.business_key,
        run.is_open,
        run.created_at,
        run.seq,
        run_json(run),
        closed_at(run),
    )


def step_columns(run: Run) -> tuple[str | None, int | None]:
    """The `runs.current_step` and `runs.step_since` columns (NULL once closed): what the
    overdue view groups and filters by, through a partial index on open runs."""
    if not run.is_open:
        return None, None
    since = run.step_since if run.step_since is not None else run.updated_at
    return run.current_step, since


def search_columns(run: Run) -> tuple[int, str | None]:
    """The `runs.workflow_version` and `runs.error_class` columns (migration 0021), which the
    console's run search walks by index. The class is kept as its JSON text, as the document
    holds it (`"card_declined"`): any text a handler sends, \\u0000 included, compares exactly."""
    return run.version, None if run.error is None else json_dumps(run.error.cls)


OVERDUE_SQL: Final = (
    "SELECT app, workflow, current_step, status, COUNT(*) AS n, MIN(step_since) AS oldest"
    " FROM runs WHERE is_open = {true} AND step_since < {p1}"
    " GROUP BY app, workflow, current_step, status"
    " ORDER BY n DESC, oldest, app, workflow, current_step, status"
    " LIMIT {p2}"
)


def closed_at(run: Run) -> int | None:
    """The `runs.closed_at` column: when a closed run closed (retention counts from it)."""
    if run.is_open:
        return None
    return run.closed_at if run.closed_at is not None else run.updated_at


def prune_pick(candidates: list[tuple[str, int]], events_budget: int) -> list[str]:
    """Of (run_id, seq) oldest first, the prefix whose events (a run has `seq` of them) fit the
    budget; always at least the first, so a run with a very long history goes on its own."""
    picked: list[str] = []
    total = 0
    for run_id, seq in candidates:
        total += seq
        if picked and total > events_budget:
            break
        picked.append(run_id)
    return picked


def prune_keys(candidates: list[tuple[str, str, int]], limit: int) -> list[tuple[str, str]]:
    """Of SWF executions (region, run_id, last event id) oldest first, the (region, run_id) one
    pruning transaction deletes: `prune_pick`'s prefix for `limit` executions."""
    picked = prune_pick([(str(i), n) for i, (_, _, n) in enumerate(candidates)], limit * PRUNE_EVENTS_PER_RUN)
    return [(candidates[int(i)][0], candidates[int(i)][1]) for i in picked]


def idempotency_row(record: IdempotencyRecord) -> tuple[Any, ...]:
    """(app, key, request_hash, run_id, response, created_at)"""
    return (record.app, record.key, record.request_hash, record.run_id, record.response, record.created_at)
