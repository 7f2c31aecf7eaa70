"""The SQLite writer thread outlives any one job: whatever a job raises is that job's error."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
import trio

from foliot.errors import StorageError
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
