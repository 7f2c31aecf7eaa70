"""A fan-out's outputs are gathered a page at a time, their size checked as they are read
(issue 37: a 1,000-item map of 250 KB outputs loaded 1.45 GB before its size was checked): the
first page past the payload limit fails the step with `output_too_large`, nothing more is read."""

from __future__ import annotations

from typing import Any

import pytest

from ..conftest import Api
from ..helpers import answer_json


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"payload_max_bytes": 20_000}


async def test_a_map_whose_outputs_pass_the_limit_stops_reading_them(api: Api) -> None:
    api.handler.route("big", lambda body, headers: answer_json({"blob": "x" * 3_000}))
    await api.register(
        {"name": "big-item", "output": "state.big", "steps": [{"name": "big", "type": "task"}]}
    )
    await api.register(
        {
            "name": "fan",
            "steps": [
                {
                    "name": "all",
                    "type": "map",
                    "itemsPath": "input.items",
                    "workflow": "big-item",
                    "maxConcurrency": 50,
                }
            ],
        }
    )
    calls: list[Any] = []
    store = api.engine.store
    read = store.children_of

    async def counted(parent: str, after: Any = None, limit: Any = None) -> Any:
        page = await read(parent, after, limit)
        calls.append((limit, len(page)))
        return page

    store.children_of = counted
    try:
        run = await api.start("fan", {"items": list(range(200))})
        done = await api.until(run["runId"], "failed", "completed")
    finally:
        del store.children_of
    assert done["status"] == "failed"
    assert done["error"]["class"] == "output_too_large"
    assert "still unread" in done["error"]["message"]
    assert calls and all(limit is not None for limit, _ in calls)
    assert len(calls) == 1  # the first page already passed 20,000 bytes: 199 children never read


async def test_outputs_within_the_limit_are_gathered_across_pages(api: Api) -> None:
    api.handler.route("small", lambda body, headers: answer_json({"i": body["input"]}))
    await api.register(
        {"name": "small-item", "output": "state.small", "steps": [{"name": "small", "type": "task"}]}
    )
    await api.register(
        {
            "name": "fan",
            "steps": [
                {
                    "name": "all",
                    "type": "map",
                    "itemsPath": "input.items",
                    "workflow": "small-item",
                    "maxConcurrency": 40,
                }
            ],
        }
    )
    run = await api.start("fan", {"items": list(range(150))})
    done = await api.until(run["runId"], "completed", "failed")
    assert done["status"] == "completed", done
    assert done["state"]["all"] == [{"i": i} for i in range(150)]
