"""Lambda functions, parked executions and SWF observability over HTTP on a live Foliot, both
stores: the admin registry (`/admin/lambda`) with every refusal storing nothing, a boto3 decider
whose ScheduleLambdaFunction reaches a real HTTP function through Foliot's push client, the
parked-execution routes, SWF actors in `/admin/actors` and SWF series in `/metrics`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx
import pytest
import trio

from .conftest import Swf, admin, call
from .test_write_boto3 import WF, setup


class FunctionServer:
    """A minimal HTTP function: answers each POST with `replies[path]` (status, headers, body)
    and keeps what it was sent."""

    def __init__(self) -> None:
        self.received: list[tuple[str, bytes, dict[str, str]]] = []
        self.replies: dict[str, tuple[int, list[tuple[str, str]], bytes]] = {}
        self.port = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        body = b""
        target = ""
        headers: dict[str, str] = {}
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Request):
                target = event.target.decode()
                headers = {k.decode(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
        self.received.append((target, body, headers))
        status, extra, reply = self.replies.get(target, (200, [], b"null"))
        out = conn.send(
            h11.Response(status_code=status, headers=[("content-length", str(len(reply))), *extra])
        )
        out = (out or b"") + (conn.send(h11.Data(data=reply)) or b"") + (conn.send(h11.EndOfMessage()) or b"")
        await stream.send_all(out)
        await stream.aclose()


@pytest.fixture
async def functions(nursery: trio.Nursery) -> AsyncIterator[FunctionServer]:
    server = FunctionServer()
    await nursery.start(server.serve)
    yield server


async def test_the_lambda_registry_and_its_refusals(swf: Swf) -> None:
    async with httpx.AsyncClient(base_url=swf.url, headers=admin()) as http:
        put = await http.put("/admin/lambda/us-east-1/charge", json={"url": "http://fn.example/charge"})
        assert put.status_code == 201
        first = put.json()
        assert first["region"] == "us-east-1" and first["name"] == "charge"
        assert first["url"] == "http://fn.example/charge" and first["createdAt"] == first["updatedAt"]
        await trio.sleep(0.002)
        again = await http.put("/admin/lambda/us-east-1/charge", json={"url": "https://fn.example/v2?x=1"})
        assert again.status_code == 200
        assert again.json()["createdAt"] == first["createdAt"] and again.json()["url"].endswith("v2?x=1")
        await http.put("/admin/lambda/eu-west-1/refund", json={"url": "http://fn.example/refund"})
        everything = (await http.get("/admin/lambda")).json()["functions"]
        assert [(f["region"], f["name"]) for f in everything] == [
            ("eu-west-1", "refund"),
            ("us-east-1", "charge"),
        ]
        regional = (await http.get("/admin/lambda/eu-west-1")).json()["functions"]
        assert [f["name"] for f in regional] == ["refund"]
        assert (await http.get("/admin/lambda/us-east-1/charge")).json()["url"] == "https://fn.example/v2?x=1"

        refusals: list[tuple[str, Any, int]] = [
            ("/admin/lambda/us-east-1/bad", b"{not json", 400),
            ("/admin/lambda/us-east-1/bad", {"url": "http://x", "extra": 1}, 400),
            ("/admin/lambda/us-east-1/bad", {"url": 5}, 400),
            ("/admin/lambda/us-east-1/bad", {}, 400),
            ("/admin/lambda/us-east-1/bad", {"url": "ftp://x/y"}, 400),
            ("/admin/lambda/us-east-1/bad", {"url": "http://x/a b"}, 400),
            ("/admin/lambda/us-east-1/bad", {"url": "http://x/\u0000"}, 400),
            ("/admin/lambda/us-east-1/bad", {"url": "http://x/#frag"}, 400),
            ("/admin/lambda/us-east-1/bad", {"url": "http://x:abc/fn"}, 400),
            ("/admin/lambda/us-east-1/bad", {"url": "http://x:70000/fn"}, 400),
            ("/admin/lambda/us-east-1/bad", {"url": "http://key:secret@x/fn"}, 400),
            ("/admin/lambda/us-east-1/bad", {"url": "http://x/fn?q=a|b"}, 400),
            ("/admin/lambda/us-east-1/bad", {"url": "http://x/" + "a" * 2100}, 400),
            ("/admin/lambda/us-east-1/bad%20name", {"url": "http://x"}, 400),
            ("/admin/lambda/us-east-1/" + "n" * 65, {"url": "http://x"}, 400),
            ("/admin/lambda/US_EAST/bad", {"url": "http://x"}, 400),
            ("/admin/lambda/us-east-1/bad", {"url": "http://x/" + "a" * 2_000_000}, 413),
        ]
        for path, payload, status in refusals:
            if isinstance(payload, bytes):
                r = await http.put(path, content=payload, headers={"content-type": "application/json"})
            else:
                r = await http.put(path, json=payload)
            assert r.status_code == status, (path, r.text)
            assert "error" in r.json() and r.json()["error"]["code"]
        assert (
            await http.put("/admin/lambda/us-east-1/x", json={"url": "http://x"}, headers={})
        ).status_code == 201
        anonymous = await httpx.AsyncClient(base_url=swf.url).put(
            "/admin/lambda/us-east-1/y", json={"url": "http://x"}
        )
        assert anonymous.status_code == 401
        wrong = await http.put(
            "/admin/lambda/us-east-1/y", json={"url": "http://x"}, headers={"Authorization": "Bearer nope"}
        )
        assert wrong.status_code == 401
        names = [f["name"] for f in (await http.get("/admin/lambda/us-east-1")).json()["functions"]]
        assert names == ["charge", "x"]  # nothing refused was stored

        assert (await http.delete("/admin/lambda/us-east-1/x")).json() == {
            "region": "us-east-1",
            "name": "x",
            "deleted": True,
        }
        assert (await http.delete("/admin/lambda/us-east-1/x")).status_code == 404
        assert (await http.get("/admin/lambda/us-east-1/x")).status_code == 404
        assert (await http.get("/admin/lambda?x=1")).status_code == 400


async def test_a_decider_schedules_a_lambda_function_served_over_http(
    swf: Swf, functions: FunctionServer
) -> None:
    c = await setup(swf)
    async with httpx.AsyncClient(base_url=swf.url, headers=admin()) as http:
        for name in ("ok", "boom"):
            url = f"http://127.0.0.1:{functions.port}/{name}"
            assert (await http.put(f"/admin/lambda/us-east-1/{name}", json={"url": url})).status_code == 201
    functions.replies["/ok"] = (200, [], b'{"charged": true}')
    functions.replies["/boom"] = (200, [("X-Amz-Function-Error", "Unhandled")], b'{"errorMessage": "x"}')
    run_id = (
        await call(
            c.start_workflow_execution,
            domain="d",
            workflowId="l-1",
            workflowType=WF,
            lambdaRole="arn:aws:iam::1:role/r",
        )
    )["runId"]
    task = await call(c.poll_for_decision_task, domain="d", taskList={"name": "deciders"})
    decisions = [
        {
            "decisionType": "ScheduleLambdaFunction",
            "scheduleLambdaFunctionDecisionAttributes": {"id": "a", "name": "ok", "input": '{"amount": 5}'},
        },
        {
            "decisionType": "ScheduleLambdaFunction",
            "scheduleLambdaFunctionDecisionAttributes": {"id": "b", "name": "boom"},
        },
    ]
    await call(c.respond_decision_task_completed, taskToken=task["taskToken"], decisions=decisions)
    seen: set[str] = set()
    while not {"LambdaFunctionCompleted", "LambdaFunctionFailed"} <= seen:  # each outcome asks the decider
        task = await call(c.poll_for_decision_task, domain="d", taskList={"name": "deciders"})
        seen |= {e["eventType"] for e in task["events"]}
        await call(c.respond_decision_task_completed, taskToken=task["taskToken"], decisions=[])
    assert sorted(body for _, body, _ in functions.received) == [b'{"amount": 5}', b"{}"]
    out = await call(
        c.get_workflow_execution_history, domain="d", execution={"workflowId": "l-1", "runId": run_id}
    )
    by_type = {e["eventType"]: e for e in out["events"]}
    assert by_type["LambdaFunctionCompleted"]["lambdaFunctionCompletedEventAttributes"]["result"] == (
        '{"charged": true}'
    )
    failed = by_type["LambdaFunctionFailed"]["lambdaFunctionFailedEventAttributes"]
    assert failed["reason"] == "Unhandled" and failed["details"] == '{"errorMessage": "x"}'

    async with httpx.AsyncClient(base_url=swf.url, headers=admin()) as http:
        live = (await http.get("/admin/actors", params={"kind": "swf"})).json()["actors"]
        assert [(a["kind"], a["runId"], a["status"]) for a in live] == [("swf", run_id, "OPEN")]
        assert (await http.get("/admin/actors", params={"kind": "run"})).json()["actors"] == []
        assert (await http.get("/admin/actors", params={"kind": "nope"})).status_code == 400
        metrics = (await http.get("/metrics")).text
        assert "foliot_swf_open_executions 1.0" in metrics
        assert 'foliot_swf_decisions_total{decision="ScheduleLambdaFunction"} 2.0' in metrics
        assert 'foliot_swf_lambda_calls_total{outcome="completed"} 1.0' in metrics
        assert "foliot_swf_parked_executions 0.0" in metrics
        assert 'foliot_swf_poll_wait_seconds_count{kind="decision",result="task"}' in metrics
        assert (await http.get("/admin/swf/parked")).json() == {"parked": [], "next": None}
        assert (await http.post(f"/admin/swf/parked/us-east-1/{run_id}/resume")).status_code == 404
        assert (await http.get("/admin/swf/parked", params={"after": "nonsense"})).status_code == 400
