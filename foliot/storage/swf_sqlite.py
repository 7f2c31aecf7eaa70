"""`SwfRegistryStore` and `SwfExecutionStore` on SQLite, mixed into `SqliteStore`. The single
writer serialises every write, so a count-then-insert (or a claim's select-then-update) inside
one job is race-free."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.swf.events import HistoryEvent
from .base import prune_keys
from .swf import (
    DEPRECATED,
    Insert,
    SwfCredential,
    SwfCursor,
    SwfDomain,
    SwfLambdaFunction,
    SwfParked,
    SwfQuery,
    SwfStored,
    SwfTask,
    SwfType,
    SwfUnit,
    attrs_tuple,
    event_from_row,
    other_status,
    retention_ms,
    stored_execution,
)
from .swf_sql import (
    COUNTS_SQL,
    DELETE_LAMBDA,
    EXPIRED_SQL,
    GET_LAMBDA,
    GET_PARKED,
    LOAD_SQL,
    OWED_PAGE_SQL,
    PENDING_COUNT_SQL,
    PRUNED_TABLES,
    PUT_LAMBDA,
    PUT_PARKED,
    RELEASE_SQL,
    SETTLE_OWED,
    UNPARK,
    count_sql,
    events_sql,
    find_sql,
    keyed_page_sql,
    lambdas_sql,
    list_sql,
    open_page_sql,
    unit_statements,
)

T = TypeVar("T")


def _domain(row: sqlite3.Row | None) -> SwfDomain | None:
    return None if row is None else SwfDomain(**dict(row))


def _type(row: sqlite3.Row | None) -> SwfType | None:
    return None if row is None else SwfType(**dict(row))


SHORT_PAGE = 100  # history pages up to this many events are read on the Trio thread


class SwfSqlite:
    if TYPE_CHECKING:  # provided by SqliteStore

        async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
            raise NotImplementedError

        async def _read(self, fn: Callable[[sqlite3.Connection], T], *, scan: bool = False) -> T:
            raise NotImplementedError

    async def add_swf_credential(self, credential: SwfCredential) -> None:
        await self._write(
            lambda c: c.execute(
                "INSERT INTO swf_credentials (access_key_id, secret_enc, created_at, revoked_at)"
                " VALUES (?, ?, ?, ?)",
                attrs_tuple(credential),
            )
        )

    async def get_swf_credential(self, access_key_id: str) -> SwfCredential | None:
        row = await self._read(
            lambda c: c.execute(
                "SELECT * FROM swf_credentials WHERE access_key_id = ?", (access_key_id,)
            ).fetchone()
        )
        return None if row is None else SwfCredential(**dict(row))

    async def list_swf_credentials(self) -> list[SwfCredential]:
        rows = await self._read(
            lambda c: c.execute(
                "SELECT * FROM swf_credentials WHERE revoked_at IS NULL ORDER BY created_at, access_key_id"
            ).fetchall(),
            scan=True,
        )
        return [SwfCredential(**dict(r)) for r in rows]

    async def revoke_swf_credential(self, access_key_id: str, now: int) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE swf_credentials SET revoked_at = ? WHERE access_key_id = ? AND revoked_at IS NULL",
                (now, access_key_id),
            )
            return cur.rowcount == 1

        return await self._write(fn)

    async def swf_insert_domain(self, domain: SwfDomain, max_domains: int) -> Insert:
        def fn(conn: sqlite3.Connection) -> Insert:
            if conn.execute(
                "SELECT 1 FROM swf_domains WHERE region = ? AND name = ?", (domain.region, domain.name)
            ).fetchone():
                return Insert.EXISTS
            (count,) = conn.execute(
                "SELECT COUNT(*) FROM swf_domains WHERE region = ?", (domain.region,)
            ).fetchone()
            if count >= max_domains:
                return Insert.LIMIT
            conn.execute(
                "INSERT INTO swf_domains (region, name, status, description, retention_days, tags,"
                " created_at, deprecated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                attrs_tuple(domain),
            )
            return Insert.OK

        return await self._write(fn)

    async def swf_get_domain(self, region: str, name: str) -> SwfDomain | None:
        row = await self._read(
            lambda c: c.execute(
                "SELECT * FROM swf_domains WHERE region = ? AND name = ?", (region, name)
            ).fetchone()
        )
        return _domain(row)

    async def swf_list_domains(
        self, region: str, status: str, after: str | None, reverse: bool, limit: int
    ) -> list[SwfDomain]:
        order, cmp = ("DESC", "<") if reverse else ("ASC", ">")
        sql = "SELECT * FROM swf_domains WHERE region = ? AND status = ?"
        args: list[Any] = [region, status]
        if after is not None:
            sql += f" AND name {cmp} ?"
            args.append(after)
        sql += f" ORDER BY name {order} LIMIT ?"
        args.append(limit)
        rows = await self._read(lambda c: c.execute(sql, args).fetchall(), scan=True)
        return [SwfDomain(**dict(r)) for r in rows]

    async def swf_set_domain_status(self, region: str, name: str, status: str, now: int) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE swf_domains SET status = ?, deprecated_at = ?"
                " WHERE region = ? AND name = ? AND status = ?",
                (status, now if status == DEPRECATED else None, region, name, other_status(status)),
            )
            return cur.rowcount == 1

        return await self._write(fn)

    async def swf_replace_domain_tags(self, region: str, name: str, expected: str, tags: str) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE swf_domains SET tags = ? WHERE region = ? AND name = ? AND tags = ?",
                (tags, region, name, expected),
            )
            return cur.rowcount == 1

        return await self._write(fn)

    async def swf_insert_type(self, type_: SwfType, max_types: int) -> Insert:
        def fn(conn: sqlite3.Connection) -> Insert:
            row = conn.execute(
                "SELECT status FROM swf_domains WHERE region = ? AND name = ?", (type_.region, type_.domain)
            ).fetchone()
            if row is None:
                return Insert.NO_DOMAIN
            if row["status"] == DEPRECATED:
                return Insert.DOMAIN_DEPRECATED
            key = (type_.region, type_.domain, type_.kind)
            if conn.execute(
                "SELECT 1 FROM swf_types WHERE region = ? AND domain = ? AND kind = ? AND name = ?"
                " AND version = ?",
                (*key, type_.name, type_.version),
            ).fetchone():
                return Insert.EXISTS
            (count,) = conn.execute(
                "SELECT COUNT(*) FROM swf_types WHERE region = ? AND domain = ? AND kind = ?", key
            ).fetchone()
            if count >= max_types:
                return Insert.LIMIT
            conn.execute(
                "INSERT INTO swf_types (region, domain, kind, name, version, status, description, config,"
                " created_at, deprecated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                attrs_tuple(type_),
            )
            return Insert.OK

        return await self._write(fn)

    async def swf_get_type(
        self, region: str, domain: str, kind: str, name: str, version: str
    ) -> SwfType | None:
        row = await self._read(
            lambda c: c.execute(
                "SELECT * FROM swf_types WHERE region = ? AND domain = ? AND kind = ? AND name = ?"
                " AND version = ?",
                (region, domain, kind, name, version),
            ).fetchone()
        )
        return _type(row)

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
        order, cmp = ("DESC", "<") if reverse else ("ASC", ">")
        sql = "SELECT * FROM swf_types WHERE region = ? AND domain = ? AND kind = ? AND status = ?"
        args: list[Any] = [region, domain, kind, status]
        if name is not None:
            sql += " AND name = ?"
            args.append(name)
        if after is not None:
            sql += f" AND (name, version) {cmp} (?, ?)"
            args.extend(after)
        sql += f" ORDER BY name {order}, version {order} LIMIT ?"
        args.append(limit)
        rows = await self._read(lambda c: c.execute(sql, args).fetchall(), scan=True)
        return [SwfType(**dict(r)) for r in rows]

    async def swf_set_type_status(
        self, region: str, domain: str, kind: str, name: str, version: str, status: str, now: int
    ) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE swf_types SET status = ?, deprecated_at = ? WHERE region = ? AND domain = ?"
                " AND kind = ? AND name = ? AND version = ? AND status = ?",
                (
                    status,
                    now if status == DEPRECATED else None,
                    region,
                    domain,
                    kind,
                    name,
                    version,
                    other_status(status),
                ),
            )
            return cur.rowcount == 1

        return await self._write(fn)

    async def swf_delete_type(self, region: str, domain: str, kind: str, name: str, version: str) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "DELETE FROM swf_types WHERE region = ? AND domain = ? AND kind = ? AND name = ?"
                " AND version = ? AND status = ?",
                (region, domain, kind, name, version, DEPRECATED),
            )
            return cur.rowcount == 1

        return await self._write(fn)

    # ------------------------------------------------------------------ executions

    async def swf_commit(self, unit: SwfUnit) -> None:
        def fn(conn: sqlite3.Connection) -> None:
            for stmt in unit_statements(unit):
                if stmt.many:
                    conn.executemany(stmt.sql, stmt.rows)
                    continue
                cur = conn.execute(stmt.sql, stmt.args)
                if stmt.refusal is not None and cur.rowcount != 1:
                    raise stmt.refusal

        await self._write(fn)

    async def swf_load(self, region: str, run_id: str) -> SwfStored | None:
        row = await self._read(lambda c: c.execute(LOAD_SQL, (region, run_id)).fetchone())
        return None if row is None else stored_execution(region, row[0], row[1])

    async def swf_find(
        self, region: str, domain: str, workflow_id: str, run_id: str | None = None
    ) -> SwfStored | None:
        sql, args = find_sql(region, domain, workflow_id, run_id)
        row = await self._read(lambda c: c.execute(sql, args).fetchone())
        return None if row is None else stored_execution(region, row[0], row[1])

    async def swf_open_executions(self, after: tuple[str, str] | None, limit: int) -> list[SwfStored]:
        sql, args = open_page_sql(after, limit)
        rows = await self._read(lambda c: c.execute(sql, args).fetchall(), scan=True)
        return [stored_execution(r[0], r[1], r[2]) for r in rows]

    async def swf_events(
        self, region: str, run_id: str, after: int | None, reverse: bool, limit: int
    ) -> list[HistoryEvent]:
        sql, args = events_sql(region, run_id, after, reverse, limit)
        # A short page (a decision task's history, mostly) is a key-range read of a few rows:
        # cheaper on the Trio thread than a hop to the reader thread, as point reads are.
        rows = await self._read(lambda c: c.execute(sql, args).fetchall(), scan=limit > SHORT_PAGE)
        return [event_from_row(*r) for r in rows]

    async def swf_list_executions(
        self, query: SwfQuery, after: SwfCursor | None, limit: int
    ) -> list[SwfStored]:
        sql, args = list_sql(query, after, limit)
        rows = await self._read(lambda c: c.execute(sql, args).fetchall(), scan=True)
        return [stored_execution(query.region, r[0], r[1]) for r in rows]

    async def swf_count_executions(self, query: SwfQuery, cap: int) -> int:
        sql, args = count_sql(query, cap)
        row = await self._read(lambda c: c.execute(sql, args).fetchone(), scan=True)
        return int(row[0])

    async def swf_claim_task(
        self, region: str, domain: str, kind: str, task_list: str, now: int, lease_ms: int
    ) -> SwfTask | None:
        def fn(conn: sqlite3.Connection) -> SwfTask | None:
            row = conn.execute(NEXT_TASK_SQL, (region, domain, kind, task_list, now)).fetchone()
            if row is None:
                return None
            until = now + lease_ms
            conn.execute(
                "UPDATE swf_tasks SET claimed_until = ? WHERE region = ? AND run_id = ?"
                " AND scheduled_event_id = ?",
                (until, region, row["run_id"], row["scheduled_event_id"]),
            )
            return SwfTask(**{**dict(row), "claimed_until": until})

        return await self._write(fn)

    async def swf_release_task(self, region: str, run_id: str, scheduled_event_id: int) -> None:
        await self._write(lambda c: c.execute(RELEASE_SQL, (region, run_id, scheduled_event_id)))

    async def swf_count_pending(self, region: str, domain: str, kind: str, task_list: str, cap: int) -> int:
        args = (region, domain, kind, task_list, cap)
        row = await self._read(lambda c: c.execute(PENDING_COUNT_SQL, args).fetchone(), scan=True)
        return int(row[0])

    async def swf_prune_closed(self, now: int, limit: int) -> int:
        def fn(conn: sqlite3.Connection) -> int:
            candidates: list[tuple[str, str, int]] = []  # (region, run_id, events)
            for region, domain, days in conn.execute(
                "SELECT region, name, retention_days FROM swf_domains ORDER BY region, name"
            ).fetchall():
                if len(candidates) >= limit:
                    break
                candidates += conn.execute(
                    EXPIRED_SQL, (region, domain, now - retention_ms(days), limit - len(candidates))
                ).fetchall()
            keys = prune_keys(candidates, limit)
            for table in PRUNED_TABLES:
                conn.executemany(f"DELETE FROM {table} WHERE region = ? AND run_id = ?", keys)
            return len(keys)

        return await self._write(fn)

    async def swf_owed_executions(self, after: tuple[str, str] | None, limit: int) -> list[SwfStored]:
        sql, args = keyed_page_sql(OWED_PAGE_SQL, "o", after, limit)
        rows = await self._read(lambda c: c.execute(sql, args).fetchall(), scan=True)
        return [stored_execution(r[0], r[1], r[2]) for r in rows]

    async def swf_settle_owed(self, region: str, run_id: str) -> None:
        await self._write(lambda c: c.execute(SETTLE_OWED, (region, run_id)))

    async def swf_put_lambda(self, function: SwfLambdaFunction) -> SwfLambdaFunction:
        row = await self._write(lambda c: c.execute(PUT_LAMBDA, attrs_tuple(function)).fetchone())
        return SwfLambdaFunction(*row)

    async def swf_get_lambda(self, region: str, name: str) -> SwfLambdaFunction | None:
        row = await self._read(lambda c: c.execute(GET_LAMBDA, (region, name)).fetchone())
        return None if row is None else SwfLambdaFunction(*row)

    async def swf_list_lambdas(self, region: str | None, limit: int) -> list[SwfLambdaFunction]:
        sql, args = lambdas_sql(region, limit)
        rows = await self._read(lambda c: c.execute(sql, args).fetchall(), scan=True)
        return [SwfLambdaFunction(*r) for r in rows]

    async def swf_delete_lambda(self, region: str, name: str) -> bool:
        count = await self._write(lambda c: c.execute(DELETE_LAMBDA, (region, name)).rowcount)
        return bool(count)

    async def swf_park(self, parked: SwfParked) -> None:
        await self._write(lambda c: c.execute(PUT_PARKED, attrs_tuple(parked)))

    async def swf_get_parked(self, region: str, run_id: str) -> SwfParked | None:
        row = await self._read(lambda c: c.execute(GET_PARKED, (region, run_id)).fetchone())
        return None if row is None else SwfParked(*row)

    async def swf_list_parked(self, after: tuple[str, str] | None, limit: int) -> list[SwfParked]:
        base = "SELECT p.region, p.run_id, p.reason, p.parked_at FROM swf_parked p"
        sql, args = keyed_page_sql(base, "p", after, limit)
        rows = await self._read(lambda c: c.execute(sql, args).fetchall(), scan=True)
        return [SwfParked(*r) for r in rows]

    async def swf_unpark(self, region: str, run_id: str) -> bool:
        return bool(await self._write(lambda c: c.execute(UNPARK, (region, run_id)).rowcount))

    async def swf_counts(self) -> dict[str, int]:
        row = await self._read(lambda c: c.execute(COUNTS_SQL).fetchone(), scan=True)
        return {"open": int(row[0]), "parked": int(row[1])}


# The next claimable task of a task list: (region, domain, kind, task_list, now).
NEXT_TASK_SQL = (
    "SELECT * FROM swf_tasks WHERE region = ? AND domain = ? AND kind = ? AND task_list = ?"
    " AND (claimed_until IS NULL OR claimed_until <= ?)"
    " ORDER BY priority DESC, scheduled_at, run_id, scheduled_event_id LIMIT 1"
)
