"""Safe deploys over HTTP on both stores: the dry-run report (open runs grouped, recorded runs
replayed, missing state keys; nothing stored) and the paged, resumable, idempotent migrate."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import trio

from foliot.core.workflow import deploy
from foliot.core.workflow.definition import Definition, parse_definition
from foliot.core.workflow.model import Run
from foliot.http import deploys
from foliot.http.deploys import MAX_REPLAY_EVENTS, build_report, replay_chunks
from foliot.storage import deploy_sql
from foliot.storage.base import UnitOfWork
from foliot.storage.factory import open_store

from ..conftest import Api

V1 = {
    "name": "order",
    "steps": [
        {"name": "a", "type": "wait", "signal": "go"},
        {"name": "b", "type": "wait", "signal": "done"},
    ],
}
V2 = {
    "name": "order",
    "steps": [
        {"name": "a2", "type": "wait", "signal": "go"},
        {"name": "b", "type": "wait", "signal": "done"},
        {
            "name": "check",
            "type": "choice",
            "choices": [{"when": {"path": "state.a2.ok", "op": "eq", "value": True}, "next": "$end"}],
            "default": "$end",
        },
    ],
}


async def post(api: Api, path: str, body: Any, **kw: Any) -> Any:
    return await api.call("POST", f"/apps/orders/{path}", body, **kw)


async def signal(api: Api, rid: str, name: str, payload: Any = None) -> None:
    r = await post(api, "signals", {"runId": rid, "name": name, "payload": payload})
    assert r.status_code == 202, r.text


async def setup(api: Api) -> tuple[list[str], str]:
    await api.register(V1)
    open_ids = [(await api.start("order"))["runId"] for _ in range(3)]
    done = (await api.start("order"))["runId"]
    await signal(api, done, "go", {"ok": True})
    await signal(api, done, "done")
    await api.until(done, "completed")
    await signal(api, open_ids[2], "go", {"ok": True})
    return open_ids, done


async def test_dry_run_reports_open_and_recorded_runs_and_stores_nothing(api: Api) -> None:
    open_ids, done = await setup(api)
    r = await post(api, "workflows/order/dry-run", V2)
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["valid"] is True
    groups = {(g["step"], g["status"]): g for g in report["openRuns"]["groups"]}
    assert report["openRuns"]["total"] == 3
    assert groups[("a", "waiting")]["count"] == 2 and groups[("a", "waiting")]["verdict"] == "stranded"
    assert sorted(groups[("a", "waiting")]["exampleRunIds"]) == sorted(open_ids[:2])
    assert groups[("b", "waiting")]["verdict"] == "moves"
    assert [d["field"] for d in groups[("b", "waiting")]["differences"]] == ["next"]
    recorded = report["recorded"]
    assert recorded["sampled"] == 1 and recorded["same"] == 0
    [diverged] = recorded["diverged"]
    assert diverged["runId"] == done and diverged["reason"] == "step_missing"
    # state.a2.ok is read by `check`; the runs at b have `a`, not `a2`
    missing = {m["path"]: m for m in report["missingStateKeys"]}
    assert missing["state.a2.ok"]["runs"] == 1 and missing["state.a2.ok"]["exampleRunIds"] == [open_ids[2]]
    listed = await api.call("GET", "/apps/orders/workflows/order")
    assert listed.json()["version"] == 1  # nothing registered
    same = await post(api, "workflows/order/dry-run", {"definition": V1, "replay": 1})
    assert same.json()["recorded"] == {"sampled": 1, "same": 1, "diverged": [], "events": 10, "cursor": None}
    assert {g["verdict"] for g in same.json()["openRuns"]["groups"]} == {"compatible"}


async def test_dry_run_bad_input(api: Api) -> None:
    await setup(api)
    bad = await post(
        api, "workflows/order/dry-run", {"name": "order", "steps": [{"name": "a", "type": "nope"}]}
    )
    assert bad.status_code == 200 and bad.json()["valid"] is False
    assert bad.json()["errors"][0]["field"].startswith("steps[0]")
    wrong = await post(api, "workflows/order/dry-run", {**V2, "name": "other"})
    assert wrong.status_code == 400 and wrong.json()["error"]["field"] == "name"
    big = await post(api, "workflows/order/dry-run", V2, params={"replay": "5000"})
    assert big.status_code == 400 and big.json()["error"]["field"] == "replay"
    big = await post(api, "workflows/order/dry-run", {"definition": V2, "replay": 1001})
    assert big.status_code == 400 and big.json()["error"]["field"] == "replay"
    odd = await post(api, "workflows/order/dry-run", {"definition": V2, "extra": 1})
    assert odd.status_code == 400 and odd.json()["error"]["field"] == "extra"


async def test_migrate_refuses_stranded_runs_then_moves_them_with_a_step_map(api: Api) -> None:
    open_ids, _ = await setup(api)
    assert await api.register(V2) == 2
    refused = await post(api, "workflows/order/migrate", {"toVersion": 2, "reason": "v2"})
    assert refused.status_code == 200, refused.text
    answer = refused.json()
    assert answer["matched"] == 3 and answer["migrated"] == 1  # the run at b stays where it is
    assert sorted(x["runId"] for x in answer["refused"]) == sorted(open_ids[:2])
    assert {x["code"] for x in answer["refused"]} == {"stranded"}
    at_b = await api.run(open_ids[2])
    assert at_b["version"] == 2 and at_b["currentStep"] == "b" and at_b["generation"] == 1
    first = await post(
        api,
        "workflows/order/migrate",
        {
            "toVersion": 2,
            "stepMap": {"a": "a2"},
            "reason": "rename",
            "limit": 2,
            "filter": {"fromVersion": 1},
        },
    )
    page = first.json()
    assert page["cursor"] is not None
    rest = await post(
        api,
        "workflows/order/migrate",
        {"toVersion": 2, "stepMap": {"a": "a2"}, "reason": "rename", "limit": 2, "cursor": page["cursor"]},
    )
    assert rest.status_code == 200, rest.text
    assert page["migrated"] + rest.json()["migrated"] == 2
    again = await post(api, "workflows/order/migrate", {"toVersion": 2, "stepMap": {"a": "a2"}})
    assert again.json()["migrated"] == 0 and again.json()["skipped"] == 3 and again.json()["refused"] == []
    for rid in open_ids[:2]:
        run = await api.run(rid)
        assert run["version"] == 2 and run["currentStep"] == "a2" and run["generation"] == 2
        migrated = [e for e in await api.events(rid) if e["type"] == "run_migrated"]
        assert migrated[0]["data"]["fromStep"] == "a" and migrated[0]["data"]["toStep"] == "a2"
        assert migrated[0]["data"]["reason"] == "rename"
    await signal(api, open_ids[0], "go", {"ok": True})
    await signal(api, open_ids[0], "done")
    await api.until(open_ids[0], "completed")


async def test_migrate_bad_input_changes_nothing(api: Api) -> None:
    open_ids, _ = await setup(api)
    await api.register(V2)
    cases = [
        ({"toVersion": 9}, "toVersion"),
        ({"toVersion": 0}, "toVersion"),
        ({}, "toVersion"),
        ({"toVersion": 2, "stepMap": {"a": "nope"}}, "stepMap.a"),
        ({"toVersion": 2, "filter": {"status": "completed"}}, "filter.status"),
        ({"toVersion": 2, "filter": {"fromVersion": 0}}, "filter.fromVersion"),
        ({"toVersion": 2, "filter": {"step": "bad name!"}}, "filter.step"),
        ({"toVersion": 2, "limit": 0}, "limit"),
        ({"toVersion": 2, "cursor": "garbage"}, "cursor"),
        ({"toVersion": 2, "reason": "x" * 5000}, "reason"),
        ({"toVersion": 2, "surprise": 1}, "surprise"),
    ]
    for body, field in cases:
        r = await post(api, "workflows/order/migrate", body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["field"] == field, (body, r.json())
    for rid in open_ids:
        run = await api.run(rid)
        assert run["version"] == 1 and run["generation"] == 1
        assert "run_migrated" not in [e["type"] for e in await api.events(rid)]


async def test_the_console_shows_the_dry_run_then_migrates(api: Api) -> None:
    from .test_console import ADMIN, browser, csrf_of, login, operator_token

    open_ids, _ = await setup(api)
    await api.register(V2)
    page_path = "/console/apps/orders/workflows/order/deploy?version=2"
    async with browser(api) as c, browser(api) as viewer:
        await login(api, ADMIN, c)
        await login(api, await operator_token(api, "viewer"), viewer)
        report = await c.get(page_path)
        assert report.status_code == 200, report.text
        assert "stranded" in report.text and "step_missing" in report.text and "Migrate" in report.text
        csrf = await csrf_of(c, page_path)
        form = {"csrf": csrf, "toVersion": "2", "stepMap": "a=a2", "reason": "rename", "confirm": "yes"}
        v_csrf = await csrf_of(viewer, "/console/apps/orders/workflows/order")
        refused = await viewer.post(
            "/console/apps/orders/workflows/order/migrate", data={**form, "csrf": v_csrf}
        )
        assert refused.status_code == 403
        forged = await c.post("/console/apps/orders/workflows/order/migrate", data={**form, "csrf": v_csrf})
        assert forged.status_code == 403
        assert {(await api.run(rid))["version"] for rid in open_ids} == {1}
        done = await c.post("/console/apps/orders/workflows/order/migrate", data=form)
        assert done.status_code == 200, done.text
        assert "3 migrated to version 2" in done.text
    assert {(await api.run(rid))["version"] for rid in open_ids} == {2}


async def test_a_viewer_cannot_dry_run_through_the_console(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37, item 9: the API refuses a viewer's dry-run, and the console's GET deploy page
    computed one for a viewer anyway. It needs an operator, as the API does: a viewer gets 403
    and no dry-run is computed; the workflow page does not link it for a viewer."""
    from foliot.http import deploys as deploys_api

    from .test_console import browser, login, operator_token

    await setup(api)
    await api.register(V2)
    computed: list[str] = []
    real = deploys_api.dry_run_report

    async def counting(app: str, name: str, raw: dict[str, Any], replay: int) -> dict[str, Any]:
        computed.append(name)
        return await real(app, name, raw, replay)

    monkeypatch.setattr(deploys_api, "dry_run_report", counting)
    viewer_token = await operator_token(api, "viewer")
    page_path = "/console/apps/orders/workflows/order/deploy?version=2"
    async with browser(api) as viewer, browser(api) as operator:
        await login(api, viewer_token, viewer)
        await login(api, await operator_token(api, "operator"), operator)
        refused = await viewer.get(page_path)
        assert refused.status_code == 403 and "needs operator" in refused.text
        assert computed == []
        workflow_page = await viewer.get("/console/apps/orders/workflows/order")
        assert workflow_page.status_code == 200 and "/deploy?" not in workflow_page.text
        api_refused = await api.call(
            "POST",
            "/apps/orders/workflows/order/dry-run",
            V2,
            headers={"Authorization": f"Bearer {viewer_token}"},
        )
        assert api_refused.status_code == 403  # the same rule as the API's
        shown = await operator.get(page_path)
        assert shown.status_code == 200 and "stranded" in shown.text and computed == ["order"]
        assert "/deploy?" in (await operator.get("/console/apps/orders/workflows/order")).text


