"""The operator console over real HTTP on both stores: sign-in, cookies, CSRF, roles, every
page for runs in every status, interventions with validation, pagination, escaping."""

from __future__ import annotations

import html
import re
from typing import Any

import httpx
import pytest

from ..conftest import ADMIN, Api
from ..helpers import answer_json

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def browser(api: Api) -> httpx.AsyncClient:
    """A client with its own cookie jar, like one browser."""
    return httpx.AsyncClient(base_url=str(api.client.base_url), timeout=30)


async def login(api: Api, token: str, c: httpx.AsyncClient) -> httpx.AsyncClient:
    """Sign `c` in to the console with `token` (cookies kept in its jar)."""
    page = await c.get("/console/login")
    assert page.status_code == 200
    csrf = CSRF.search(page.text)
    assert csrf is not None
    r = await c.post("/console/login", data={"token": token, "csrf": csrf.group(1), "next": "/console/"})
    assert r.status_code == 303, r.text
    return c


async def csrf_of(c: httpx.AsyncClient, path: str) -> str:
    page = await c.get(path)
    assert page.status_code == 200, page.text
    found = CSRF.search(page.text)
    assert found is not None
    return found.group(1)


async def operator_token(api: Api, role: str, name: str | None = None) -> str:
    body: dict[str, Any] = {"role": role}
    if name:
        body["name"] = name
    r = await api.client.post("/admin/operator-tokens", json=body, headers=api.admin())
    assert r.status_code == 201, r.text
    assert r.json()["role"] == role and r.json()["token"].startswith("fo_op_")
    return str(r.json()["token"])


def node_classes(page: str, step: str) -> set[str]:
    found = re.search(rf'<g class="([^"]*)" data-step="{step}">', page)
    assert found is not None, step
    return set(found.group(1).split())


WAITER = {
    "name": "w",
    "steps": [{"name": "pay", "type": "wait", "signal": "paid"}, {"name": "t", "type": "task"}],
}


async def test_sign_in_cookie_flags_and_refusals(api: Api) -> None:
    async with httpx.AsyncClient(base_url=str(api.client.base_url), timeout=30) as c:
        first = await c.get("/console/runs?app=orders")
        assert first.status_code == 303
        assert first.headers["location"] == "/console/login?next=%2Fconsole%2Fruns%3Fapp%3Dorders"
        page = await c.get("/console/login")
        csrf = CSRF.search(page.text)
        assert csrf is not None and "HttpOnly" in page.headers["set-cookie"]
        no_csrf = await c.post("/console/login", data={"token": ADMIN})
        assert no_csrf.status_code == 403 and "foliot_console=" not in no_csrf.headers.get("set-cookie", "")
        wrong = await c.post("/console/login", data={"token": "nope", "csrf": csrf.group(1)})
        assert wrong.status_code == 401 and "foliot_console=" not in wrong.headers.get("set-cookie", "")
        # The form again, saying why, and it still signs in.
        assert 'name="token"' in wrong.text and "not an admin or operator token" in wrong.text
        again = CSRF.search(wrong.text)
        assert again is not None and again.group(1) == csrf.group(1)
        app_key = await c.post("/console/login", data={"token": api.key, "csrf": csrf.group(1)})
        assert app_key.status_code == 401  # an app key is not a console token
        extra = await c.post("/console/login", data={"token": ADMIN, "csrf": csrf.group(1), "x": "1"})
        assert extra.status_code == 400
        ok = await c.post(
            "/console/login", data={"token": ADMIN, "csrf": csrf.group(1), "next": "//evil.example"}
        )
        assert ok.status_code == 303 and ok.headers["location"] == "/console/"  # never an open redirect
        cookie = ok.headers["set-cookie"]
        assert cookie.startswith("foliot_console=")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
        home = await c.get("/console/")
        assert home.status_code == 200 and "admin" in home.text
        assert "default-src 'none'" in home.headers["content-security-policy"]
        tampered = httpx.Cookies()
        tampered.set("foliot_console", c.cookies["foliot_console"][:-2] + "00", path="/console")
        async with httpx.AsyncClient(base_url=str(api.client.base_url), cookies=tampered) as t:
            assert (await t.get("/console/")).status_code == 303
        signout_no_csrf = await c.post("/console/logout")
        assert signout_no_csrf.status_code == 403
        signout = await c.post("/console/logout", data={"csrf": await csrf_of(c, "/console/")})
        assert signout.status_code == 303
        assert (await c.get("/console/")).status_code == 303


