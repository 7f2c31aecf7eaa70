"""The SQLite writer thread outlives any one job: whatever a job raises is that job's error."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
import trio

from foliot.core.errors import StorageError
from foliot.storage import checkpoint
from foliot.storage.checkpoint import BACKSTOP_PAGES
from foliot.storage.sqlite import SqliteStore, open_sqlite


def _recurse(depth: int) -> int:
    return 0 if depth == 0 else 1 + _recurse(depth - 1)


@pytest.mark.parametrize("inline", [False, True])
async def test_a_job_raising_any_exception_fails_alone(tmp_path: Path, inline: bool) -> None:
    store = SqliteStore(str(tmp_path / "w.db"), inline=inline)
    store.start_writer()
    await store._write(lambda conn: conn.execute("CREATE TABLE t (v TEXT)"))

    def insert(value: str) -> None:
        def fn(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES (?)", (value,))

        return fn  # type: ignore[return-value]

    def deep(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES ('half-done')")
        _recurse(100_000)  # RecursionError, as a deep document's conversion raised

    def surrogate(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (?)", ("\ud800",))  # UnicodeEncodeError

    results: dict[str, BaseException | None] = {}

    async def write(name: str, fn: object) -> None:
        try:
            await store._write(fn)  # type: ignore[arg-type]
        except Exception as exc:
            results[name] = exc
        else:
            results[name] = None

    # Queued together, so the non-inline writer commits them as one batch.
    async with trio.open_nursery() as batch:
        batch.start_soon(write, "before", insert("before"))
        batch.start_soon(write, "deep", deep)
        batch.start_soon(write, "surrogate", surrogate)
        batch.start_soon(write, "after", insert("after"))
    assert results["before"] is None and results["after"] is None
    assert isinstance(results["deep"], RecursionError | StorageError)
    assert isinstance(results["surrogate"], UnicodeEncodeError | StorageError)

    # The writer is still alive, and the failed jobs left nothing behind.
    await store._write(insert("later"))
    rows = await store._read(lambda conn: sorted(r[0] for r in conn.execute("SELECT v FROM t")))
    assert rows == ["after", "before", "later"]
    assert store.batches == (6 if inline else 3)  # threaded: the four queued together in one
    assert await store.stop_writer(10)
    await store.close()


async def test_closing_waits_for_the_batch_on_the_writer_thread(tmp_path: Path) -> None:
    """The connections are closed only once no thread uses them (closing one under a running
    statement crashed the process with a segmentation fault)."""
    started, release = threading.Event(), threading.Event()
    outcome: list[object] = []

    def slow(conn: sqlite3.Connection) -> int:
        started.set()
        release.wait(10)
        return int(conn.execute("SELECT 41 + 1").fetchone()[0])

    async def writer(store: SqliteStore) -> None:
        try:
            outcome.append(await store._write(slow))
        except StorageError as exc:
            outcome.append(exc)

    async with trio.open_nursery() as outer, open_sqlite(str(tmp_path / "c.db")) as store:
        outer.start_soon(writer, store)
        await trio.to_thread.run_sync(started.wait)
        # Leave the store while the batch is on the writer thread; let it end a moment later.
        threading.Timer(0.05, release.set).start()
    assert outcome == [42]  # the statement ran on an open connection, then it was closed


async def test_the_log_is_checkpointed_by_a_thread_of_its_own_not_by_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoint, "INTERVAL_S", 0.0)  # checkpoint at once after a commit
    path = tmp_path / "c.db"
    async with open_sqlite(str(path)) as store:
        writer = store._writer
        # The writer's own checkpoints are only a backstop, far past SQLite's 1,000 pages.
        assert writer.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == BACKSTOP_PAGES
        await store._write(lambda conn: conn.execute("CREATE TABLE t (v BLOB)"))
        for _ in range(20):  # ~1,300 pages of log: past SQLite's default threshold
            await store._write(lambda conn: conn.execute("INSERT INTO t VALUES (randomblob(250000))"))
        with trio.fail_after(30):
            while store.wal_checkpoints == 0:  # the thread runs it after the last commit
                await trio.to_thread.run_sync(lambda: threading.Event().wait(0.01))
        copied = store._checkpointer.copied if store._checkpointer else 0
        assert copied > 1_000
    # Everything committed is there after a reopen.
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 20
    conn.close()


async def test_an_inline_store_keeps_sqlites_own_checkpoints(tmp_path: Path) -> None:
    async with open_sqlite(str(tmp_path / "i.db"), inline=True) as store:
        assert store._checkpointer is None and store.wal_checkpoints == 0
        assert store._writer.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
