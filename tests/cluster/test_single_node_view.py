"""`GET /admin/cluster` on SQLite: one node holding all 256 partitions; admin only."""

from __future__ import annotations

from pathlib import Path

import httpx
import trio

from foliot.server import Running, serve

from ..conftest import ADMIN, make_settings


async def test_sqlite_answers_a_single_node_view(tmp_path: Path, nursery: trio.Nursery) -> None:
    running: Running = await nursery.start(serve, make_settings(tmp_path, node_id="solo"))
    async with httpx.AsyncClient(base_url=running.url) as client:
        r = await client.get("/admin/cluster", headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 200, r.text
        view = r.json()
        [node] = view["nodes"]
        assert node["nodeId"] == "solo" and node["address"] == running.url
        assert node["partitions"] == 256 and node["liveActors"] == 0
        assert view["partitions"] == 256 and {m["nodeId"] for m in view["map"]} == {"solo"}
        assert (await client.get("/admin/cluster")).status_code == 401
        assert (
            await client.get("/admin/cluster?x=1", headers={"Authorization": f"Bearer {ADMIN}"})
        ).status_code == 400
        assert running.engine.forwarder is None and running.engine.pull is None  # nothing to reach
