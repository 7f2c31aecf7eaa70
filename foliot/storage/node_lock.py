"""SQLite stays single-node: the process serving a SQLite database holds an exclusive lock.

Two processes serving one SQLite file would each recover the same runs, fire the same timers
and push the same tasks. `foliot serve` therefore takes a `flock` on `<database>.lock` for as
long as it serves and refuses to start, with a message naming the holder, when another process
has it. The kernel drops the lock when its holder exits, `kill -9` included, so a restart after
a crash is never refused by a stale lock file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        return "another process"
    return f"process {text}" if text.isdigit() else "another process"


@contextlib.contextmanager
def sqlite_node_lock(db_path: str) -> Iterator[None]:
    """Hold the single-node lock of the SQLite database at `db_path` (nothing for `:memory:`)."""
    if db_path == ":memory:":
        yield
        return
    lock_path = f"{db_path}.lock"
    Path(lock_path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                raise
            raise SystemExit(
                f"{_holder(fd)} is already serving the SQLite database {db_path}; SQLite is "
                "single-node (one process per database file). Stop that process, or run several "
                "nodes on PostgreSQL (FOLIOT_DATABASE_URL=postgresql://...; docs/operations.md)."
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # closing the only descriptor releases the lock
