"""Retention under MockClock: closed runs and idempotency records go, open runs never do."""

from __future__ import annotations

from typing import Any

import pytest
from trio.testing import MockClock

from foliot.core.swf import messages as m
from foliot.core.views import run_view
from foliot.storage.swf import REGISTERED, SwfDomain

from ..swf.store_kit import start as start_swf
from .conftest import DAY, Env, advance

HOUR = 3_600.0
TASK = {"name": "t", "steps": [{"name": "t", "type": "task"}]}
WAIT = {"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}


async def start(env: Env, key: str, request_hash: str = "h") -> tuple[str, bool]:
    body, created = await env.engine.runs.start(
        app="app",
        workflow="w",
        version=None,
        input=None,
        business_key=None,
        run_timeout_ms=None,
        idempotency_key=key,
        request_hash=request_hash,
        render=run_view,
    )
    return str(body["runId"]), created


@pytest.mark.parametrize(
    "settings_overrides", [{"retention_ms": 30 * 86_400_000, "prune_interval_ms": 3_600_000}]
)
async def test_closed_runs_vanish_after_the_retention_and_open_runs_never(
    env: Env, autojump_clock: MockClock
) -> None:
    await env.register(TASK)
    await env.register(WAIT)
    closed = [await env.start("t") for _ in range(3)]
    for run_id in closed:
        await env.until(run_id, "completed")
    waiting = await env.start("w")
    await env.until(waiting, "waiting")
    store = env.engine.store
    token = (await store.list_events(closed[0], 0, 100))[2].data["idempotencyKey"]
    assert token

    await advance(29 * DAY)
    for run_id in closed:
        assert await store.get_run(run_id) is not None
    assert env.engine.pruner.pruned_runs == 0

    await advance(1 * DAY + 2 * HOUR)  # past closedAt + 30d, and a pass since
    for run_id in closed:
        assert await store.get_run(run_id) is None
        assert await store.list_events(run_id, 0, 100) == []
    assert await store.open_tasks() == []
    assert env.engine.pruner.pruned_runs == 3
    assert env.engine.pruner.last_run_at is not None
    assert env.engine.pruner.last_run_at >= env.engine.clock.now() - 3_600_000

    await advance(90 * DAY)  # an open run is never pruned, however old
    run = await store.get_run(waiting)
    assert run is not None and run.status == "waiting"
    assert len(await store.list_events(waiting, 0, 100)) > 0
    assert env.engine.pruner.pruned_runs == 3 and env.engine.pruner.failures == 0


@pytest.mark.parametrize(
    "settings_overrides",
    [
        pytest.param({"prune_interval_ms": 3_600_000}, id="pruned"),
        pytest.param({"prune_interval_ms": 30 * 86_400_000}, id="expired-not-yet-pruned"),
    ],
)
async def test_an_expired_idempotency_key_starts_a_new_run(
    env: Env, autojump_clock: MockClock, settings_overrides: dict[str, Any]
) -> None:
    await env.register(WAIT)
    first, created = await start(env, "key-1")
    assert created
    await advance(23 * HOUR)
    assert await start(env, "key-1") == (first, False)  # within 24 h: the same run

    await advance(2 * HOUR)
    pruned = settings_overrides["prune_interval_ms"] < 86_400_000
    record = await env.engine.store.get_idempotency("app", "key-1")
    assert (record is None) == pruned
    assert env.engine.pruner.pruned_idempotency == (1 if pruned else 0)
    second, created = await start(env, "key-1", request_hash="another body")
    assert created and second != first  # a new run; and a new body is no reuse error any more
    assert await start(env, "key-1", request_hash="another body") == (second, False)
    both = [await env.engine.store.get_run(r) for r in (first, second)]
    assert all(r is not None and r.status == "waiting" for r in both)


@pytest.mark.parametrize("settings_overrides", [{"retention_ms": None, "idempotency_ttl_ms": None}])
async def test_never_keeps_everything(env: Env, autojump_clock: MockClock) -> None:
    await env.register(TASK)
    run_id = await env.start("t")
    await env.until(run_id, "completed")
    await advance(100 * DAY)  # past the 30-day default
    assert await env.engine.store.get_run(run_id) is not None
    assert env.engine.pruner.pruned_runs == 0 and env.engine.pruner.pruned_idempotency == 0


@pytest.mark.parametrize("settings_overrides", [{"retention_ms": None, "prune_interval_ms": 3_600_000}])
async def test_swf_executions_go_after_their_domains_retention(env: Env, autojump_clock: MockClock) -> None:
    store, now, region = env.engine.store, env.engine.clock.now(), "us-east-1"
    await store.swf_insert_domain(SwfDomain(region, "week", REGISTERED, None, "7", "[]", now), 100)
    await store.swf_insert_domain(SwfDomain(region, "none", REGISTERED, None, "NONE", "[]", now), 100)
    await start_swf(store, "wf-open", "r-open", now, domain="week")
    week = await start_swf(store, "wf-week", "r-week", now, domain="week")
    await week.complete(now + 1)
    at_once = await start_swf(store, "wf-none", "r-none", now, domain="none")
    await at_once.send(m.Terminate(), now + 1)

    await advance(2 * HOUR)  # a pass since: NONE keeps a closed execution no time at all
    assert await store.swf_load(region, "r-none") is None
    assert await store.swf_load(region, "r-week") is not None
    assert env.engine.pruner.pruned_swf_executions == 1

    await advance(7 * DAY)
    assert await store.swf_load(region, "r-week") is None
    assert await store.swf_events(region, "r-week", None, False, 10) == []
    assert await store.swf_load(region, "r-open") is not None  # open: never, however old
    assert env.engine.pruner.pruned_swf_executions == 2 and env.engine.pruner.failures == 0


async def test_idle_rate_limit_buckets_go_a_minute_after_their_last_slot(
    env: Env, autojump_clock: MockClock
) -> None:
    """The pruner deletes a bucket once its TAT is a minute past, in bounded batches; a bucket
    in use is kept, and a pruned one is as if never used."""
    store, now = env.engine.store, env.engine.clock.now
    for n in range(5):
        await store.take_rate_tokens([(f"idle-{n}", 1_000_000)], 1, now() * 1000)  # TAT now + 1 s
    await store.take_rate_tokens([("later", 10_000_000)], 1, now() * 1000)  # TAT now + 10 s
    await advance(61.5)
    await env.engine.pruner.prune_once()
    assert env.engine.pruner.pruned_rate_buckets == 5
    assert [await store.rate_bucket(f"idle-{n}") for n in range(5)] == [None] * 5
    assert await store.rate_bucket("later") is not None  # 51.5 s past its TAT: not yet
    await store.take_rate_tokens([("later", 10_000_000)], 1, now() * 1000)  # in use again
    await advance(30)
    await env.engine.pruner.prune_once()
    assert await store.rate_bucket("later") is not None
    await advance(41)
    pruner = env.engine.pruner
    before = pruner.pruned_rate_buckets
    assert await store.prune_rate_buckets((now() - 60_000) * 1000, 1) == 1  # at most `limit`
    assert pruner.pruned_rate_buckets == before
    assert await store.rate_bucket("later") is None
    # As a bucket never used: a token is free now.
    assert await store.take_rate_tokens([("later", 10_000_000)], 1, now() * 1000) == (1, None)
    assert await store.rate_bucket("later") == (now() + 10_000) * 1000


@pytest.mark.parametrize("settings_overrides", [{"prune_interval_ms": 3_600_000}])
async def test_fire_records_whose_run_is_gone_are_swept(env: Env, autojump_clock: MockClock) -> None:
    """Fire records of runs pruned before they went together are deleted by the pruner's sweep."""
    store: Any = env.engine.store
    sql = "INSERT INTO schedule_fires (app, name, scheduled_time, run_id, fired_at) VALUES (?, ?, ?, ?, ?)"
    for at in range(3):
        await store._change(sql, "app", "nightly", at, f"run_gone_{at}", 0)
    await advance(HOUR + 1)
    assert [await store.get_schedule_fire("app", "nightly", at) for at in range(3)] == [None] * 3
    assert env.engine.pruner.pruned_schedule_fires == 3 and env.engine.pruner.failures == 0