async def test_every_page_renders_for_runs_in_each_status(api: Api) -> None:
    api.handler.route("bad", lambda b, h: answer_json({"error": {"class": "nope", "retryable": False}}, 400))
    await api.register(
        {
            "name": "all",
            "steps": [
                {
                    "name": "route",
                    "type": "choice",
                    "choices": [
                        {"when": {"path": "input.k", "op": "eq", "value": "done"}, "next": "ok"},
                        {"when": {"path": "input.k", "op": "eq", "value": "fail"}, "next": "bad"},
                        {"when": {"path": "input.k", "op": "eq", "value": "wait"}, "next": "pay"},
                        {"when": {"path": "input.k", "op": "eq", "value": "sleep"}, "next": "nap"},
                        {"when": {"path": "input.k", "op": "eq", "value": "queue"}, "next": "pick"},
                    ],
                },
                {"name": "ok", "type": "task", "next": "$end"},
                {"name": "bad", "type": "task", "next": "$end"},
                {"name": "pay", "type": "wait", "signal": "paid", "timeout": "1d", "onTimeout": "ok"},
                {"name": "nap", "type": "sleep", "duration": "14d", "next": "$end"},
                {"name": "pick", "type": "task", "queue": "warehouse", "next": "$end"},
            ],
        }
    )
    want = {
        "done": "completed",
        "fail": "failed",
        "wait": "waiting",
        "sleep": "sleeping",
        "queue": "running",
        "other": "stuck",
    }
    ids = {}
    for k, status in want.items():
        run = await api.start("all", {"k": k})
        await api.until(run["runId"], status)
        ids[status] = run["runId"]
    cancelled = await api.start("all", {"k": "wait"})
    r = await api.call("POST", f"/apps/orders/runs/{cancelled['runId']}/cancel", {})
    assert r.status_code == 200
    ids["cancelled"] = cancelled["runId"]
    paused = await api.start("all", {"k": "wait"})
    await api.until(paused["runId"], "waiting")
    r = await api.call("POST", f"/apps/orders/runs/{paused['runId']}/pause", {})
    assert r.status_code == 200 and r.json()["status"] == "paused"
    ids["paused"] = paused["runId"]
    timed = await api.start("all", {"k": "wait"}, runTimeout="50ms")
    await api.until(timed["runId"], "timed_out")
    ids["timed_out"] = timed["runId"]
    assert await api.register({**WAITER, "name": "all"}) == 2

    async with browser(api) as c:
        await login(api, ADMIN, c)
        home = await c.get("/console/")
        assert home.status_code == 200
        for status in ids:
            assert f"/console/runs?app=orders&amp;status={status}" in home.text
        runs = await c.get("/console/runs")  # every app at once, from the counters
        assert runs.status_code == 200 and "Every app" in runs.text
        assert "/console/runs?app=orders&amp;status=completed" in runs.text
        for status, run_id in ids.items():
            listed = await c.get("/console/runs", params={"app": "orders", "status": status})
            assert listed.status_code == 200 and run_id in listed.text
            assert [i for i in ids.values() if i in listed.text] == [run_id]
            detail = await c.get(f"/console/apps/orders/runs/{run_id}")
            assert detail.status_code == 200, detail.text
            assert "Why is it not moving?" in detail.text and "<svg" in detail.text
            assert f'<span class="status status-{status}">{status}</span>' in detail.text
        queued = await c.get(f"/console/apps/orders/runs/{ids['running']}")
        assert "queued on `warehouse` for" in html.unescape(queued.text)
        sleeping = await c.get(f"/console/apps/orders/runs/{ids['sleeping']}")
        assert "sleep</td>" in sleeping.text  # the stored timer is listed
        assert node_classes(sleeping.text, "nap") == {"node", "kind-sleep", "visited", "current"}
        assert node_classes(sleeping.text, "route") == {"node", "kind-choice", "visited"}
        assert node_classes(sleeping.text, "ok") == {"node", "kind-task"}
        failed = await c.get(f"/console/apps/orders/runs/{ids['failed']}")
        assert "failed" in node_classes(failed.text, "bad")
        assert "failed" not in node_classes(failed.text, "ok")
        for path in ("/console/actors", "/console/actors?sort=age", "/console/timers", "/console/queues"):
            assert (await c.get(path)).status_code == 200, path
        assert (
            f'<td>run</td><td><a href="/console/apps/orders/runs/{ids["sleeping"]}">'
            in (await c.get("/console/actors")).text
        )
        assert "warehouse" in (await c.get("/console/queues")).text
        assert ids["sleeping"] in (await c.get("/console/timers")).text
        wf = await c.get("/console/workflows", params={"app": "orders"})
        assert wf.status_code == 200 and "/console/apps/orders/workflows/all" in wf.text
        v2 = await c.get("/console/apps/orders/workflows/all")
        assert v2.status_code == 200 and "Diff v1 → v2" in v2.text and '<span class="del">' in v2.text
        v1 = await c.get("/console/apps/orders/workflows/all", params={"version": 1, "against": 2})
        assert v1.status_code == 200 and "Diff v2 → v1" in v1.text
        for bad in (
            "/console/runs?app=orders&status=zzz",
            "/console/runs?app=orders&version=x",
            "/console/runs?app=orders&from=yesterday",
            "/console/runs?app=orders&cursor=%%%",
            "/console/runs?app=orders&sort=1",
            "/console/actors?sort=size",
            "/console/timers?cursor=abc",
            "/console/apps/orders/workflows/all?version=3",
        ):
            r = await c.get(bad)
            assert r.status_code == 400 and "<h1>400 invalid_request</h1>" in r.text, bad
        assert (await c.get("/console/apps/orders/runs/run_nope")).status_code == 404
        assert (await c.get("/console/apps/orders/workflows/nope")).status_code == 404


