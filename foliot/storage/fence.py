"""What a write of an actor carries when several nodes share one PostgreSQL: the lease it was
made under. The store writes the unit only while `cluster_leases` still shows this node holding
that partition at that epoch, unexpired on the database's clock; otherwise it refuses the unit
with `Fenced` and writes nothing of it (`foliot.storage.postgres`). SQLite is single-node and
never carries one."""

from __future__ import annotations

import attrs


@attrs.frozen
class Fence:
    node_id: str
    partition: int
    epoch: int
