"""Flow control made visible (issue 23), on both stores: a queued run's place on its console
page, each concurrency key's active / waiting counts on the workflow page (a bounded store
read), and `foliot_queued_runs` per workflow in `/metrics` under the label cap."""

from __future__ import annotations

import html
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ..conftest import ADMIN, Api
from .test_console import browser, login

LIMITED = {
    "name": "per-customer",
    "concurrency": {"limit": 2, "key": "input.customer"},
    "steps": [{"name": "hold", "type": "wait", "signal": "go"}],
}


async def start_many(api: Api, workflow: str, customers: list[str]) -> list[str]:
    return [(await api.start(workflow, {"customer": c}))["runId"] for c in customers]


async def queued_samples(api: Api) -> dict[tuple[str, str], float]:
    text = (await api.client.get("/metrics", headers=api.admin())).text
    return {
        (s.labels["app"], s.labels["workflow"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "foliot_queued_runs"
        for s in family.samples
    }


async def test_the_store_counts_each_keys_active_and_waiting_runs(api: Api) -> None:
    await api.register(LIMITED)
    await api.register({**LIMITED, "name": "per-customer-2"})  # a prefix of the other's keys' text
    await start_many(api, "per-customer", ["a"] * 5 + ["b"] * 3 + ["c"])
    await start_many(api, "per-customer-2", ["a"] * 3)
    store = api.engine.store
    assert await store.key_counts("orders", "per-customer", 50) == [
        ("a", 2, 3),  # most waiting first
        ("b", 2, 1),
        ("c", 1, 0),  # holding slots only
    ]
    assert await store.key_counts("orders", "per-customer-2", 50) == [("a", 2, 1)]
    assert await store.key_counts("orders", "per-customer", 1) == [("a", 2, 3)]
    assert await store.key_counts("orders", "nothing", 50) == []
    assert await store.queued_by_workflow() == {
        ("orders", "per-customer"): 4,
        ("orders", "per-customer-2"): 1,
    }


async def test_the_console_shows_a_queued_runs_place_and_the_workflows_keys(api: Api) -> None:
    await api.register(LIMITED)
    ids = await start_many(api, "per-customer", ["a&<b>"] * 4 + ["z"])
    async with browser(api) as c:
        await login(api, ADMIN, c)
        page = await c.get(f"/console/apps/orders/runs/{ids[3]}")
        assert page.status_code == 200, page.text
        slot = page.text.split('id="slot"', 1)[1].split("</div>", 1)[0]
        cells = [html.unescape(x) for x in re.findall(r"<td>(.*?)</td>", slot, re.S)]
        assert cells == ["<code>customer=a&<b></code>", "1", "2 of 2"], cells
        assert "a&<b>" not in page.text  # escaped
        admitted = await c.get(f"/console/apps/orders/runs/{ids[0]}")
        assert 'id="slot"' not in admitted.text  # a run holding its slot has no place to show
        wf = await c.get("/console/apps/orders/workflows/per-customer")
        assert wf.status_code == 200, wf.text
        keys = wf.text.split('id="keys"', 1)[1].split("</div>", 1)[0]
        assert "limit <strong>2</strong>" in keys and "<code>input.customer</code>" in keys
        rows = re.findall(r"<tr><td>(.*?)</td><td>(\d+)</td><td>(.*?)</td></tr>", keys, re.S)
        assert [(html.unescape(k), a, re.sub(r"<[^>]+>", "", w)) for k, a, w in rows] == [
            ("<code>a&<b></code>", "2", "2"),
            ("<code>z</code>", "1", "0"),
        ]
        # A workflow without a limit has no such card.
        await api.register({"name": "free", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
        free = await c.get("/console/apps/orders/workflows/free")
        assert free.status_code == 200 and 'id="keys"' not in free.text


async def test_metrics_gauge_queued_runs_per_workflow(api: Api) -> None:
    assert await queued_samples(api) == {}
    await api.register(LIMITED)
    await api.register({**LIMITED, "name": "other"})
    ids = await start_many(api, "per-customer", ["a"] * 4)
    await start_many(api, "other", ["a"] * 3)
    assert await queued_samples(api) == {("orders", "per-customer"): 2, ("orders", "other"): 1}
    r = await api.call("POST", f"/apps/orders/runs/{ids[3]}/cancel", {"reason": "no"})
    assert r.status_code == 200, r.text
    assert await queued_samples(api) == {("orders", "per-customer"): 1, ("orders", "other"): 1}


@pytest.mark.parametrize("settings_overrides", [{"metrics_max_label_values": 1}])
async def test_queued_runs_labels_are_capped(api: Api) -> None:
    for name in ("w1", "w2", "w3"):
        await api.register({**LIMITED, "name": name})
        await start_many(api, name, ["a"] * 3)
    samples = await queued_samples(api)
    assert sum(samples.values()) == 3
    assert len(samples) == 2 and samples[("orders", "_other")] == 2, samples