async def test_pagination_walks_every_run_once(api: Api) -> None:
    await api.register(WAITER)
    started = {(await api.start("w"))["runId"] for _ in range(120)}
    seen: list[str] = []
    async with browser(api) as c:
        await login(api, ADMIN, c)
        url: str | None = "/console/runs?app=orders&workflow=w"
        pages = 0
        while url is not None:
            r = await c.get(url)
            assert r.status_code == 200
            seen += re.findall(r"<code>(run_[0-9a-f]+)</code></a></td>", r.text)
            nxt = re.search(r'<a href="([^"]+)" rel="next">', r.text)
            url = html.unescape(nxt.group(1)) if nxt else None
            pages += 1
    assert pages == 3 and len(seen) == 120 and set(seen) == started


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?app=orders&status=failed&status=running", "status"),
        ("?app=orders&app=other", "app"),
        ("?color=red", "color"),
    ],
)
async def test_a_query_parameter_unknown_or_given_twice_is_400(api: Api, query: str, field: str) -> None:
    async with browser(api) as c:
        await login(api, ADMIN, c)
        r = await c.get("/console/runs" + query)
    assert r.status_code == 400, r.text
    assert field in r.text


async def test_csrf_and_roles_guard_every_intervention(api: Api) -> None:
    await api.register(WAITER)
    run = (await api.start("w"))["runId"]
    await api.until(run, "waiting")
    path = f"/console/apps/orders/runs/{run}/cancel"
    async with browser(api) as viewer, browser(api) as operator:
        await login(api, await operator_token(api, "viewer", "vic"), viewer)
        await login(api, await operator_token(api, "operator", "olga"), operator)
        page = await viewer.get(f"/console/apps/orders/runs/{run}")
        assert "vic" in page.text and "can read" in page.text and "Cancel run" not in page.text
        csrf = await csrf_of(viewer, f"/console/apps/orders/runs/{run}")
        refused = await viewer.post(path, data={"csrf": csrf, "confirm": "yes"})
        assert refused.status_code == 403
        op_csrf = await csrf_of(operator, f"/console/apps/orders/runs/{run}")
        for data in (
            {"confirm": "yes"},
            {"confirm": "yes", "csrf": "0" * 64},
            {"confirm": "yes", "csrf": csrf},
        ):
            r = await operator.post(path, data=data)  # missing, forged, or another session's token
            assert r.status_code == 403, data
        unconfirmed = await operator.post(path, data={"csrf": op_csrf})
        assert unconfirmed.status_code == 400 and "tick the confirmation box" in unconfirmed.text
        unknown = await operator.post(path, data={"csrf": op_csrf, "confirm": "yes", "force": "1"})
        assert unknown.status_code == 400
        assert (await api.run(run))["status"] == "waiting"  # nothing changed by any of these
        assert not any(e["type"] == "run_cancelled" for e in await api.events(run))
        # Admin-only pages are refused to an operator.
        assert (await operator.get("/console/tokens")).status_code == 403
        done = await operator.post(path, data={"csrf": op_csrf, "confirm": "yes", "reason": "test"})
        assert done.status_code == 303 and done.headers["location"].endswith("?done=cancel")
        assert (await api.run(run))["status"] == "cancelled"
        again = await operator.post(path, data={"csrf": op_csrf, "confirm": "yes"})
        assert again.status_code == 409 and '<p class="err">cancel: ' in again.text


