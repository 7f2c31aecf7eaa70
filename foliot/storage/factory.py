"""Open the store a database URL names: `sqlite:///path` (default) or `postgresql://...`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from .base import Store


def sqlite_path(url: str) -> str:
    if url == "sqlite://:memory:" or url == "sqlite:///:memory:":
        return ":memory:"
    if not url.startswith("sqlite:///"):
        raise ValueError(f"not a sqlite URL: {url!r}")
    return url[len("sqlite:///") :]


@asynccontextmanager
async def open_store(url: str, *, pg_session: Mapping[str, str] | None = None) -> AsyncIterator[Store]:
    """`pg_session`: settings every PostgreSQL session starts with (`cluster.node_session`)."""
    if url.startswith("sqlite:"):
        from .sqlite import open_sqlite

        async with open_sqlite(sqlite_path(url)) as store:
            yield store
    elif url.startswith(("postgresql://", "postgres://")):
        from .postgres import open_postgres

        async with open_postgres(url, session=pg_session) as pg:
            yield pg
    else:
        raise SystemExit(f"FOLIOT_DATABASE_URL must start with sqlite:/// or postgresql://, got {url!r}")
