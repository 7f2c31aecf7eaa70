"""Through a real server: signal refusals, pruning metrics, where the data lives."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from foliot.core.config import Settings
from foliot.server import Running, serve

from ..conftest import ADMIN, Api


def file_modes(*paths: Path) -> dict[Path, int]:
    return {p: stat.S_IMODE(p.stat().st_mode) for p in paths if p.exists()}


def read_text(path: Path) -> str:
    return path.read_text()


@pytest.mark.parametrize("settings_overrides", [{"signal_buffer_max": 2}])
async def test_a_full_signal_buffer_answers_409_and_stores_nothing(api: Api) -> None:
    await api.register({"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    run = await api.start("w")
    await api.until(run["runId"], "waiting")

    async def send(name: str, sid: str) -> httpx.Response:
        # `other` is no step's signal: buffering it needs the explicit opt-out (issue 26).
        body = {"runId": run["runId"], "name": name, "signalId": sid, "allowUnknown": name != "go"}
        return await api.call("POST", "/apps/orders/signals", body)

    for i in range(2):
        r = await send("other", f"o{i}")
        assert (r.status_code, r.json()["status"]) == (202, "buffered")
    before = await api.events(run["runId"])
    r = await send("other", "o2")
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "signal_buffer_full"
    assert await api.events(run["runId"]) == before
    r = await send("other", "o0")  # a retry of a buffered one
    assert (r.status_code, r.json()["status"]) == (202, "duplicate")
    r = await send("go", "nul\u0000")  # an id no store can keep as text
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    r = await send("go", "g")  # what the run waits for is never refused
    assert (r.status_code, r.json()["status"]) == (202, "delivered")

    metrics = (await api.client.get("/metrics", headers=api.admin())).text
    samples = {s.name: s.value for family in text_string_to_metric_families(metrics) for s in family.samples}
    for name in (
        "foliot_pruned_runs_total",
        "foliot_pruned_idempotency_total",
        "foliot_prune_failures_total",
    ):
        assert samples[name] == 0
    assert "# TYPE foliot_prune_last_run_timestamp_seconds gauge" in metrics


async def test_the_data_dir_holds_the_database_and_start_up_says_where(
    tmp_path: Path, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    settings = Settings.from_env({"FOLIOT_DATA_DIR": str(data), "FOLIOT_PORT": "0"})
    assert settings.database_url == f"sqlite:///{data}/foliot.db"
    with caplog.at_level(logging.INFO, logger="foliot"):
        running: Running = await nursery.start(serve, settings)
    db = data / "foliot.db"
    modes = file_modes(db, Path(f"{db}-wal"), Path(f"{db}-shm"))
    assert modes[db] == 0o600 and set(modes.values()) == {0o600}, modes
    token = read_text(data / "admin-token").strip()
    text = caplog.text
    assert f"database: sqlite:///{data}/foliot.db (file {db.resolve()}" in text
    assert f"data dir: {data.resolve()}" in text
    assert str((data / "admin-token").resolve()) in text
    async with httpx.AsyncClient(base_url=running.url) as client:
        r = await client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and "foliot_pruned_runs_total" in r.text
    assert ADMIN not in text and token not in text
