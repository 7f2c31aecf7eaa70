"""Console sessions that end (issue 20, item 4), over real HTTP on both stores: a copied cookie
is refused once its session signed out, an operator can list and end sessions, and a new admin
token ends them all."""

from __future__ import annotations

import httpx

from foliot.server import end_sessions_of_other_tokens

from ..conftest import ADMIN, Api
from .test_console import browser, csrf_of, login, operator_token


def copy_of(c: httpx.AsyncClient, api: Api) -> httpx.AsyncClient:
    """Another client holding `c`'s session cookie, as a thief who copied it would."""
    thief = browser(api)
    thief.cookies.set("foliot_console", c.cookies["foliot_console"], path="/console")
    return thief


async def signed_in(c: httpx.AsyncClient) -> bool:
    r = await c.get("/console/")
    assert r.status_code in (200, 303), r.text
    return r.status_code == 200


async def test_sign_out_ends_the_session_for_every_copy_of_the_cookie(api: Api) -> None:
    async with browser(api) as c:
        await login(api, ADMIN, c)
        async with copy_of(c, api) as thief:
            assert await signed_in(thief)
            csrf = await csrf_of(c, "/console/")
            out = await c.post("/console/logout", data={"csrf": csrf})
            assert out.status_code == 303 and out.headers["location"] == "/console/login"
            page = await thief.get("/console/")
            assert page.status_code == 303 and page.headers["location"].startswith("/console/login")
            post = await thief.post("/console/logout", data={"csrf": csrf})
            assert post.status_code == 401
        assert not await signed_in(c)


async def test_an_operator_lists_and_ends_sessions(api: Api) -> None:
    unauthenticated = await api.client.get("/admin/sessions")
    assert unauthenticated.status_code == 401 and unauthenticated.json()["error"]["code"] == "unauthorized"
    token = await operator_token(api, "viewer", "night-shift")
    async with browser(api) as a, browser(api) as b:
        await login(api, ADMIN, a)
        await login(api, token, b)
        r = await api.client.get("/admin/sessions", headers=api.admin())
        assert r.status_code == 200, r.text
        listed = r.json()["sessions"]
        assert [(s["subject"] == "admin", s["role"], s["name"]) for s in listed] == [
            (False, "viewer", "night-shift"),
            (True, "admin", "admin token"),
        ]
        assert all(s["sessionId"].startswith("ses_") and s["expiresAt"] > s["idleExpiresAt"] for s in listed)
        secrets = [c.cookies["foliot_console"].split(".")[1] for c in (a, b)]
        assert not any(secret in r.text for secret in secrets)  # the list never shows a cookie's secret
        viewer = listed[0]["sessionId"]
        ended = await api.client.delete(f"/admin/sessions/{viewer}", headers=api.admin())
        assert ended.status_code == 200 and ended.json() == {"sessionId": viewer, "ended": True}
        assert not await signed_in(b) and await signed_in(a)
        again = await api.client.delete(f"/admin/sessions/{viewer}", headers=api.admin())
        assert again.status_code == 404 and again.json()["error"]["code"] == "not_found"
        viewer_key = await api.client.delete(f"/admin/sessions/{viewer}", headers=api.auth())
        assert viewer_key.status_code in (401, 403)
        left = (await api.client.get("/admin/sessions", headers=api.admin())).json()["sessions"]
        assert [s["subject"] for s in left] == ["admin"]


async def test_a_revoked_operator_token_takes_its_sessions_with_it(api: Api) -> None:
    token = await operator_token(api, "operator")
    async with browser(api) as c:
        await login(api, token, c)
        token_id = token.split(".")[0].removeprefix("fo_")
        assert (
            await api.client.delete(f"/admin/operator-tokens/{token_id}", headers=api.admin())
        ).status_code == 200
        assert not await signed_in(c)
        assert (await api.client.get("/admin/sessions", headers=api.admin())).json()["sessions"] == []


async def test_a_new_admin_token_ends_every_session(api: Api) -> None:
    async with browser(api) as c:
        await login(api, ADMIN, c)
        assert await signed_in(c)
        # What `foliot serve` does at start-up under another FOLIOT_ADMIN_TOKEN.
        await end_sessions_of_other_tokens(api.engine, "adm_the_new_token")
        assert not await signed_in(c)
        await login(api, ADMIN, c)  # signing in again makes a new session
        assert await signed_in(c)
