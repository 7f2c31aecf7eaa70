"""`SwfRegistryStore` and `SwfExecutionStore` on PostgreSQL, mixed into `PostgresStore`. Writers
run concurrently, so a count-then-insert takes a transaction-scoped advisory lock on its region
(domains) or domain (types) first, a start relies on the partial unique index of open workflow
ids, and a claim locks its row with `FOR UPDATE SKIP LOCKED`."""

from __future__ import annotations

from typing import Any

import asyncpg

from ..core.swf.events import HistoryEvent
from .base import prune_keys
from .pg_calls import PgCalls
from .sql import numbered
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


class SwfPostgres(PgCalls):
    async def add_swf_credential(self, credential: SwfCredential) -> None:
        await self._call(
            lambda c: c.execute(
                "INSERT INTO swf_credentials (access_key_id, secret_enc, created_at, revoked_at)"
                " VALUES ($1, $2, $3, $4)",
                *attrs_tuple(credential),
            ),
            write=True,
        )

    async def get_swf_credential(self, access_key_id: str) -> SwfCredential | None:
        row = await self._call(
            lambda c: c.fetchrow("SELECT * FROM swf_credentials WHERE access_key_id = $1", access_key_id)
        )
        return None if row is None else SwfCredential(**dict(row))

    async def list_swf_credentials(self) -> list[SwfCredential]:
        rows = await self._call(
            lambda c: c.fetch(
                "SELECT * FROM swf_credentials WHERE revoked_at IS NULL ORDER BY created_at, access_key_id"
            )
        )
        return [SwfCredential(**dict(r)) for r in rows]

    async def revoke_swf_credential(self, access_key_id: str, now: int) -> bool:
        status = await self._call(
            lambda c: c.execute(
                "UPDATE swf_credentials SET revoked_at = $2 WHERE access_key_id = $1 AND revoked_at IS NULL",
                access_key_id,
                now,
            ),
            write=True,
        )
        return bool(status == "UPDATE 1")

    async def swf_insert_domain(self, domain: SwfDomain, max_domains: int) -> Insert:
        async def fn(conn: asyncpg.Connection) -> Insert:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"swf-domains/{domain.region}")
            if await conn.fetchval(
                "SELECT 1 FROM swf_domains WHERE region = $1 AND name = $2", domain.region, domain.name
            ):
                return Insert.EXISTS
            count = await conn.fetchval("SELECT COUNT(*) FROM swf_domains WHERE region = $1", domain.region)
            if count >= max_domains:
                return Insert.LIMIT
            await conn.execute(
                "INSERT INTO swf_domains (region, name, status, description, retention_days, tags,"
                " created_at, deprecated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                *attrs_tuple(domain),
            )
            return Insert.OK

        return await self._call(fn, write=True)

    async def swf_get_domain(self, region: str, name: str) -> SwfDomain | None:
        row = await self._call(
            lambda c: c.fetchrow("SELECT * FROM swf_domains WHERE region = $1 AND name = $2", region, name)
        )
        return None if row is None else SwfDomain(**dict(row))

    async def swf_list_domains(
        self, region: str, status: str, after: str | None, reverse: bool, limit: int
    ) -> list[SwfDomain]:
        order, cmp = ("DESC", "<") if reverse else ("ASC", ">")
        sql = "SELECT * FROM swf_domains WHERE region = $1 AND status = $2"
        args: list[Any] = [region, status]
        if after is not None:
            args.append(after)
            sql += f" AND name {cmp} ${len(args)}"
        args.append(limit)
        sql += f" ORDER BY name {order} LIMIT ${len(args)}"
        rows = await self._call(lambda c: c.fetch(sql, *args))
        return [SwfDomain(**dict(r)) for r in rows]

    async def swf_set_domain_status(self, region: str, name: str, status: str, now: int) -> bool:
        result = await self._call(
            lambda c: c.execute(
                "UPDATE swf_domains SET status = $3, deprecated_at = $4"
                " WHERE region = $1 AND name = $2 AND status = $5",
                region,
                name,
                status,
                now if status == DEPRECATED else None,
                other_status(status),
            ),
            write=True,
        )
        return bool(result == "UPDATE 1")

    async def swf_replace_domain_tags(self, region: str, name: str, expected: str, tags: str) -> bool:
        result = await self._call(
            lambda c: c.execute(
                "UPDATE swf_domains SET tags = $4 WHERE region = $1 AND name = $2 AND tags = $3",
                region,
                name,
                expected,
                tags,
            ),
            write=True,
        )
        return bool(result == "UPDATE 1")

    async def swf_insert_type(self, type_: SwfType, max_types: int) -> Insert:
        async def fn(conn: asyncpg.Connection) -> Insert:
            # A row lock on the domain: a concurrent deprecation waits, and so does a concurrent
            # registration in the same domain (the count below stays true until commit).
            status = await conn.fetchval(
                "SELECT status FROM swf_domains WHERE region = $1 AND name = $2 FOR UPDATE",
                type_.region,
                type_.domain,
            )
            if status is None:
                return Insert.NO_DOMAIN
            if status == DEPRECATED:
                return Insert.DOMAIN_DEPRECATED
            key = (type_.region, type_.domain, type_.kind)
            if await conn.fetchval(
                "SELECT 1 FROM swf_types WHERE region = $1 AND domain = $2 AND kind = $3 AND name = $4"
                " AND version = $5",
                *key,
                type_.name,
                type_.version,
            ):
                return Insert.EXISTS
            count = await conn.fetchval(
                "SELECT COUNT(*) FROM swf_types WHERE region = $1 AND domain = $2 AND kind = $3", *key
            )
            if count >= max_types:
                return Insert.LIMIT
            await conn.execute(
                "INSERT INTO swf_types (region, domain, kind, name, version, status, description, config,"
                " created_at, deprecated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                *attrs_tuple(type_),
            )
            return Insert.OK

        return await self._call(fn, write=True)

    async def swf_get_type(
        self, region: str, domain: str, kind: str, name: str, version: str
    ) -> SwfType | None:
        row = await self._call(
            lambda c: c.fetchrow(
                "SELECT * FROM swf_types WHERE region = $1 AND domain = $2 AND kind = $3 AND name = $4"
                " AND version = $5",
                region,
                domain,
                kind,
                name,
                version,
            )
        )
        return None if row is None else SwfType(**dict(row))

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
        sql = "SELECT * FROM swf_types WHERE region = $1 AND domain = $2 AND kind = $3 AND status = $4"
        args: list[Any] = [region, domain, kind, status]
        if name is not None:
            args.append(name)
            sql += f" AND name = ${len(args)}"
        if after is not None:
            args.extend(after)
            sql += f" AND (name, version) {cmp} (${len(args) - 1}, ${len(args)})"
        args.append(limit)
        sql += f" ORDER BY name {order}, version {order} LIMIT ${len(args)}"
        rows = await self._call(lambda c: c.fetch(sql, *args))
        return [SwfType(**dict(r)) for r in rows]

    async def swf_set_type_status(
        self, region: str, domain: str, kind: str, name: str, version: str, status: str, now: int
    ) -> bool:
        result = await self._call(
            lambda c: c.execute(
                "UPDATE swf_types SET status = $6, deprecated_at = $7 WHERE region = $1 AND domain = $2"
                " AND kind = $3 AND name = $4 AND version = $5 AND status = $8",
                region,
                domain,
                kind,
                name,
                version,
                status,
                now if status == DEPRECATED else None,
                other_status(status),
            ),
            write=True,
        )
        return bool(result == "UPDATE 1")

    async def swf_delete_type(self, region: str, domain: str, kind: str, name: str, version: str) -> bool:
        result = await self._call(
            lambda c: c.execute(
                "DELETE FROM swf_types WHERE region = $1 AND domain = $2 AND kind = $3 AND name = $4"
                " AND version = $5 AND status = $6",
                region,
                domain,
                kind,
                name,
                version,
                DEPRECATED,
            ),
            write=True,
        )
        return bool(result == "DELETE 1")

    # ------------------------------------------------------------------ executions

    async def swf_commit(self, unit: SwfUnit) -> None:
        async def fn(conn: asyncpg.Connection) -> None:
            for stmt in unit_statements(unit):
                if stmt.many:
                    await conn.executemany(numbered(stmt.sql), stmt.rows)
                    continue
                status = await conn.execute(numbered(stmt.sql), *stmt.args)
                if stmt.refusal is not None and not status.endswith(" 1"):
                    raise stmt.refusal

        await self._call(fn, write=True, fences=unit.fences)

    async def swf_load(self, region: str, run_id: str) -> SwfStored | None:
        row = await self._call(lambda c: c.fetchrow(numbered(LOAD_SQL), region, run_id))
        return None if row is None else stored_execution(region, row[0], row[1])

    async def swf_find(
        self, region: str, domain: str, workflow_id: str, run_id: str | None = None
    ) -> SwfStored | None:
        sql, args = find_sql(region, domain, workflow_id, run_id)
        row = await self._call(lambda c: c.fetchrow(numbered(sql), *args))
        return None if row is None else stored_execution(region, row[0], row[1])

    async def swf_open_executions(self, after: tuple[str, str] | None, limit: int) -> list[SwfStored]:
        sql, args = open_page_sql(after, limit)
        rows = await self._call(lambda c: c.fetch(numbered(sql), *args))
        return [stored_execution(r[0], r[1], r[2]) for r in rows]

    async def swf_events(
        self, region: str, run_id: str, after: int | None, reverse: bool, limit: int
    ) -> list[HistoryEvent]:
        sql, args = events_sql(region, run_id, after, reverse, limit)
        rows = await self._call(lambda c: c.fetch(numbered(sql), *args))
        return [event_from_row(*r) for r in rows]

    async def swf_list_executions(
        self, query: SwfQuery, after: SwfCursor | None, limit: int
    ) -> list[SwfStored]:
        sql, args = list_sql(query, after, limit)
        rows = await self._call(lambda c: c.fetch(numbered(sql), *args))
        return [stored_execution(query.region, r[0], r[1]) for r in rows]

    async def swf_count_executions(self, query: SwfQuery, cap: int) -> int:
        sql, args = count_sql(query, cap)
        return int(await self._call(lambda c: c.fetchval(numbered(sql), *args)))

    async def swf_claim_task(
        self, region: str, domain: str, kind: str, task_list: str, now: int, lease_ms: int
    ) -> SwfTask | None:
        row = await self._call(
            lambda c: c.fetchrow(
                CLAIM_SQL,
                region,
                domain,
                kind,
                task_list,
                now,
                now + lease_ms,
            ),
            write=True,
        )
        return None if row is None else SwfTask(**dict(row))

    async def swf_release_task(self, region: str, run_id: str, scheduled_event_id: int) -> None:
        await self._call(
            lambda c: c.execute(numbered(RELEASE_SQL), region, run_id, scheduled_event_id), write=True
        )

    async def swf_count_pending(self, region: str, domain: str, kind: str, task_list: str, cap: int) -> int:
        args = (region, domain, kind, task_list, cap)
        return int(await self._call(lambda c: c.fetchval(numbered(PENDING_COUNT_SQL), *args)))

    async def swf_prune_closed(self, now: int, limit: int) -> int:
        async def fn(conn: asyncpg.Connection) -> int:
            candidates: list[tuple[str, str, int]] = []
            for region, domain, days in await conn.fetch(
                "SELECT region, name, retention_days FROM swf_domains ORDER BY region, name"
            ):
                if len(candidates) >= limit:
                    break
                rows = await conn.fetch(
                    numbered(EXPIRED_SQL),
                    region,
                    domain,
                    now - retention_ms(days),
                    limit - len(candidates),
                )
                candidates += [(r[0], r[1], r[2]) for r in rows]
            keys = prune_keys(candidates, limit)
            if keys:
                regions, runs = [k[0] for k in keys], [k[1] for k in keys]
                for table in PRUNED_TABLES:
                    await conn.execute(
                        f"DELETE FROM {table} t USING unnest($1::text[], $2::text[]) AS k(region, run_id)"
                        " WHERE t.region = k.region AND t.run_id = k.run_id",
                        regions,
                        runs,
                    )
            return len(keys)

        return await self._call(fn, write=True)

    async def swf_owed_executions(self, after: tuple[str, str] | None, limit: int) -> list[SwfStored]:
        sql, args = keyed_page_sql(OWED_PAGE_SQL, "o", after, limit)
        rows = await self._call(lambda c: c.fetch(numbered(sql), *args))
        return [stored_execution(r[0], r[1], r[2]) for r in rows]

    async def swf_settle_owed(self, region: str, run_id: str) -> None:
        await self._call(lambda c: c.execute(numbered(SETTLE_OWED), region, run_id), write=True)

    async def swf_put_lambda(self, function: SwfLambdaFunction) -> SwfLambdaFunction:
        row = await self._call(lambda c: c.fetchrow(numbered(PUT_LAMBDA), *attrs_tuple(function)), write=True)
        return SwfLambdaFunction(*row)

    async def swf_get_lambda(self, region: str, name: str) -> SwfLambdaFunction | None:
        row = await self._call(lambda c: c.fetchrow(numbered(GET_LAMBDA), region, name))
        return None if row is None else SwfLambdaFunction(*row)

    async def swf_list_lambdas(self, region: str | None, limit: int) -> list[SwfLambdaFunction]:
        sql, args = lambdas_sql(region, limit)
        rows = await self._call(lambda c: c.fetch(numbered(sql), *args))
        return [SwfLambdaFunction(*r) for r in rows]

    async def swf_delete_lambda(self, region: str, name: str) -> bool:
        status = await self._call(lambda c: c.execute(numbered(DELETE_LAMBDA), region, name), write=True)
        return bool(status.endswith(" 1"))

    async def swf_park(self, parked: SwfParked) -> None:
        await self._call(lambda c: c.execute(numbered(PUT_PARKED), *attrs_tuple(parked)), write=True)

    async def swf_get_parked(self, region: str, run_id: str) -> SwfParked | None:
        row = await self._call(lambda c: c.fetchrow(numbered(GET_PARKED), region, run_id))
        return None if row is None else SwfParked(*row)

    async def swf_list_parked(self, after: tuple[str, str] | None, limit: int) -> list[SwfParked]:
        base = "SELECT p.region, p.run_id, p.reason, p.parked_at FROM swf_parked p"
        sql, args = keyed_page_sql(base, "p", after, limit)
        rows = await self._call(lambda c: c.fetch(numbered(sql), *args))
        return [SwfParked(*r) for r in rows]

    async def swf_unpark(self, region: str, run_id: str) -> bool:
        status = await self._call(lambda c: c.execute(numbered(UNPARK), region, run_id), write=True)
        return bool(status.endswith(" 1"))

    async def swf_counts(self) -> dict[str, int]:
        row = await self._call(lambda c: c.fetchrow(COUNTS_SQL))
        return {"open": int(row[0]), "parked": int(row[1])}


# Claim the next claimable task of a task list: (region, domain, kind, task_list, now, until).
CLAIM_SQL = (
    "UPDATE swf_tasks t SET claimed_until = $6 FROM (SELECT region, run_id, scheduled_event_id"
    " FROM swf_tasks WHERE region = $1 AND domain = $2 AND kind = $3 AND task_list = $4"
    " AND (claimed_until IS NULL OR claimed_until <= $5)"
    " ORDER BY priority DESC, scheduled_at, run_id, scheduled_event_id LIMIT 1"
    " FOR UPDATE SKIP LOCKED) AS c WHERE t.region = c.region AND t.run_id = c.run_id"
    " AND t.scheduled_event_id = c.scheduled_event_id RETURNING t.*"
)
