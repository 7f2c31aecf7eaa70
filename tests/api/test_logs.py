"""Run events in the logs: one record per event, with runId, step and attempt, and no secrets."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from foliot.core.logs import JsonFormatter
from foliot.server import Running, serve

from ..conftest import ADMIN, Api, make_settings
from ..helpers import answer_json

SECRET_INPUT = "card-4111-1111-1111-1111"


def by_event(records: list[logging.LogRecord], event: str) -> list[dict[str, Any]]:
    """The records of one run event, as their fields."""
    return [vars(r) for r in records if getattr(r, "event", None) == event]


async def test_a_run_that_retries_and_fails_is_logged_with_its_fields(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="foliot")
    api.handler.route(
        "charge",
        lambda b, h: answer_json({"error": {"class": "card_declined", "retryable": True}}, status=503),
    )
    await api.register(
        {
            "name": "pay",
            "steps": [
                {
                    "name": "charge",
                    "type": "task",
                    "retry": {"maxAttempts": 2, "initialInterval": "1ms"},
                }
            ],
        }
    )
    run = await api.start("pay", {"card": SECRET_INPUT})
    run_id = run["runId"]
    await api.until(run_id, "failed")
    mine = [r for r in caplog.records if getattr(r, "runId", None) == run_id]

    (started,) = by_event(mine, "run_started")
    assert started["levelno"] == logging.INFO and started["workflow"] == "pay"

    pushes = by_event(mine, "push_outcome")
    assert [(r["step"], r["attempt"], r["outcome"]) for r in pushes] == [
        ("charge", 1, "app_error"),
        ("charge", 2, "app_error"),
    ]
    assert all(r["latencyMs"] >= 0 and r["errorClass"] == "card_declined" for r in pushes)

    (retry,) = by_event(mine, "retry_scheduled")
    assert (retry["step"], retry["attempt"], retry["nextAttempt"]) == ("charge", 1, 2)
    assert retry["delayMs"] >= 1

    (step_failed,) = by_event(mine, "step_failed")
    assert (step_failed["step"], step_failed["attempt"]) == ("charge", 2)
    assert step_failed["levelno"] == logging.WARNING
    assert step_failed["errorClass"] == "card_declined"
    (run_failed,) = by_event(mine, "run_failed")
    assert run_failed["status"] == "failed"

    # Every line renders as one JSON object; no input, API key or admin token is in any of them.
    formatter = JsonFormatter()
    text = "\n".join(formatter.format(r) for r in caplog.records)
    for line in text.splitlines():
        assert isinstance(json.loads(line), dict)
    for secret in (SECRET_INPUT, api.key, ADMIN, *api.handler.secrets):
        assert secret not in text


async def test_interventions_are_logged(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="foliot")
    await api.register({"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    run = await api.start("w")
    await api.until(run["runId"], "waiting")
    r = await api.call("POST", f"/apps/{api.app}/runs/{run['runId']}/cancel", {"reason": "operator"})
    assert r.status_code == 200, r.text
    (cancelled,) = by_event(caplog.records, "run_cancelled")
    assert (cancelled["runId"], cancelled["step"], cancelled["reason"]) == (run["runId"], "w", "operator")


async def test_the_access_log_when_turned_on(
    tmp_path: Path, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hypercorn.access")  # what FOLIOT_ACCESS_LOG=1 does
    running: Running = await nursery.start(serve, make_settings(tmp_path))
    async with httpx.AsyncClient(base_url=running.url) as client:
        r = await client.get("/metrics", params={"q": "x"}, headers={"Authorization": "Bearer not-a-token"})
        assert r.status_code == 401
    with trio.fail_after(5):
        await trio.testing.wait_all_tasks_blocked()  # hypercorn logs once the response is out
    (record,) = [r for r in caplog.records if r.name == "hypercorn.access"]
    line = json.loads(JsonFormatter().format(record))
    assert (line["message"], line["method"], line["path"]) == ("request", "GET", "/metrics")
    assert line["status"] == 401 and line["durationMs"] >= 0
    assert "not-a-token" not in json.dumps(line) and "q=x" not in json.dumps(line)