async def test_operator_tokens_on_the_api(api: Api) -> None:
    await api.register(WAITER)
    run = (await api.start("w"))["runId"]
    viewer = {"Authorization": f"Bearer {await operator_token(api, 'viewer')}"}
    operator = {"Authorization": f"Bearer {await operator_token(api, 'operator')}"}
    admin_role = {"Authorization": f"Bearer {await operator_token(api, 'admin')}"}
    assert (await api.call("GET", f"/apps/orders/runs/{run}", headers=viewer)).status_code == 200
    assert (await api.call("GET", f"/apps/orders/runs/{run}/diagnosis", headers=viewer)).status_code == 200
    for who in (viewer, operator):
        assert (await api.call("GET", "/admin/actors", headers=who)).status_code == 403
        assert (await api.call("POST", "/apps/orders/workflows", WAITER, headers=who)).status_code == 403
        assert (
            await api.call("POST", "/apps/orders/runs", {"workflow": "w"}, headers=who)
        ).status_code == 403
    r = await api.call("POST", f"/apps/orders/runs/{run}/cancel", {}, headers=viewer)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    assert (await api.run(run))["status"] == "waiting"
    r = await api.call(
        "PATCH", f"/apps/orders/runs/{run}/state", {"set": {"a": 1}, "reason": "r"}, headers=operator
    )
    assert r.status_code == 200 and r.json()["state"] == {"a": 1}
    assert (await api.call("GET", "/admin/operator-tokens", headers=admin_role)).status_code == 200
    assert (await api.call("GET", "/apps/nope/runs", headers=viewer)).status_code == 404


