"""The bare quart-trio floor: the least a quart-trio app on hypercorn's trio worker can do.

    python bench/floor_app.py --port 8999 --token T

`POST /apps/<app>/runs` and `POST /apps/<app>/signals` compare a bearer token, parse the JSON
body and answer a JSON document the size of Foliot's answer (201 / 202); `POST /` does the
same for the SWF calls of `swf_throughput.py` (by `X-Amz-Target`). Benchmarks print every
Foliot throughput figure next to this one, measured in the same run.
"""

from __future__ import annotations

import argparse
import hmac
import json
import secrets
import time

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart import Response, request
from quart_trio import QuartTrio

app = QuartTrio(__name__)
TOKEN = b""


def _json(body: object, status: int) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), status=status, content_type="application/json")


def _refused() -> Response | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), TOKEN):
        return _json({"error": {"code": "unauthorized", "message": "invalid key"}}, 401)
    return None


@app.get("/readyz")
async def readyz() -> Response:
    return _json({"status": "ready"}, 200)


@app.post("/apps/<app_name>/runs")
async def start(app_name: str) -> Response:
    refused = _refused()
    if refused is not None:
        return refused
    body = json.loads(await request.get_data(as_text=False))
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    run = {
        "runId": "run_" + secrets.token_hex(12),
        "app": app_name,
        "workflow": body.get("workflow"),
        "version": 1,
        "status": "waiting",
        "businessKey": body.get("businessKey"),
        "input": body.get("input"),
        "state": {},
        "generation": 1,
        "currentStep": "wait",
        "attempt": None,
        "waitSignal": "go",
        "wakeAt": now,
        "deadline": None,
        "createdAt": now,
        "updatedAt": now,
        "closedAt": None,
        "error": None,
    }
    return _json(run, 201)


@app.post("/apps/<app_name>/signals")
async def signal(app_name: str) -> Response:
    refused = _refused()
    if refused is not None:
        return refused
    body = json.loads(await request.get_data(as_text=False))
    return _json({"runId": body.get("runId"), "status": "delivered"}, 202)


def _swf_event(event_id: int, event_type: str, attributes: dict[str, object]) -> dict[str, object]:
    key = event_type[0].lower() + event_type[1:] + "EventAttributes"
    return {"eventId": event_id, "eventTimestamp": time.time(), "eventType": event_type, key: attributes}


@app.post("/")
async def swf() -> Response:
    """The SWF JSON 1.0 shape of `swf_throughput.py`'s seven requests, without any state: the
    body read and parsed, an answer of the real answer's size (a decision task with the events
    of its first decision) serialized. No SigV4 check: the floor is the framework's cost."""
    action = request.headers.get("X-Amz-Target", "").rpartition(".")[2]
    body = json.loads(await request.get_data(as_text=False))
    out: dict[str, object] = {}
    execution = {"workflowId": "order-1", "runId": secrets.token_hex(16)}
    token = secrets.token_urlsafe(96)
    if action == "StartWorkflowExecution":
        out = {"runId": execution["runId"]}
    elif action == "PollForDecisionTask":
        wf_type = {"name": "Order", "version": "1"}
        out = {
            "taskToken": token,
            "startedEventId": 3,
            "workflowExecution": execution,
            "workflowType": wf_type,
            "previousStartedEventId": 0,
            "events": [
                _swf_event(1, "WorkflowExecutionStarted", {
                    "input": "1", "executionStartToCloseTimeout": "3600", "taskStartToCloseTimeout": "60",
                    "childPolicy": "TERMINATE", "taskList": body.get("taskList"), "workflowType": wf_type,
                }),
                _swf_event(2, "DecisionTaskScheduled", {"taskList": body.get("taskList"),
                                                        "startToCloseTimeout": "60"}),
                _swf_event(3, "DecisionTaskStarted", {"identity": body.get("identity"),
                                                      "scheduledEventId": 2}),
            ],
        }  # fmt: skip
    elif action == "PollForActivityTask":
        out = {
            "taskToken": token, "activityId": "charge-order-1", "startedEventId": 6,
            "workflowExecution": execution, "activityType": {"name": "Charge", "version": "1"}, "input": "5",
        }  # fmt: skip
    return Response(
        json.dumps(out, separators=(",", ":")), status=200, content_type="application/x-amz-json-1.0"
    )


def main() -> None:
    global TOKEN
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    TOKEN = args.token.encode()
    config = Config()
    config.bind = [f"127.0.0.1:{args.port}"]
    config.accesslog = None
    config.keep_alive_timeout = 75
    trio.run(serve, app, config)


if __name__ == "__main__":
    main()