async def test_missing_keys_counted_in_sql_are_those_read_run_by_run(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dry-run counts the runs lacking each key in the database where SQL can say it
    exactly; the report is the one reading every run's input and state gives (both stores:
    two versions, three steps, keys found by key, by index, null, or not at all)."""
    v2_doc = {**V1, "steps": [*V1["steps"], {"name": "c", "type": "wait", "signal": "x"}]}
    old = {1: parse_definition(V1), 2: parse_definition(v2_doc)}
    candidate = parse_definition(
        {
            "name": "order",
            "steps": [
                {"name": "a", "type": "wait", "signal": "go"},
                {
                    "name": "check",
                    "type": "choice",
                    "choices": [
                        {"when": {"path": "input.customer", "op": "eq", "value": "vip"}, "next": "b"},
                        {"when": {"path": "state.x.ok", "op": "eq", "value": True}, "next": "b"},
                        {"when": {"path": "input.items.0", "op": "eq", "value": 1}, "next": "b"},
                    ],
                    "default": "b",
                },
                {"name": "b", "type": "wait", "signal": "done"},
            ],
        }
    )
    inputs: list[Any] = [
        {"customer": "vip"},
        {},
        {"items": [1]},
        {"items": {"0": 2}},
        None,
        [1],
        {"customer": None},
    ]
    states: list[Any] = [{}, {"x": {"ok": True}}, {"x": None}, {"x": {"ok": None}}]

    async def lookup(number: int) -> Definition | None:
        return old.get(number)

    async with open_store(database_url) as store:
        await store.migrate()
        await store.add_workflow_version("orders", "order", json.dumps(V1), 1)
        await store.add_workflow_version("orders", "order", json.dumps(v2_doc), 2)
        for n in range(70):
            run = Run(
                run_id=f"r{n:02d}",
                app="orders",
                workflow="order",
                version=1 + n % 2,
                status="waiting",
                input=inputs[n % len(inputs)],
                state=states[n % len(states)],
                generation=1,
                created_at=1_800_000_000_000 + n // 3,  # ties: the run id orders them
                updated_at=1_800_000_000_000,
                trace_id="t",
                current_step=("a", "b", "c")[n % 3],
            )
            await store.commit(UnitOfWork(run, None))
        counted = await build_report(store, lookup, "orders", "order", candidate, 0)
        monkeypatch.setattr(deploy_sql, "expressible", lambda path: False)
        read = await build_report(store, lookup, "orders", "order", candidate, 0)
    assert counted == read
    paths = {m["path"]: m["runs"] for m in counted["missingStateKeys"]}
    assert set(paths) == {"input.customer", "state.x.ok", "input.items.0"} and all(paths.values())


def test_recorded_runs_are_read_in_chunks_of_bounded_events() -> None:
    runs = [
        Run(f"r{n}", "a", "w", 1, "completed", None, {}, 1, 0, 0, "t", seq=seq)
        for n, seq in enumerate([5, 5, 12, 0, 3, MAX_REPLAY_EVENTS * 3, 1])
    ]
    chunks = replay_chunks(runs, 10)
    assert [[r.run_id for r in c] for c in chunks] == [["r0", "r1"], ["r2"], ["r3", "r4"], ["r5"], ["r6"]]
    assert replay_chunks([], 10) == []
    assert [len(c) for c in replay_chunks(runs, 10**9)] == [len(runs)]


async def test_the_recorded_sample_is_the_last_closed_runs_read_a_page_at_a_time(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of closed runs (keyset) and chunks of events: the sample is the last `replay`
    closed runs, newest first, each replayed once."""
    from foliot.core.workflow.model import Event
    from foliot.http import deploys

    monkeypatch.setattr(deploys, "REPLAY_BATCH", 7)
    monkeypatch.setattr(deploys, "REPLAY_EVENTS", 5)
    async with open_store(database_url) as store:
        await store.migrate()
        await store.add_workflow_version("orders", "order", json.dumps(V1), 1)
        for n in range(30):
            run = Run(
                f"c{n:02d}",
                "orders",
                "order",
                1,
                "completed",
                None,
                {},
                1,
                1_800_000_000_000 + n // 2,
                0,
                "t",
                seq=2,
            )
            await store.commit(UnitOfWork(run, None, (Event(1, 0, 1, "run_started"), Event(2, 0, 1, "x"))))

        async def lookup(number: int) -> Definition | None:
            return parse_definition(V1)

        report = await build_report(store, lookup, "orders", "order", parse_definition(V1), 23)
        assert report["recorded"]["sampled"] == 23
        assert [d["runId"] for d in report["recorded"]["diverged"]] == [f"c{n:02d}" for n in range(29, 6, -1)]
        everything = await build_report(store, lookup, "orders", "order", parse_definition(V1), 1000)
        assert everything["recorded"]["sampled"] == 30


