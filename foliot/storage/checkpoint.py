"""Copying SQLite's write-ahead log back into the database from a thread of its own.

In WAL mode a commit appends the pages it changed to the log and syncs the log; a checkpoint
later copies the log's pages into the database file and syncs that. By default the connection
that commits runs the checkpoint itself, inside its commit, whenever the log has passed 1,000
pages. With a database much larger than the pages in use (a million parked runs), every commit
changes pages of its own, spread over the file: each checkpoint then writes ~1,000 scattered
pages and syncs the file, and the writer, the one thread every commit goes through, spent about
70 % of its time in `COMMIT` (`bench/million.py --profile`, 200,000 runs, signals at 100/s),
so commits queued for seconds below the CPU's capacity.

Here the writer's connection checkpoints only as a backstop (`BACKSTOP_PAGES`, when this thread
has fallen far behind) and `Checkpointer` runs `PRAGMA wal_checkpoint(PASSIVE)` on its own
connection at most every `INTERVAL_S` after a commit. A passive checkpoint takes no lock a
writer or a reader waits for; it copies what no reader still needs, and the writer starts the
log over once everything is copied. Durability is the commit's own sync of the log, unchanged.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

log = logging.getLogger("foliot.storage")

INTERVAL_S = 0.25  # a checkpoint at most this often while commits go on
BACKSTOP_PAGES = 10_000  # the writer checkpoints itself past this many log pages (~40 MB)
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024  # the log file is cut back to this once started over


class Checkpointer:
    """The checkpointing thread; `committed()` after each commit (from any thread)."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], interval_s: float = INTERVAL_S) -> None:
        self._connect = connect
        self._interval_s = interval_s
        self._pending = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.checkpoints = 0  # passive checkpoints run
        self.copied = 0  # log pages they copied back

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="foliot-sqlite-checkpoint", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        self._pending.set()

    def stop(self, timeout_s: float) -> None:
        """Stop the thread (it closes its connection); the last checkpoint is the one SQLite
        runs when the last connection to the database closes."""
        self._stopping.set()
        self._pending.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        try:
            conn = self._connect()
            conn.execute("PRAGMA wal_autocheckpoint=0")
        except sqlite3.Error:
            log.exception("the SQLite checkpoint thread could not open the database")
            return
        try:
            while True:
                self._pending.wait()
                if self._stopping.is_set():
                    return
                # Let the log gather a few commits: pages they share are copied once.
                if self._stopping.wait(self._interval_s):
                    return
                self._pending.clear()
                try:
                    _busy, _log_pages, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error as exc:  # the writer's backstop checkpoints meanwhile
                    log.warning("SQLite checkpoint failed: %s", exc)
                    continue
                self.checkpoints += 1
                self.copied += max(0, copied)
        finally:
            conn.close()