async def test_operator_token_admin_api(api: Api) -> None:
    path = "/admin/operator-tokens"
    for body, field in (
        ({"role": "root"}, "role"),
        ({"role": "viewer", "name": "<b>"}, "name"),
        ({"role": "viewer", "extra": 1}, "extra"),
        ({"role": 3}, "role"),
        ({}, "role"),
    ):
        r = await api.client.post(path, json=body, headers=api.admin())
        assert r.status_code == 400 and r.json()["error"]["field"] == field, (body, r.text)
    bad_json = await api.client.post(
        path, content=b"{", headers={**api.admin(), "content-type": "application/json"}
    )
    assert bad_json.status_code == 400
    assert (await api.client.post(path, json={"role": "viewer"}, headers=api.auth())).status_code == 403
    assert (await api.client.post(path, json={"role": "viewer"})).status_code == 401
    assert (await api.client.get(path, headers=api.admin())).json() == {"tokens": []}  # nothing stored
    token = await operator_token(api, "viewer", "alice")
    listed = (await api.client.get(path, headers=api.admin())).json()["tokens"]
    assert [(t["name"], t["role"]) for t in listed] == [("alice", "viewer")]
    assert "token" not in listed[0] and token not in str(listed)
    async with browser(api) as c:
        await login(api, token, c)
        assert (await c.get("/console/")).status_code == 200
        r = await api.client.delete(f"{path}/{listed[0]['tokenId']}", headers=api.admin())
        assert r.status_code == 200 and r.json()["revoked"] is True
        assert (await c.get("/console/")).status_code == 303  # the session ended with the token
    assert (await api.client.delete(f"{path}/{listed[0]['tokenId']}", headers=api.admin())).status_code == 404
    run_path = "/apps/orders/runs"
    assert (await api.call("GET", run_path, headers={"Authorization": f"Bearer {token}"})).status_code == 401


async def test_state_edit_skip_rewind_redrive_through_forms(api: Api) -> None:
    broken = [True]

    def handler(body: dict[str, Any], headers: dict[str, str]) -> Any:
        if broken[0]:
            return answer_json({"error": {"class": "bad_config", "retryable": False}}, 400)
        return answer_json({"ok": body["state"].get("fix")})

    api.handler.route("t", handler)
    await api.register(WAITER)
    run = (await api.start("w"))["runId"]
    await api.until(run, "waiting")
    async with browser(api) as c:
        await login(api, await operator_token(api, "operator"), c)
        base = f"/console/apps/orders/runs/{run}"
        csrf = await csrf_of(c, base)
        for data, text in (
            ({"set": "{not json", "reason": "r"}, "is not valid JSON"),
            ({"set": "[1]", "reason": "r"}, "must be a JSON object"),
            ({"set": '{"fix": 1}'}, "a reason is required"),
            ({"set": '{"<x>": 1}', "reason": "r"}, "is not a step name"),
            ({"set": '{"a": 1}', "unset": "a", "reason": "r"}, "both set and unset"),
        ):
            r = await c.post(f"{base}/state", data={"csrf": csrf, "confirm": "yes", **data})
            assert r.status_code == 400 and text in html.unescape(r.text), (data, r.text[-600:])
        assert (await api.run(run))["state"] == {}  # nothing changed
        r = await c.post(
            f"{base}/state", data={"csrf": csrf, "confirm": "yes", "set": '{"fix": 1}', "reason": "r"}
        )
        assert r.status_code == 303
        assert (await api.run(run))["state"] == {"fix": 1}
        r = await c.post(f"{base}/skip", data={"csrf": csrf, "confirm": "yes", "output": '{"paid": true}'})
        assert r.status_code == 303
        await api.until(run, "failed")
        broken[0] = False
        r = await c.post(f"{base}/redrive", data={"csrf": csrf, "confirm": "yes", "reason": "fixed"})
        assert r.status_code == 303
        done = await api.until(run, "completed")
        assert done["state"] == {"fix": 1, "pay": {"paid": True}, "t": {"ok": 1}}
        r = await c.post(f"{base}/rewind", data={"csrf": csrf, "confirm": "yes", "toStep": "pay"})
        assert r.status_code == 303
        await api.until(run, "waiting")
        bad = await c.post(
            f"{base}/rewind", data={"csrf": csrf, "confirm": "yes", "toStep": "pay", "version": "9"}
        )
        assert bad.status_code == 404
        page = await c.get(f"{base}?done=rewind")
        assert "rewind: done" in page.text and "waiting at `pay` for signal `paid`" in html.unescape(
            page.text
        )


