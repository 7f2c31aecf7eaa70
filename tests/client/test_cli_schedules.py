"""`foliot schedules …` through `click.testing` against a live Foliot (both stores), and the
Python client's schedule methods."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from foliot_client import Client
from foliot_client.errors import NotFound

from ..conftest import Api
from .test_cli import Cli

WAIT = {"name": "nightly", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}
SCHEDULE_YAML = """\
name: night
workflow: nightly
cron: "0 3 * * *"
timezone: Europe/Berlin
overlap: allow
"""


@pytest.fixture
def run_cli(api: Api, tmp_path: Path) -> Cli:
    return Cli(api, tmp_path)


async def test_schedules_commands(api: Api, run_cli: Cli, tmp_path: Path) -> None:
    await api.register(WAIT)
    path = tmp_path / "night.yaml"
    path.write_text(SCHEDULE_YAML)
    put = await run_cli.json("schedules", "put", str(path))
    assert put["name"] == "night" and put["timezone"] == "Europe/Berlin" and len(put["nextFires"]) == 5
    table = (await run_cli("schedules", "list")).stdout
    assert "night" in table and "0 3 * * *" in table and put["nextFires"][0] in table
    trig = await run_cli.json("schedules", "trigger", "night", "--reason", "rerun")
    assert trig["outcome"] == "started"
    assert (await api.run(trig["runId"]))["schedule"]["reason"] == "rerun"
    shown = (await run_cli("schedules", "show", "night")).stdout
    assert trig["runId"] in shown and "waiting" in shown
    paused = (await run_cli("schedules", "pause", "night", "--reason", "[b]db[/b] upgrade")).stdout
    assert "paused schedule night ([b]db[/b] upgrade)" in paused  # server strings shown literally
    assert (await run_cli.json("schedules", "unpause", "night"))["paused"] is False
    filled = await run_cli.json(
        "schedules", "backfill", "night", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-03T00:00:00Z"
    )
    assert filled["started"] == 2 and [f["scheduledTime"] for f in filled["fires"]] == [
        "2026-01-01T02:00:00.000Z",
        "2026-01-02T02:00:00.000Z",
    ]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"workflow": "nightly", "cron": "nope"}))
    refused = await run_cli("schedules", "put", str(bad), "--name", "bad", code=1)
    assert "cron" in refused.stderr
    await run_cli("schedules", "delete", "night")
    await run_cli("schedules", "show", "night", code=3)


async def test_python_client(api: Api) -> None:
    await api.register(WAIT)

    def use() -> None:
        with Client(api.running.url, api.key, app=api.app) as client:
            made = client.put_schedule("s", {"workflow": "nightly", "every": "1h", "overlap": "allow"})
            assert made["every"] == "1h"
            assert [s["name"] for s in client.iter_schedules()] == ["s"]
            assert client.list_schedules(limit=1).items[0]["name"] == "s"
            fired = client.trigger_schedule("s")
            assert client.get_schedule("s")["lastFires"][0]["runId"] == fired["runId"]
            assert client.pause_schedule("s", reason="r")["pauseReason"] == "r"
            assert client.unpause_schedule("s")["paused"] is False
            out = client.backfill_schedule("s", "2026-01-01T00:00:00Z", "2026-01-01T02:00:00Z")
            assert out["started"] == 2
            client.delete_schedule("s")
            with pytest.raises(NotFound):
                client.get_schedule("s")

    await trio.to_thread.run_sync(use)