ITEM = {
    "name": "item",
    "output": "input",
    "steps": [{"name": "gate", "type": "wait", "signal": "go"}, {"name": "charge", "type": "task"}],
}
MAP_V1 = {
    "name": "order",
    "steps": [{"name": "all", "type": "map", "itemsPath": "input", "workflow": "item", "maxConcurrency": 2}],
}


async def test_migrate_mid_map_runs_every_item_exactly_once(api: Api) -> None:
    """Issue 38: a run migrated while in a map keeps its completed and running children; only
    the items not started follow the new maxConcurrency; the dry-run says so first; a version
    that changes the item source refuses the run. Every item is charged exactly once."""
    from ..helpers import answer_json

    charges: list[Any] = []

    def charge(body: dict[str, Any], headers: dict[str, str]) -> Any:
        charges.append(body["input"])
        return answer_json({"charged": body["input"]})

    api.handler.route("charge", charge)
    await api.register(ITEM)
    await api.register(MAP_V1)
    rid = (await api.start("order", list(range(8))))["runId"]

    async def complete_one() -> None:
        view = await api.run(rid)
        done = view["children"]["completed"]
        await signal(api, view["children"]["openRunIds"][0], "go")
        await api.engine.runs.wait_for(rid, lambda r: r.fan is None or r.fan.completed > done)

    for _ in range(4):
        await complete_one()
    assert sorted(charges) == [0, 1, 2, 3]
    running = (await api.run(rid))["children"]["openRunIds"]
    assert len(running) == 2

    wider = {**MAP_V1, "steps": [{**MAP_V1["steps"][0], "maxConcurrency": 4}]}
    report = (await post(api, "workflows/order/dry-run", wider)).json()
    [group] = report["openRuns"]["groups"]
    assert group["verdict"] == "moves" and [d["field"] for d in group["differences"]] == ["maxConcurrency"]
    assert group["migrate"] == [
        {
            "outcome": "stays",
            "runs": 1,
            "code": None,
            "message": "stays at map step 'all' with its children: keeps 4 completed items and 2 running;"
            " 2 items not started follow the candidate (maxConcurrency 2 → 4)",
        }
    ]
    assert await api.register(wider) == 2
    other = {**MAP_V1, "steps": [{**MAP_V1["steps"][0], "itemsPath": "input.rest"}]}
    [plan] = (await post(api, "workflows/order/dry-run", other)).json()["openRuns"]["groups"][0]["migrate"]
    assert plan["outcome"] == "refused" and plan["code"] == "fan_out_changed"
    assert await api.register(other) == 3
    refused = (await post(api, "workflows/order/migrate", {"toVersion": 3})).json()
    assert refused["migrated"] == 0 and [r["code"] for r in refused["refused"]] == ["fan_out_changed"]
    assert refused["refused"][0]["reason"].endswith(plan["message"].replace("the candidate", "v3"))
    assert (await api.run(rid))["version"] == 1

    moved = (await post(api, "workflows/order/migrate", {"toVersion": 2, "reason": "wider"})).json()
    assert moved["migrated"] == 1 and moved["refused"] == [], moved
    view = await api.run(rid)
    assert view["version"] == 2 and view["generation"] == 1
    assert view["children"]["completed"] == 4 and view["children"]["open"] == 4
    assert view["children"]["openRunIds"][:2] == running  # still running, not cancelled
    for child in running:
        assert (await api.run(child))["status"] == "waiting"
    while (await api.run(rid))["status"] == "waiting":
        await complete_one()
    done = await api.until(rid, "completed")
    assert done["state"]["all"] == list(range(8))
    assert sorted(charges) == list(range(8))  # every item charged exactly once
    events = await api.events(rid)
    assert sorted(e["data"]["index"] for e in events if e["type"] == "child_started") == list(range(8))
    [migrated] = [e for e in events if e["type"] == "run_migrated"]
    assert migrated["data"]["inPlace"] is True and migrated["data"]["children"] == {
        "completed": 4,
        "failed": 0,
        "cancelled": 0,
        "running": 2,
        "notStarted": 2,
    }


