"""The bare quart-trio floor: the least a quart-trio app on hypercorn's trio worker can do.

    python bench/floor_app.py --port 8999 --token T

`POST /apps/<app>/runs` and `POST /apps/<app>/signals` compare a bearer token, parse the JSON
body and answer a JSON document the size of Foliot's answer (201 / 202). Benchmarks print
every Foliot throughput figure next to this one, measured in the same run.
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