def offered(page: str) -> set[str]:
    """The interventions a run page offers: its forms' actions."""
    return set(re.findall(r'<form method="post" action="/console/apps/[^"]+/runs/[^/"]+/([a-z]+)"', page))


async def test_a_run_page_offers_only_what_the_api_accepts(api: Api) -> None:
    """Issue 38, item 8: a queued run offered skip (`skip None`) and rewind, which the API
    refuses. Each page offers exactly the interventions `machine.accepts` allows, and each one
    offered is accepted, each other one refused with 409."""
    await api.register({**WAITER, "name": "one", "concurrency": {"limit": 1}})
    first = (await api.start("one"))["runId"]
    await api.until(first, "waiting")
    queued = (await api.start("one"))["runId"]
    await api.until(queued, "queued")
    async with browser(api) as c:
        await login(api, await operator_token(api, "operator"), c)
        page = await c.get(f"/console/apps/orders/runs/{queued}")
        assert page.status_code == 200
        assert offered(page.text) == {"cancel", "pause", "state"}
        assert "skip None" not in page.text and ">Rewind<" not in page.text
        waiting = await c.get(f"/console/apps/orders/runs/{first}")
        assert offered(waiting.text) == {"cancel", "pause", "rewind", "skip", "state"}
        csrf = await csrf_of(c, f"/console/apps/orders/runs/{queued}")
        form = {"csrf": csrf, "confirm": "yes"}
        for action in ("skip", "rewind", "redrive", "unpause"):
            data = {**form, "toStep": "w"} if action == "rewind" else form
            r = await c.post(f"/console/apps/orders/runs/{queued}/{action}", data=data)
            assert r.status_code == 409, (action, r.status_code)
        paused = await c.post(f"/console/apps/orders/runs/{queued}/pause", data=form)
        assert paused.status_code == 303
        page = await c.get(f"/console/apps/orders/runs/{queued}")
        assert offered(page.text) == {"cancel", "unpause", "state"}
        await c.post(f"/console/apps/orders/runs/{queued}/cancel", data=form)
        closed = (await c.get(f"/console/apps/orders/runs/{queued}")).text
        assert offered(closed) == set() and "No intervention applies to a run that is cancelled" in closed


@pytest.mark.parametrize("where", ["businessKey", "error", "signal", "input"])
async def test_hostile_text_is_escaped(api: Api, where: str) -> None:
    evil = "<script>alert(1)</script>"
    api.handler.route(
        "t", lambda b, h: answer_json({"error": {"class": "x", "message": evil, "retryable": False}}, 500)
    )
    await api.register(WAITER)
    run = await api.start(
        "w",
        {"note": evil} if where == "input" else None,
        businessKey=evil if where == "businessKey" else None,
    )
    run_id = run["runId"]
    if where == "signal":
        r = await api.call(
            "POST",
            "/apps/orders/signals",
            {"name": "other", "runId": run_id, "payload": {"x": evil}, "allowUnknown": True},
        )
        assert r.json()["status"] == "buffered"
    if where == "error":
        await api.call("POST", "/apps/orders/signals", {"name": "paid", "runId": run_id})
        await api.until(run_id, "failed")
    async with browser(api) as c:
        await login(api, ADMIN, c)
        pages = [
            await c.get(f"/console/apps/orders/runs/{run_id}"),
            await c.get("/console/runs", params={"app": "orders"}),
        ]
    for page in pages:
        assert page.status_code == 200
        assert evil not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[0].text


async def statuses(api: Api, run_ids: list[str]) -> set[str]:
    return {(await api.run(r))["status"] for r in run_ids}


