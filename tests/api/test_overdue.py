"""GET /admin/runs/overdue on both stores: grouping, auth and bad queries."""

from __future__ import annotations

import attrs
import pytest

from foliot.storage.base import UnitOfWork

from ..conftest import Api

WAIT = {"name": "w", "steps": [{"name": "pay", "type": "wait", "signal": "paid"}]}
HOUR = 3_600_000


async def test_overdue_groups(api: Api) -> None:
    await api.register(WAIT)
    ids = [(await api.start("w"))["runId"] for _ in range(3)]
    r = await api.client.get("/admin/runs/overdue", params={"olderThan": "1h"}, headers=api.admin())
    assert r.status_code == 200 and r.json() == {"groups": []}
    # Two of them have waited for a day (rows as a day of waiting leaves them).
    store = api.engine.store
    for rid in ids[:2]:
        run = await store.get_run(rid)
        assert run is not None
        aged = attrs.evolve(run, step_since=run.step_since - 24 * HOUR, seq=run.seq + 1)
        await store.commit(UnitOfWork(aged, run.seq))
    r = await api.client.get("/admin/runs/overdue", params={"olderThan": "2h"}, headers=api.admin())
    groups = r.json()["groups"]
    assert len(groups) == 1 and groups[0]["count"] == 2
    assert {k: groups[0][k] for k in ("app", "workflow", "step", "status")} == {
        "app": "orders",
        "workflow": "w",
        "step": "pay",
        "status": "waiting",
    }
    assert groups[0]["oldestSince"].endswith("Z")
    # Default threshold: 1 h.
    r = await api.client.get("/admin/runs/overdue", headers=api.admin())
    assert r.json()["groups"][0]["count"] == 2


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"olderThan": "1 hour"}, "olderThan"),
        ({"olderThan": "1.5h"}, "olderThan"),
        ({"limit": "0"}, "limit"),
        ({"x": "1"}, "x"),
    ],
)
async def test_bad_queries(api: Api, params: dict[str, str], field: str) -> None:
    r = await api.client.get("/admin/runs/overdue", params=params, headers=api.admin())
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    assert field in r.json()["error"]["message"] or r.json()["error"].get("field") == field


async def test_admin_only(api: Api) -> None:
    assert (await api.client.get("/admin/runs/overdue")).status_code == 401
    assert (await api.client.get("/admin/runs/overdue", headers=api.auth())).status_code == 403
