"""What the PostgreSQL store's mixins (`SwfPostgres`, `ClusterPostgres`) call on it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import asyncpg

from .fence import Fence

T = TypeVar("T")


class PgCalls:
    """Typing only: `PostgresStore._call`, which each mixin's methods use."""

    if TYPE_CHECKING:  # provided by PostgresStore

        async def _call(
            self,
            fn: Callable[[asyncpg.Connection], Awaitable[T]],
            *,
            write: bool = False,
            limit_s: float | None = None,
            fences: tuple[Fence, ...] = (),
            lane: bool = False,
        ) -> T:
            raise NotImplementedError