# --------------------------------------------------------------------------- bounds (issue 37.6)


async def closed_runs(store: Any, count: int) -> None:
    """`count` closed runs of `order` v1 (c00 the oldest), each with two recorded events."""
    from foliot.core.workflow.model import Event

    await store.migrate()
    await store.add_workflow_version("orders", "order", json.dumps(V1), 1)
    for n in range(count):
        run = Run(
            f"c{n:02d}", "orders", "order", 1, "completed", None, {}, 1, 1_800_000_000_000 + n, 0, "t", seq=2
        )
        await store.commit(UnitOfWork(run, None, (Event(1, 0, 1, "run_started"), Event(2, 0, 1, "x"))))


async def test_a_dry_run_replays_at_most_its_budget_and_resumes_from_its_cursor(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`FOLIOT_DRYRUN_MAX_EVENTS`: past the budget the recorded sample is partial, with a cursor
    that resumes it after the last run replayed; the parts together are the whole sample."""
    monkeypatch.setattr(deploys, "REPLAY_BATCH", 7)  # the budget ends inside a page, and on one
    candidate = parse_definition(V1)

    async def lookup(number: int) -> Definition | None:
        return candidate

    async with open_store(database_url) as store:
        await closed_runs(store, 30)
        whole = await build_report(store, lookup, "orders", "order", candidate, 23)
        assert whole["recorded"]["sampled"] == 23 and whole["recorded"]["cursor"] is None
        assert whole["recorded"]["events"] == 46
        parts, resume = [], None
        while True:
            report = await build_report(
                store, lookup, "orders", "order", candidate, 23, max_events=10, resume=resume
            )
            recorded = report["recorded"]
            parts.append(recorded)
            assert recorded["events"] <= 10 and recorded["sampled"] == len(recorded["diverged"])
            if recorded["cursor"] is None:
                break
            resume = deploys._dry_run_cursor(recorded["cursor"])
    assert [p["sampled"] for p in parts] == [5, 5, 5, 5, 3]  # 10 events: 5 runs of 2
    assert [d for p in parts for d in p["diverged"]] == whole["recorded"]["diverged"]
    assert sum(p["same"] for p in parts) == whole["recorded"]["same"]


async def test_a_replay_runs_off_the_event_loop(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """While runs are replayed, a concurrent task keeps ticking: each replay waits (in its
    thread) until the ticker has ticked since it began, which never happens if the replay holds
    the loop (then each wait times out)."""
    ticked = threading.Event()
    held: list[str] = []
    real = deploy.replay

    def replay(events: Any, run: Run, candidate: Definition, *, truncated: bool = False) -> Any:
        ticked.clear()
        result = real(events, run, candidate, truncated=truncated)
        if not held and not ticked.wait(timeout=2):
            held.append(run.run_id)
        return result

    monkeypatch.setattr(deploy, "replay", replay)
    candidate = parse_definition(V1)

    async def lookup(number: int) -> Definition | None:
        return candidate

    async with open_store(database_url) as store:
        await closed_runs(store, 40)
        ticks = 0
        async with trio.open_nursery() as nursery:

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    ticks += 1
                    ticked.set()
                    await trio.lowlevel.checkpoint()

            nursery.start_soon(ticker)
            report = await build_report(store, lookup, "orders", "order", candidate, 40)
            nursery.cancel_scope.cancel()
    assert report["recorded"]["sampled"] == 40
    assert held == [], f"the loop was held while {held[0]} was replayed"
    assert ticks > 40


async def test_an_apps_concurrent_dry_runs_are_bounded_with_a_429_naming_the_limit(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`FOLIOT_DRYRUN_CONCURRENCY` (2): a third dry-run of the same app while two are under way
    is refused at once (429, Retry-After, the limit named); another app's is not; once one
    has answered the app may dry-run again."""

    await api.register(V1)
    release, arrived = trio.Event(), trio.Event()
    entered: list[str] = []
    real = deploys.build_report

    async def slow(store: Any, lookup: Any, app: str, *args: Any, **kw: Any) -> dict[str, Any]:
        entered.append(app)
        arrived.set()
        await release.wait()
        return await real(store, lookup, app, *args, **kw)

    monkeypatch.setattr(deploys, "build_report", slow)
    r = await api.client.put("/apps/billing", json={"handlerBaseUrl": api.handler.url}, headers=api.admin())
    assert r.status_code == 201, r.text
    billing = {"Authorization": f"Bearer {r.json()['apiKey']}"}
    r = await api.call("POST", "/apps/billing/workflows", V1, headers=billing)
    assert r.status_code in (200, 201), r.text
    answers: list[int] = []

    async def dry_run(app: str = "orders", headers: Any = None) -> None:
        r = await api.call("POST", f"/apps/{app}/workflows/order/dry-run", V1, headers=headers)
        answers.append(r.status_code)

    async def until_entered(count: int) -> None:
        nonlocal arrived
        with trio.fail_after(10):
            while len(entered) < count:
                await arrived.wait()
                arrived = trio.Event()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(dry_run)
        nursery.start_soon(dry_run)
        await until_entered(2)
        with trio.fail_after(5):  # refused at once, not queued behind the two
            r = await post(api, "workflows/order/dry-run", V1)
        assert r.status_code == 429, r.text
        assert r.headers["Retry-After"] == "1"
        error = r.json()["error"]
        assert error["code"] == "overloaded" and error["reason"] == "dry_run_concurrency"
        assert "FOLIOT_DRYRUN_CONCURRENCY" in error["message"] and error["limit"] == 2
        nursery.start_soon(dry_run, "billing", billing)
        await until_entered(3)  # another app's is not refused
        assert entered == ["orders", "orders", "billing"]
        release.set()
    assert answers == [200, 200, 200]
    r = await post(api, "workflows/order/dry-run", V1)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("settings_overrides", [{"dryrun_max_events": 15}])
async def test_a_partial_dry_run_answers_a_cursor_that_resumes_it_over_http(api: Api) -> None:
    await api.register(V1)
    done = []
    for _ in range(3):
        rid = (await api.start("order"))["runId"]
        await signal(api, rid, "go", {"ok": True})
        await signal(api, rid, "done")
        await api.until(rid, "completed")
        done.append(rid)
    seen: list[str] = []
    params = {"replay": "2"}  # the query's `replay` (the cursor carries the runs left after it)
    for _ in range(10):
        r = await post(api, "workflows/order/dry-run", V2, params=params)
        assert r.status_code == 200, r.text
        recorded = r.json()["recorded"]
        assert recorded["sampled"] == 1 and 0 < recorded["events"] <= 15  # one run's events fit
        seen += [d["runId"] for d in recorded["diverged"]]
        if recorded["cursor"] is None:
            break
        params = {"cursor": recorded["cursor"]}
    assert seen == done[::-1][:2]  # the last two closed runs, newest first, each once
    for bad in ("garbage", "W1sxLCJ4Il0", ""):
        r = await post(api, "workflows/order/dry-run", V2, params={"cursor": bad})
        assert r.status_code == 400 and r.json()["error"]["field"] == "cursor", r.text