async def test_bulk_cancel_shows_the_count_asks_and_cancels_exactly_those(api: Api) -> None:
    await api.register(WAITER)
    await api.register({**WAITER, "name": "other"})
    targets = [(await api.start("w"))["runId"] for _ in range(50)]
    others = [(await api.start("other"))["runId"] for _ in range(3)]
    for run_id in [*targets, *others]:
        await api.until(run_id, "waiting")
    async with browser(api) as c, browser(api) as viewer:
        await login(api, ADMIN, c)
        await login(api, await operator_token(api, "viewer"), viewer)
        listing = await c.get("/console/runs", params={"app": "orders", "workflow": "w", "status": "waiting"})
        assert "50 run(s) match this filter." in listing.text
        unfiltered = await c.get("/console/runs", params={"app": "orders"})
        assert "filter by workflow first" in unfiltered.text
        csrf = await csrf_of(c, "/console/runs?app=orders&workflow=w")
        fields = {"app": "orders", "workflow": "w", "status": "waiting"}
        ask = await c.post("/console/runs/bulk/cancel", data={"csrf": csrf, **fields})
        assert ask.status_code == 200 and "<strong>50</strong> run(s) of app" in ask.text
        assert await statuses(api, targets) == {"waiting"}  # asking changed nothing
        v_csrf = await csrf_of(viewer, "/console/runs?app=orders&workflow=w")
        refused = await viewer.post(
            "/console/runs/bulk/cancel", data={"csrf": v_csrf, "confirm": "yes", **fields}
        )
        assert refused.status_code == 403
        forged = await c.post("/console/runs/bulk/cancel", data={"csrf": v_csrf, "confirm": "yes", **fields})
        assert forged.status_code == 403
        bad = await c.post(
            "/console/runs/bulk/cancel", data={"csrf": csrf, "confirm": "yes", "app": "orders"}
        )
        assert bad.status_code == 400  # no workflow
        assert await statuses(api, targets) == {"waiting"}
        done = await c.post(
            "/console/runs/bulk/cancel",
            data={"csrf": csrf, "confirm": "yes", "reason": "bulk test", **fields},
        )
        assert done.status_code == 200, done.text
        assert "50 run(s) examined: 50 cancelled, 0 skipped" in done.text
        again = await c.post("/console/runs/bulk/cancel", data={"csrf": csrf, "confirm": "yes", **fields})
        assert "0 run(s) examined" in again.text  # none is waiting any more
    assert await statuses(api, targets) == {"cancelled"}
    assert await statuses(api, others) == {"waiting"}


async def test_overview_draws_the_trends_and_serves_them_as_json(api: Api) -> None:
    await api.register(WAITER)
    await api.register({"name": "pull", "steps": [{"name": "p", "type": "task", "queue": "warehouse"}]})
    run = await api.start("w")
    await api.until(run["runId"], "waiting")
    queued = await api.start("pull")
    await api.until(queued["runId"], "running")
    await api.engine.sampler.sample_once()  # one more sample now (the first was at start-up)
    async with browser(api) as c:
        refused = await c.get("/console/trends.json")
        assert refused.status_code == 303 and refused.headers["location"].startswith("/console/login")
        await login(api, ADMIN, c)
        home = await c.get("/console/")
        assert home.status_code == 200
        # the engine's series, then the app's (started, completed, failed) and the queue's own
        # (backlog, pollers waiting)
        assert home.text.count('<svg class="spark"') == len(api.engine.trends.series) + 3 + 2
        assert f'aria-label="{api.app}: runs started / interval"' in home.text
        row = re.search(rf'aria-label="{api.app}/warehouse: backlog">(.*?)</span>', home.text, re.S)
        assert row is not None and "now 1</span>" in row.group(0)
        assert "<polyline" in home.text
        row = re.search(r"<th>waiting</th><td>(.*?)</td></tr>", home.text, re.S)
        assert row is not None and "min 0 · max 1 · now 1</span>" in row.group(1)
        assert "<script" not in home.text
        assert "default-src 'none'" in home.headers["content-security-policy"]
        body = await c.get("/console/trends.json")
        assert body.status_code == 200 and body.headers["content-type"].startswith("application/json")
        assert "default-src 'none'" in body.headers["content-security-policy"]
        series = body.json()["series"]
        assert body.json()["intervalMs"] == 10_000 and body.json()["samples"] == 360
        assert series["runs.waiting"]["points"][-1][1] == 1
        assert series["runs.waiting"]["points"][0][1] == 0
        started = body.json()["apps"][api.app]["started"]["points"]
        assert sum(v for _, v in started) == 2 and started[-1][1] == 2
        queue = body.json()["queues"][f"{api.app}/warehouse"]
        assert queue["backlog"]["points"][-1][1] == 1 and queue["pollers"]["points"][-1][1] == 0
        page = await c.get("/console/queues")
        assert f'aria-label="{api.app}/warehouse: pollers waiting"' in page.text
        assert (await c.get("/console/trends.json?x=1")).status_code == 400


