"""A node's name in the cluster, kept across restarts in its data directory.

On PostgreSQL every node holds partition leases under its name (`foliot.storage.cluster`). A
node restarted under the same name takes its unexpired leases back at once (new epochs fence
whatever the old process still writes); under a new name it must wait for them to expire (the
lease TTL), and meanwhile every request for those partitions is forwarded to the dead process's
address. A single node restarted after `kill -9` would answer `503 not_owner` for a whole TTL
while `/readyz` said ready.

So without `FOLIOT_NODE_ID` the name is generated once and kept in `<data dir>/node-id`, the
way a database server keeps its system identifier with its data. The file is held under an
exclusive `flock` (on `node-id.lock`) while the node runs: a second process started on the same
data directory cannot take the name (two live processes under one name would keep fencing each
other) and runs under a fresh one instead, with a warning. The lock dies with the process, so
`kill -9` leaves nothing to clean up.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from ..core.config import NODE_ID_RE

log = logging.getLogger("foliot.node")

FILE = "node-id"


def fresh() -> str:
    return "node-" + secrets.token_hex(6)


@contextlib.contextmanager
def node_id(given: str | None, data_dir: str) -> Iterator[str]:
    """The node's name while the block runs: `given` (FOLIOT_NODE_ID) if any, else the one
    kept in `data_dir` (created on first use), else a fresh one if another process holds it."""
    if given:
        yield given
        return
    folder = Path(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / (FILE + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            name = fresh()
            log.warning(
                "another process serves from %s under its node id; this one is %s "
                "(give each node its own FOLIOT_DATA_DIR or FOLIOT_NODE_ID)",
                folder,
                name,
            )
            yield name
            return
        yield _kept(folder / FILE)
    finally:
        os.close(fd)  # releases the lock


def _kept(path: Path) -> str:
    """The name in `path`, or a new one written there (atomically) if it holds none."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        name = path.read_text().strip()
        if NODE_ID_RE.fullmatch(name):
            return name
    name = fresh()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(name + "\n")
    os.replace(tmp, path)
    return name
