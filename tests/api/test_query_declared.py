"""A view that reads a query parameter declares it (issue 38, item 8).

`GET /admin/sessions?limit=1` and `POST …/dry-run?replay=N` were 400s: their views read the
query but were not marked `@reads_query`, so the gate in `authenticate_header` refused every
query to them before they ran. Two guards make that mistake impossible:

- statically, for every route of the app the server builds (the API and the console): the
  view's source, and the helpers it calls, read only the parameters its `check_query` names;
  a view that names any is marked `@reads_query`, one that names none is not; and an API
  route's parameters are the ones its OpenAPI document lists;
- at run time, `check_query` and `query_int` raise `UndeclaredQuery` in a view not marked.

And the three routes themselves, over real HTTP on both stores.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator
from typing import Any, cast

import attrs
import pytest
from quart import Quart, request

from foliot.console import views as console
from foliot.core.config import Settings
from foliot.http import app as http_app
from foliot.http.app import check_query, create_app, query_int, reads_query
from foliot.http.openapi import QUERY, UNPUBLISHED, published

from ..conftest import ADMIN, Api
from .test_console import browser, login
from .test_deploys import V2, post, setup


@attrs.define
class Reads:
    """What a view and the helpers it calls do with the query string."""

    declared: set[str] | None = None  # the union of its `check_query` sets; None: never called
    named: set[str] = attrs.Factory(set)  # parameters read by a literal name
    whole: list[str] = attrs.Factory(list)  # where the query is read other than by name
    seen: set[Callable[..., Any]] = attrs.Factory(set)


def _is_request_args(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "args"
        and isinstance(node.value, ast.Name)
        and node.value.id == "request"
    )


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _declared_set(fn: Callable[..., Any], arg: ast.expr) -> set[str]:
    """The set a `check_query(...)` call passes: a literal, `set()`, or a module constant."""
    if isinstance(arg, ast.Set):
        names = [_literal(e) for e in arg.elts]
        assert all(n is not None for n in names), f"{fn.__qualname__}: check_query takes literal names"
        return {n for n in names if n is not None}
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "set" and not arg.args:
        return set()
    if isinstance(arg, ast.Name):
        value = fn.__globals__.get(arg.id)
        assert isinstance(value, set | frozenset), f"{fn.__qualname__}: check_query({arg.id}) is no set"
        return set(value)
    raise AssertionError(f"{fn.__qualname__}: check_query takes a set literal or a module constant")


def _callees(fn: Callable[..., Any], tree: ast.AST) -> Iterator[Callable[..., Any]]:
    """Functions of the product this one calls by name (not the framework's own helpers in
    `foliot.http.app`, which read the query on the view's behalf)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            target = fn.__globals__.get(node.func.id)
            if (
                isinstance(target, types.FunctionType)
                and target.__module__.startswith(("foliot.", __name__))
                and target.__module__ != http_app.__name__
            ):
                yield inspect.unwrap(target)


def _named_read(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str | None:
    """The parameter `request.args` is read for at `node` (`.get("x")`, `.getlist("x")`,
    `["x"]`, `"x" in`), or None when the query is read some other way (whole, or by a name
    not written out)."""
    parent = parents.get(node)
    call = parents.get(parent) if parent is not None else None
    if isinstance(parent, ast.Attribute) and parent.attr in ("get", "getlist"):
        if isinstance(call, ast.Call) and call.func is parent and call.args:
            return _literal(call.args[0])
        return None
    if isinstance(parent, ast.Subscript):
        return _literal(parent.slice)
    if isinstance(parent, ast.Compare):
        return _literal(parent.left)
    return None


def scan(fn: Callable[..., Any], reads: Reads, depth: int = 0) -> Reads:
    fn = inspect.unwrap(fn)
    if fn in reads.seen or depth > 4:
        return reads
    reads.seen.add(fn)
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    where = f"{fn.__module__}.{fn.__qualname__}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "check_query":
                found = _declared_set(fn, node.args[0])
                reads.declared = found if reads.declared is None else reads.declared | found
            elif node.func.id == "query_int":
                name = _literal(node.args[0]) if node.args else None
                if name is None:
                    reads.whole.append(f"{where}: query_int without a literal name")
                else:
                    reads.named.add(name)
        if not _is_request_args(node):
            continue
        name = _named_read(node, parents)
        if name is not None:
            reads.named.add(name)
        else:
            reads.whole.append(f"{where} line {getattr(node, 'lineno', '?')}")
    for callee in _callees(fn, tree):
        scan(callee, reads, depth + 1)
    return reads


def built_app() -> Quart:
    """The app `foliot serve` builds (the API and the console's pages); only its routes are
    looked at, so no engine is needed."""
    return create_app(cast(Any, None), Settings(), "x", faces=[console.blueprint])


# Marked without reading: the SWF endpoint speaks AWS's protocol, which passes a query through
# unread (as AWS does) rather than refusing it.
TOLERATES_QUERY = {"swf.swf"}


def problems(app: Quart) -> list[str]:
    found = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static" or rule.endpoint in TOLERATES_QUERY:
            continue
        view = app.view_functions[rule.endpoint]
        reads = scan(view, Reads())
        marked = view in http_app._READS_QUERY
        declared = reads.declared
        name = f"{sorted(rule.methods or ())} {rule.rule} ({rule.endpoint})"
        if declared is None:
            if reads.named or reads.whole:
                read = sorted(reads.named) or reads.whole
                found.append(f"{name}: reads {read} but never calls check_query")
            if marked:
                found.append(f"{name}: marked @reads_query but never calls check_query")
            continue
        if reads.named - declared:
            found.append(f"{name}: reads {sorted(reads.named - declared)}, not in its check_query set")
        if reads.whole and not declared:
            found.append(f"{name}: reads the query ({reads.whole}) but its check_query set is empty")
        if bool(declared) != marked:
            found.append(
                f"{name}: check_query names {sorted(declared)} but the view is "
                + ("marked @reads_query" if marked else "not marked @reads_query")
            )
        if not rule.rule.startswith(UNPUBLISHED):
            for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}:
                documented = set(QUERY.get((method, published(rule.rule)), {}))
                if documented != declared:
                    found.append(f"{name}: takes {sorted(declared)}, OpenAPI lists {sorted(documented)}")
    return found


def test_every_view_declares_the_query_parameters_it_reads() -> None:
    app = built_app()
    assert len(list(app.url_map.iter_rules())) > 50  # the walk sees the whole app
    assert problems(app) == []


def _probe_helper() -> str | None:
    return request.args.get("cursor")


def test_the_static_check_catches_an_undeclared_reader() -> None:
    """The check above can fail: a view reading `limit` unmarked, one reading a parameter its
    set omits, one marked without reading, one reading the whole query are each found."""
    app = built_app()

    @app.get("/probe/unmarked")
    async def unmarked() -> str:
        check_query({"limit"})
        return str(query_int("limit", 1, 1, 10))

    @app.get("/probe/omitted")
    @reads_query
    async def omitted() -> str:
        check_query({"limit"})
        return str(_probe_helper())

    @app.get("/probe/idle")
    @reads_query
    async def idle() -> str:
        return ""

    @app.get("/probe/whole")
    async def whole() -> str:
        check_query(set())
        return str(dict(request.args))

    found = "\n".join(problems(app))
    assert "/probe/unmarked" in found and "not marked @reads_query" in found
    assert "/probe/omitted" in found and "['cursor'], not in its check_query set" in found
    assert "/probe/idle" in found and "never calls check_query" in found
    assert "/probe/whole" in found and "its check_query set is empty" in found


async def test_a_view_reading_an_undeclared_query_fails_at_run_time(api: Api) -> None:
    """The run-time guard: `check_query` or `query_int` in a view not marked raises (a 500,
    logged), also when the request has no query at all, so any test calling the view fails."""
    app = create_app(api.engine, api.engine.settings, ADMIN)

    @app.get("/probe/unmarked")
    async def unmarked() -> str:
        check_query({"limit"})
        return "read"

    @app.get("/probe/int")
    async def int_only() -> str:
        return str(query_int("limit", 1, 1, 10))

    @app.get("/probe/marked")
    @reads_query
    async def marked() -> str:
        check_query({"limit"})
        return str(query_int("limit", 1, 1, 10))

    client = app.test_client()
    with pytest.raises(http_app.UndeclaredQuery, match="not marked @reads_query"):
        async with app.test_request_context("/probe/unmarked"):
            await unmarked()
    assert (await client.get("/probe/unmarked")).status_code == 500
    assert (await client.get("/probe/int")).status_code == 500
    ok = await client.get("/probe/marked?limit=3")
    assert ok.status_code == 200 and (await ok.get_data(as_text=True)) == "3"


# ---------------------------------------------------------------------- the routes themselves


async def test_admin_sessions_takes_limit(api: Api) -> None:
    async with browser(api) as a, browser(api) as b:
        await login(api, ADMIN, a)
        await login(api, ADMIN, b)
        r = await api.client.get("/admin/sessions", params={"limit": "1"}, headers=api.admin())
        assert r.status_code == 200, r.text
        assert len(r.json()["sessions"]) == 1
        every = await api.client.get("/admin/sessions", headers=api.admin())
        assert len(every.json()["sessions"]) == 2
        bad = await api.client.get("/admin/sessions", params={"limit": "0"}, headers=api.admin())
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "limit"
        odd = await api.client.get("/admin/sessions", params={"x": "1"}, headers=api.admin())
        assert odd.status_code == 400 and odd.json()["error"]["field"] == "x"


async def test_ending_a_session_with_an_unknown_member_is_a_400_and_ends_nothing(api: Api) -> None:
    async with browser(api) as c:
        await login(api, ADMIN, c)
        [session] = (await api.client.get("/admin/sessions", headers=api.admin())).json()["sessions"]
        sid = session["sessionId"]
        path = f"/admin/sessions/{sid}"
        odd = await api.client.request("DELETE", path, json={"reason": "x"}, headers=api.admin())
        assert odd.status_code == 400 and odd.json()["error"]["field"] == "reason", odd.text
        query = await api.client.delete(path, params={"reason": "x"}, headers=api.admin())
        assert query.status_code == 400 and query.json()["error"]["field"] == "reason"
        assert (await c.get("/console/")).status_code == 200  # still signed in
        empty = await api.client.request("DELETE", path, json={}, headers=api.admin())
        assert empty.status_code == 200 and empty.json()["ended"] is True
        assert (await c.get("/console/")).status_code == 303


async def test_dry_run_takes_replay_in_the_query(api: Api) -> None:
    await setup(api)
    none = await post(api, "workflows/order/dry-run", V2, params={"replay": "0"})
    assert none.status_code == 200, none.text
    assert none.json()["recorded"]["sampled"] == 0
    one = await post(api, "workflows/order/dry-run", V2, params={"replay": "1"})
    assert one.status_code == 200 and one.json()["recorded"]["sampled"] == 1
    big = await post(api, "workflows/order/dry-run", V2, params={"replay": "1001"})
    assert big.status_code == 400 and big.json()["error"]["field"] == "replay"
    assert "0..1000" in big.json()["error"]["message"]  # the view's check, not the gate's refusal