async def test_the_overview_shows_the_next_timer_in_storage_and_a_failing_step_is_red(api: Api) -> None:
    await api.register({"name": "nap", "steps": [{"name": "z", "type": "sleep", "duration": "1h"}]})
    await api.start("nap")
    api.handler.route("t", lambda body, headers: answer_json({"error": {"class": "down"}}, 503))
    await api.register(
        {
            "name": "flaky",
            "steps": [{"name": "t", "type": "task", "retry": {"maxAttempts": 5, "initialInterval": "1h"}}],
        }
    )
    flaky = await api.start("flaky")
    await api.engine.runs.wait_for(flaky["runId"], lambda r: r.timer is not None and r.timer.kind == "retry")
    async with browser(api) as c:
        await login(api, ADMIN, c)
        home = await c.get("/console/")
        assert home.status_code == 200
        due = re.search(r"<th>next due \(storage\)</th><td>([^<]+)</td>", home.text)
        assert due is not None and due.group(1) != "—"
        page = await c.get(f"/console/apps/orders/runs/{flaky['runId']}")
        assert "failed" in node_classes(page.text, "t") and "visited" not in node_classes(page.text, "t")


async def test_the_runs_list_and_overview_show_what_needs_attention(api: Api) -> None:
    """Issue 26 point 9: a waiting run holding a signal no step waits for is flagged in the
    runs list's attention column and counted on the overview's card."""
    await api.register(
        {"name": "pay", "steps": [{"name": "w", "type": "wait", "signal": "payment-confirmed"}]}
    )
    typo = await api.start("pay")
    await api.until(typo["runId"], "waiting")
    r = await api.call(
        "POST",
        f"/apps/{api.app}/signals",
        {"name": "payment-confrimed", "runId": typo["runId"], "allowUnknown": True},  # past the 422
    )
    assert r.status_code == 202
    async with browser(api) as c:
        await login(api, ADMIN, c)
        listed = await c.get(f"/console/runs?app={api.app}")
        assert listed.status_code == 200
        assert "<th>attention</th>" in listed.text and ">unconsumed_signal</span>" in listed.text
        home = await c.get("/console/")
        card = home.text[home.text.index('id="attention"') :]
        card = card[: card.index("</table>")]
        cells = re.findall(r'<td class="n">(\d+)</td>', card)
        assert api.app in card and cells == ["0", "0", "0", "1"]


async def test_a_wide_table_stays_inside_its_card(api: Api) -> None:
    """Issue 38, item 8: the overview's "Needs attention" table spilled out of its card. A card
    in the grid may shrink below its content (`min-width:0`), scrolls what is still too wide
    (`overflow-x:auto`), and a long name in a cell wraps."""
    async with browser(api) as c:
        await login(api, ADMIN, c)
        home = (await c.get("/console/")).text
    rule = re.search(r"\.card\{([^}]*)\}", home)
    assert rule is not None
    declarations = set(rule.group(1).split(";"))
    assert {"min-width:0", "overflow-x:auto"} <= declarations
    assert ".card td{overflow-wrap:anywhere}" in home
    assert '<div class="card" id="attention">' in home
