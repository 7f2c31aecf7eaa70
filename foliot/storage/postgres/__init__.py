"""The production store: PostgreSQL through asyncpg, on its own asyncio loop in its own thread.

Four parts: `bridge.py` (the crossing from Trio to the asyncio loop), `writer.py` (the pool and
the group-commit writer), `units.py` and `fencing.py` (the PostgreSQL-only statements that write
a batch of units, and their lease checks), `store.py` (the `Store` methods). The statements
both backends share are in `foliot.storage.run_sql`.
"""

from .store import PostgresStore, open_postgres
from .writer import BATCH_MAX, CONNECT_TIMEOUT_S, LIMIT_S, POOL_SIZE, WRITERS

__all__ = [
    "BATCH_MAX",
    "CONNECT_TIMEOUT_S",
    "LIMIT_S",
    "POOL_SIZE",
    "WRITERS",
    "PostgresStore",
    "open_postgres",
]
