"""The run store's `Store` methods, once for both backends (`SqliteStore`, `PostgresStore`).

Each method is its statements (`run_sql`) handed to three primitives every backend provides:
`_one` and `_all` read (on SQLite a point read runs on the Trio thread and `scan=True` sends a
scan to the reader thread; PostgreSQL reads on a pool connection, one crossing), `_transact`
runs a transaction (`sql.Tx`) in the backend's group-committed writer. The backends differ
only in those, in their writers, and in their `Dialect`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

import attrs

from ..core.workflow.compat import Fans
from ..core.workflow.model import ChildSlot, Event, FanOut, Run, TaskRow, run_from_dict
from . import deploy_sql, run_sql
from .base import (
    ApiKeyRecord,
    AppRecord,
    ChildLink,
    CommitObserver,
    DebounceRow,
    IdempotencyRecord,
    OverdueGroup,
    ParentFan,
    QueuedKey,
    RunFilter,
    SecretRecord,
    TimerRecord,
    UnitOfWork,
    WorkflowRecord,
    task_record,
)
from .console import OperatorTokenRecord, RunQuery, open_by_status, run_count_sql, run_query_sql
from .run_sql import Dialect
from .sql import Op, Tx, change

T = TypeVar("T")


def _only(op: Op) -> Tx[Any]:
    """A transaction of one statement: its answer."""
    answer = yield op
    return answer


def _run(doc: str) -> Run:
    return run_from_dict(json.loads(doc))


_FAN_FIELDS: Final = frozenset(field.name for field in attrs.fields(FanOut))


def _fan(text: str | None) -> FanOut | None:
    """A fan-out from the JSON text the database took out of a run document (`run_to_dict`)."""
    data = None if text is None else json.loads(text)
    if data is None:
        return None
    fields = {k: v for k, v in data.items() if k in _FAN_FIELDS}
    fields["open"] = tuple(ChildSlot(int(slot["index"]), slot["run_id"]) for slot in data.get("open", ()))
    return FanOut(**fields)


def _decode_all(texts: Sequence[str]) -> list[Any]:
    """Many JSON texts decoded in one call (one array): a dry-run reads thousands of small
    documents, and `json.loads`' own cost per call is most of a small one's."""
    return json.loads("[" + ",".join(texts) + "]") if texts else []


class SqlRunStore:
    """The run store on SQL. A backend sets `dialect` and provides the primitives below."""

    dialect: ClassVar[Dialect]
    _commit_observer: CommitObserver | None = None

    if TYPE_CHECKING:  # provided by each backend

        async def _one(self, sql: str, args: Sequence[Any] = (), *, scan: bool = False) -> Any:
            """The first row `sql` answers, or None."""
            raise NotImplementedError

        async def _all(self, sql: str, args: Sequence[Any] = (), *, scan: bool = False) -> list[Any]:
            """Every row `sql` answers."""
            raise NotImplementedError

        async def _transact(self, make: Callable[[], Tx[T]], unit: UnitOfWork | None = None) -> T:
            """Run the transaction `make()` makes (a fresh one each time the writer runs it) in
            the group-committed writer; `unit` is the unit of work it writes, if it is one."""
            raise NotImplementedError

    async def _change(self, sql: str, *args: Any) -> int:
        """One statement written on its own: how many rows it changed."""
        changed: int = await self._transact(partial(_only, change(sql, *args)))
        return changed

    # ------------------------------------------------------------------ commits

    def observe_commits(self, observer: CommitObserver | None) -> None:
        """Have `observer` told of every commit from now on (None: no one); it replaces the one
        before, so an engine restarted on the same store does not count commits twice."""
        self._commit_observer = observer

    async def commit(self, unit: UnitOfWork) -> bool:
        # A writer answers None for a unit its set wrote, False for one whose `otherwise` it
        # wrote instead (`unit_tx` answers True or False).
        observer = self._commit_observer
        if observer is None:
            return await self._transact(partial(run_sql.unit_tx, unit, self.dialect), unit) is not False
        started = observer.commit_started()
        committed = False
        try:
            written = await self._transact(partial(run_sql.unit_tx, unit, self.dialect), unit)
            committed = True
        finally:
            observer.commit_ended(unit, started, committed)
        return written is not False

    # ------------------------------------------------------------------ apps

    async def put_app(
        self, name: str, handler_base_url: str, description: str | None, now: int
    ) -> tuple[AppRecord, bool]:
        return await self._transact(partial(run_sql.put_app_tx, name, handler_base_url, description, now))

    async def create_app(self, app: AppRecord, key: ApiKeyRecord, secret: SecretRecord) -> bool:
        return await self._transact(partial(run_sql.create_app_tx, app, key, secret))

    async def get_app(self, name: str) -> AppRecord | None:
        row = await self._one(run_sql.GET_APP, (name,))
        return None if row is None else AppRecord(**dict(row))

    async def add_api_key(self, key: ApiKeyRecord) -> None:
        await self._transact(partial(run_sql.add_api_key_tx, key))

    async def revoke_api_key(self, app: str, key_id: str, now: int) -> bool:
        return await self._change(run_sql.REVOKE_API_KEY, now, app, key_id) == 1

    async def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        row = await self._one(run_sql.GET_API_KEY, (key_id,))
        return None if row is None else ApiKeyRecord(**dict(row))

    async def list_api_keys(self, app: str) -> list[ApiKeyRecord]:
        return [ApiKeyRecord(**dict(r)) for r in await self._all(run_sql.LIST_API_KEYS, (app,))]

    async def rotate_signing_secret(self, secret: SecretRecord, grace_until: int) -> None:
        await self._transact(partial(run_sql.rotate_secret_tx, secret, grace_until))

    async def list_signing_secrets(self, app: str) -> list[SecretRecord]:
        return [SecretRecord(**dict(r)) for r in await self._all(run_sql.LIST_SECRETS, (app,))]

    async def secret_key_check(self, value: str) -> str:
        return await self._transact(partial(run_sql.key_check_tx, value))

    # ------------------------------------------------------------------ workflows

    async def add_workflow_version(
        self, app: str, name: str, document: str, now: int
    ) -> tuple[WorkflowRecord, bool]:
        return await self._transact(partial(run_sql.add_workflow_tx, self.dialect, app, name, document, now))

    async def get_workflow(self, app: str, name: str, version: int | None) -> WorkflowRecord | None:
        if version is None:
            row = await self._one(run_sql.LATEST_WORKFLOW, (app, name))
        else:
            row = await self._one(run_sql.GET_WORKFLOW_VERSION, (app, name, version))
        return None if row is None else WorkflowRecord(**dict(row))

    async def list_workflows(self, app: str, limit: int, after: str | None = None) -> list[WorkflowRecord]:
        found = await self._all(self.dialect.list_workflows, (app, after or "", limit), scan=True)
        return [WorkflowRecord(**dict(r)) for r in found]

    # ------------------------------------------------------------------ runs

    async def get_run(self, run_id: str) -> Run | None:
        row = await self._one(run_sql.GET_RUN, (run_id,))
        return None if row is None else _run(row["doc"])

    async def find_open_run(self, app: str, workflow: str, business_key: str) -> Run | None:
        row = await self._one(self.dialect.find_open_run, (app, workflow, business_key))
        return None if row is None else _run(row["doc"])

    async def list_runs(self, flt: RunFilter, limit: int, after: tuple[int, str] | None) -> list[Run]:
        sql, args = run_sql.list_runs_sql(flt, limit, after)
        return [_run(r["doc"]) for r in await self._all(sql, args, scan=True)]

    async def get_debounce(self, app: str, workflow: str, key: str) -> DebounceRow | None:
        row = await self._one(run_sql.GET_DEBOUNCE, (app, workflow, key))
        return None if row is None else DebounceRow(row["run_id"], row["mode"], int(row["until"]))

    async def extend_debounce(self, app: str, workflow: str, key: str, run_id: str, until: int) -> bool:
        return await self._change(run_sql.EXTEND_DEBOUNCE, until, app, workflow, key, run_id) == 1

    async def drop_debounce(self, app: str, workflow: str, key: str, run_id: str, now: int) -> bool:
        return await self._change(run_sql.DROP_DEBOUNCE, app, workflow, key, run_id, now) == 1

    async def queue_heads(self, app: str, key: str, limit: int) -> list[str]:
        return [r["run_id"] for r in await self._all(run_sql.QUEUE_HEADS, (app, key, limit))]

    async def queue_room(self, app: str, key: str, limit: int) -> tuple[int, list[tuple[str, int]]]:
        rows = await self._all(run_sql.QUEUE_ROOM, (app, key, app, key, limit))
        return (int(rows[0]["n"]) if rows else 0), [(r["run_id"], int(r["workflow_version"])) for r in rows]

    async def queue_ahead(self, run: Run) -> tuple[int, int]:
        """(runs queued before `run` for its key, slots of the key held)."""
        assert run.concurrency_key is not None
        ahead = await self._one(
            run_sql.QUEUE_AHEAD, (run.app, run.concurrency_key, run.created_at, run.run_id)
        )
        held = await self._one(run_sql.COUNT_SLOTS, (run.app, run.concurrency_key))
        return int(ahead["n"]), int(held["n"])

    async def key_counts(self, app: str, workflow: str, limit: int) -> list[tuple[str, int, int]]:
        """(key value, active, waiting) of up to `limit` concurrency keys of a workflow: the keys
        runs wait for first (most waiting first), then the other keys holding slots."""
        prefix = f"{workflow}/"
        args = (app, len(prefix), prefix, limit)
        waiting = {r["k"]: int(r["n"]) for r in await self._all(run_sql.QUEUE_COUNTS, args, scan=True)}
        active = {r["k"]: int(r["n"]) for r in await self._all(run_sql.SLOT_COUNTS, args, scan=True)}
        for key in waiting.keys() - active.keys():  # past the first `limit` keys holding slots
            row = await self._one(run_sql.COUNT_SLOTS, (app, key))
            active[key] = int(row["n"])
        shown = sorted(waiting, key=lambda k: (-waiting[k], k))
        shown += [k for k in active if k not in waiting]
        return [(k[len(prefix) :], active.get(k, 0), waiting.get(k, 0)) for k in shown[:limit]]

    async def queued_by_workflow(self) -> dict[tuple[str, str], int]:
        sql = (
            run_sql.QUEUED_BY_WORKFLOW_POSTGRES
            if self.dialect.postgres
            else run_sql.QUEUED_BY_WORKFLOW_SQLITE
        )
        return {(r["app"], r["workflow"]): int(r["n"]) for r in await self._all(sql, scan=True)}

    async def queued_keys(self, after: tuple[str, str] | None, limit: int) -> list[QueuedKey]:
        app, key = after if after is not None else ("", "")
        found = await self._all(run_sql.QUEUED_KEYS, (app, key, limit))
        return [
            QueuedKey(
                r["app"],
                r["queue_key"],
                r["run_id"],
                int(r["workflow_version"]),
                int(r["created_at"]),
                int(r["held"]),
            )
            for r in found
        ]

    async def children_of(
        self, parent_run_id: str, after: tuple[int, str] | None = None, limit: int | None = None
    ) -> list[Run]:
        sql, args = run_sql.children_of_sql(parent_run_id, after, limit)
        return [_run(r["doc"]) for r in await self._all(sql, args, scan=True)]

    async def child_links(self, after: tuple[str, int, str] | None, limit: int) -> list[ChildLink]:
        sql, args = run_sql.child_links_sql(after, limit)
        return [
            ChildLink(r["run_id"], r["parent_run_id"], int(r["created_at"]), bool(r["is_open"]))
            for r in await self._all(sql, args, scan=True)
        ]

    async def parent_fans(self, run_ids: Sequence[str]) -> dict[str, ParentFan]:
        if not run_ids:
            return {}
        sql, args = run_sql.parent_fans_sql(self.dialect, run_ids)
        return {
            r["run_id"]: ParentFan(r["run_id"], bool(r["is_open"]), _fan(r["fan"]))
            for r in await self._all(sql, args, scan=True)
        }

    async def get_runs(self, run_ids: Sequence[str]) -> dict[str, Run]:
        if not run_ids:
            return {}
        sql, args = run_sql.get_runs_sql(self.dialect, run_ids)
        return {r["run_id"]: _run(r["doc"]) for r in await self._all(sql, args, scan=True)}

    async def list_events(self, run_id: str, after: int, limit: int) -> list[Event]:
        found = await self._all(run_sql.LIST_EVENTS, (run_id, after, limit), scan=True)
        return [
            Event(
                r["seq"], r["at"], r["generation"], r["type"], r["step"], r["attempt"], json.loads(r["data"])
            )
            for r in found
        ]

    # ------------------------------------------------------------------ dry-runs (deploy_sql)

    async def open_run_groups(self, app: str, workflow: str, max_version: int) -> list[deploy_sql.OpenGroup]:
        """The workflow's open runs on versions 1..max_version counted by (version, current
        step, status), in no particular order."""
        sql = deploy_sql.open_groups_sql(self.dialect.postgres)
        return [
            deploy_sql.open_group(r) for r in await self._all(sql, (app, workflow, max_version), scan=True)
        ]

    async def open_group_page(
        self,
        app: str,
        workflow: str,
        group: deploy_sql.OpenGroup,
        limit: int,
        after: tuple[int, str] | None,
        *,
        with_state: bool,
    ) -> list[deploy_sql.OpenRunRow]:
        """A keyset page of one group's open runs, newest first (created_at, run_id)."""
        sql = deploy_sql.open_group_sql(
            self.dialect.postgres, with_state, group.step is not None, after is not None
        )
        step = () if group.step is None else (group.step,)
        args: list[Any] = [app, workflow, group.version, *step, group.status, *(after or ()), limit]
        return [deploy_sql.open_row(r) for r in await self._all(sql, args, scan=True)]

    async def open_group_lacking(
        self, app: str, workflow: str, group: deploy_sql.OpenGroup, paths: Sequence[tuple[str, ...]]
    ) -> list[int]:
        """How many of one group's open runs lack each of `paths` (`deploy_sql.expressible`)."""
        if not paths:
            return []
        sql, args = deploy_sql.lacking_sql(self.dialect.postgres, group.step is not None, paths)
        step = () if group.step is None else (group.step,)
        row = await self._one(sql, [*args, app, workflow, group.version, *step, group.status], scan=True)
        return [int(row[n]) for n in range(len(paths))]

    async def open_group_lacking_newest(
        self, app: str, workflow: str, group: deploy_sql.OpenGroup, path: tuple[str, ...], limit: int
    ) -> list[tuple[int, str]]:
        """The newest `limit` of one group's open runs lacking `path`: (created_at, run_id),
        newest first."""
        sql, args = deploy_sql.lacking_newest_sql(self.dialect.postgres, group.step is not None, path)
        step = () if group.step is None else (group.step,)
        found = await self._all(
            sql, [app, workflow, group.version, *step, group.status, *args, limit], scan=True
        )
        return [(int(r["created_at"]), r["run_id"]) for r in found]

    async def open_group_fans(self, app: str, workflow: str, group: deploy_sql.OpenGroup) -> Fans:
        """What the fan-outs of one group's open runs hold, summed (runs waiting for children)."""
        sql = deploy_sql.fans_sql(self.dialect.postgres, group.step is not None)
        step = () if group.step is None else (group.step,)
        row = await self._one(sql, [app, workflow, group.version, *step, group.status], scan=True)
        counts = [
            int(row[name])
            for name in ("runs", "total", "started", "completed", "failed", "cancelled", "open")
        ]
        return Fans(*counts)

    async def recent_closed_runs(
        self, app: str, workflow: str, limit: int, after: tuple[int, str] | None = None
    ) -> list[Run]:
        sql = deploy_sql.recent_closed_sql(self.dialect.postgres, after is not None)
        found = await self._all(sql, (app, workflow, *(after or ()), limit), scan=True)
        return [run_from_dict(doc) for doc in _decode_all([r["doc"] for r in found])]

    async def events_of(self, run_ids: Sequence[str], max_seq: int) -> dict[str, list[Event]]:
        """The events of these runs up to `max_seq` each, in order."""
        clause, ids = self.dialect.run_ids(run_ids)
        found = await self._all(deploy_sql.EVENTS_OF.format(ids=clause), (*ids, max_seq), scan=True)
        out: dict[str, list[Event]] = {run_id: [] for run_id in run_ids}
        for r, data in zip(found, _decode_all([r["data"] for r in found]), strict=True):
            out[r["run_id"]].append(
                Event(r["seq"], r["at"], r["generation"], r["type"], r["step"], r["attempt"], data)
            )
        return out

    async def get_idempotency(self, app: str, key: str) -> IdempotencyRecord | None:
        row = await self._one(run_sql.GET_IDEMPOTENCY, (app, key))
        return None if row is None else IdempotencyRecord(**dict(row))

    async def signal_taken(self, run_id: str, signal_id: str) -> bool:
        return await self._one(run_sql.SIGNAL_TAKEN, (run_id, signal_id)) is not None

    # ------------------------------------------------------------------ retention

    async def prune_closed_runs(self, closed_before: int, limit: int) -> int:
        return await self._transact(partial(run_sql.prune_runs_tx, self.dialect, closed_before, limit))

    async def prune_debounce_keys(self, now: int, limit: int) -> int:
        return await self._transact(partial(run_sql.prune_debounce_tx, now, limit))

    async def prune_idempotency(self, created_before: int, limit: int) -> int:
        return await self._change(self.dialect.prune_idempotency, created_before, limit)

    # ------------------------------------------------------------------ tasks and timers

    async def get_task(self, token: str) -> TaskRow | None:
        row = await self._one(run_sql.GET_TASK, (token,))
        return None if row is None else task_record(row)

    async def open_tasks(
        self, after: tuple[int, str] | None = None, limit: int | None = None
    ) -> list[TaskRow]:
        if limit is None:
            found = await self._all(run_sql.OPEN_TASKS, scan=True)
        elif after is None:
            found = await self._all(run_sql.OPEN_TASKS_FIRST, (limit,), scan=True)
        else:
            found = await self._all(run_sql.OPEN_TASKS_AFTER, (*after, limit), scan=True)
        return [task_record(r) for r in found]

    async def timers_due_before(
        self, before: int, limit: int, after: tuple[int, str, str] | None = None
    ) -> list[TimerRecord]:
        if after is None:
            found = await self._all(run_sql.TIMERS_DUE, (before, limit), scan=True)
        else:
            found = await self._all(run_sql.TIMERS_DUE_AFTER, (before, *after, limit), scan=True)
        return [TimerRecord(**dict(r)) for r in found]

    # ------------------------------------------------------------------ the operator console

    async def timers_for_run(self, run_id: str) -> list[TimerRecord]:
        return [TimerRecord(**dict(r)) for r in await self._all(run_sql.TIMERS_FOR_RUN, (run_id,))]

    async def count_timers(self, cap: int) -> int:
        row = await self._one(run_sql.COUNT_TIMERS, (cap,), scan=True)
        return int(row[0])

    async def run_counts(self) -> dict[tuple[str, str], int]:
        found = await self._all(self.dialect.run_counts, scan=True)
        return {(r["app"], r["status"]): int(r["n"]) for r in found if r["n"]}

    async def count_open_runs(self) -> dict[str, int]:
        return open_by_status(await self.run_counts())

    async def query_runs(self, q: RunQuery, limit: int, after: tuple[int, str] | None) -> list[Run]:
        sql, params = run_query_sql(q, limit, after, postgres=self.dialect.postgres)
        return [_run(r["doc"]) for r in await self._all(sql, params, scan=True)]

    async def count_runs(self, q: RunQuery, cap: int) -> int:
        sql, params = run_count_sql(q, cap, postgres=self.dialect.postgres)
        row = await self._one(sql, params, scan=True)
        return int(row[0])

    async def add_operator_token(self, token: OperatorTokenRecord) -> None:
        await self._change(
            run_sql.INSERT_OPERATOR_TOKEN,
            token.token_id,
            token.name,
            token.role,
            token.secret_hash,
            token.created_at,
            token.revoked_at,
        )

    async def get_operator_token(self, token_id: str) -> OperatorTokenRecord | None:
        row = await self._one(run_sql.GET_OPERATOR_TOKEN, (token_id,))
        return None if row is None else OperatorTokenRecord(**dict(row))

    async def list_operator_tokens(self) -> list[OperatorTokenRecord]:
        return [
            OperatorTokenRecord(**dict(r)) for r in await self._all(run_sql.LIST_OPERATOR_TOKENS, scan=True)
        ]

    async def revoke_operator_token(self, token_id: str, now: int) -> bool:
        return await self._change(run_sql.REVOKE_OPERATOR_TOKEN, now, token_id) == 1

    async def overdue_runs(self, since_before: int, limit: int) -> list[OverdueGroup]:
        found = await self._all(self.dialect.overdue, (since_before, limit), scan=True)
        return [
            OverdueGroup(r["app"], r["workflow"], r["current_step"], r["status"], r["n"], r["oldest"])
            for r in found
        ]
