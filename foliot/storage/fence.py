"""What a write of an actor carries when several nodes share one PostgreSQL: the lease it was
made under. The store writes the unit only while `cluster_leases` still shows this node holding
that partition at that epoch, unexpired on the database's clock; otherwise it refuses the unit
with `Fenced` and writes nothing of it (`foliot.storage.postgres`). The lease rows are read FOR
SHARE as the transaction begins (so no other node can take them until it ends) and checked
unexpired again after its last write: a node that stalled in between commits nothing under a
lease that ran out. SQLite is single-node and
never carries one."""

from __future__ import annotations

import attrs


@attrs.frozen
class Fence:
    node_id: str
    partition: int
    epoch: int
