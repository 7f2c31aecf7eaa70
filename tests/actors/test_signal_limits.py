"""Signals through the actor and the store: bounded buffers, dedupe by the store's unique key."""

from __future__ import annotations

import json

import pytest
from trio.testing import MockClock

from foliot.core.workflow import machine
from foliot.storage.sqlite import SqliteStore

from .conftest import Env, advance

TWO_WAITS = {
    "name": "w",
    "steps": [{"name": "w1", "type": "wait", "signal": "go"}, {"name": "w2", "type": "wait", "signal": "go"}],
}


def stored_doc(env: Env, run_id: str) -> dict[str, object]:
    store = env.engine.store
    assert isinstance(store, SqliteStore)
    row = store._reader.execute("SELECT doc FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    doc: dict[str, object] = json.loads(row["doc"])
    return doc


async def signal(env: Env, run_id: str, name: str, payload: object = None, sid: str | None = None) -> object:
    reply, _ = await env.engine.runs.ask(run_id, machine.SignalIn(name, payload, sid))
    return reply


async def test_a_signal_id_taken_before_is_a_duplicate_even_after_passivation_and_closing(
    env: Env, autojump_clock: MockClock
) -> None:
    await env.register(TWO_WAITS)
    run_id = await env.start("w")
    await env.until(run_id, "waiting")
    assert await signal(env, run_id, "go", 1, "s1") == machine.Ok("delivered")
    events = len(await env.engine.store.list_events(run_id, 0, 1000))

    # The run waits for `go` again, but s1 was consumed: the store's unique key says duplicate,
    # and nothing is committed (no event, the run still waits at w2).
    assert await signal(env, run_id, "go", 2, "s1") == machine.Ok("duplicate")
    assert len(await env.engine.store.list_events(run_id, 0, 1000)) == events
    run = await env.engine.runs.document(run_id)
    assert run is not None and run.current_step == "w2" and run.status == "waiting"
    assert await env.engine.store.signal_taken(run_id, "s1")
    assert "signal_ids" not in stored_doc(env, run_id)  # the ids live in their own table

    await advance(61)  # passivated: the answer comes from storage, not from memory
    assert env.engine.supervisor.actors == {}
    assert await signal(env, run_id, "go", 3, "s1") == machine.Ok("duplicate")

    assert await signal(env, run_id, "go", 4, "s2") == machine.Ok("delivered")
    closed = await env.until(run_id, "completed")
    assert closed.state == {"w1": 1, "w2": 4}
    # Retries after the run closed are still duplicates, not errors; a new id is refused.
    assert await signal(env, run_id, "go", 5, "s1") == machine.Ok("duplicate")
    assert await signal(env, run_id, "go", 5, "s2") == machine.Ok("duplicate")
    refused = await signal(env, run_id, "go", 5, "s3")
    assert isinstance(refused, machine.Rejected) and refused.code == "run_closed"


@pytest.mark.parametrize("settings_overrides", [{"signal_buffer_max": 3}])
async def test_a_full_buffer_refuses_stores_nothing_and_still_delivers(
    env: Env, autojump_clock: MockClock
) -> None:
    await env.register(TWO_WAITS)
    run_id = await env.start("w")
    await env.until(run_id, "waiting")
    assert await signal(env, run_id, "go", "first", "g1") == machine.Ok("delivered")
    for i in range(3):
        assert await signal(env, run_id, "other", i, f"o{i}") == machine.Ok("buffered")
    before = await env.engine.store.get_run(run_id)
    events = len(await env.engine.store.list_events(run_id, 0, 1000))

    refused = await signal(env, run_id, "other", 3, "o3")
    assert isinstance(refused, machine.Rejected)
    assert (refused.status, refused.code) == (409, "signal_buffer_full")
    assert await env.engine.store.get_run(run_id) == before
    assert len(await env.engine.store.list_events(run_id, 0, 1000)) == events
    assert not await env.engine.store.signal_taken(run_id, "o3")

    # Retries of ids the run took are duplicates, full buffer or not (buffered or consumed).
    assert await signal(env, run_id, "other", 0, "o0") == machine.Ok("duplicate")
    assert await signal(env, run_id, "other", "again", "g1") == machine.Ok("duplicate")
    # The signal the run waits for is never refused by the bounds.
    assert await signal(env, run_id, "go", "second", "g2") == machine.Ok("delivered")
    done = await env.until(run_id, "completed")
    assert [s.payload for s in done.buffer] == [0, 1, 2]


@pytest.mark.parametrize("settings_overrides", [{"signal_buffer_max_bytes": 600_000}])
async def test_buffered_bytes_are_bounded(env: Env, autojump_clock: MockClock) -> None:
    await env.register(TWO_WAITS)
    run_id = await env.start("w")
    await env.until(run_id, "waiting")
    big = "x" * 250_000
    assert await signal(env, run_id, "other", big) == machine.Ok("buffered")
    assert await signal(env, run_id, "other", big) == machine.Ok("buffered")
    refused = await signal(env, run_id, "other", big)
    assert isinstance(refused, machine.Rejected)
    assert (refused.status, refused.code) == (413, "signal_buffer_too_large")
    assert len(json.dumps(stored_doc(env, run_id))) < 600_000
    assert await signal(env, run_id, "go", big) == machine.Ok("delivered")
