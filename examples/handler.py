"""A task handler for the README's order workflow: verifies every push, deduplicates redeliveries.

SIGNING_SECRET=<secret> .venv/bin/python examples/handler.py     # listens on 127.0.0.1:9000
"""

import json
import os
from http.server import BaseHTTPRequestHandler, HTTPServer

from foliot.signing import SignatureError, verify_signature

SECRETS = [os.environ["SIGNING_SECRET"]]  # during a rotation, list the old and the new secret
PORT = int(os.environ.get("HANDLER_PORT", "9000"))
outputs: dict[str, object] = {}  # idempotencyKey -> output; use your database in production


def work(task: dict) -> object:
    """The step's real work; what it returns becomes state[step]."""
    if task["step"] == "reserve":
        return {"reservationId": f"R-{task['input']['orderId']}"}
    return None


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        try:
            verify_signature(raw, self.headers.get("foliot-signature"), SECRETS)
        except SignatureError:
            return self.answer(401, {"error": {"class": "bad_signature", "retryable": False}})
        task = json.loads(raw)  # route on the body, not the path
        key = task["idempotencyKey"]
        if key not in outputs:  # a redelivery of an attempt already done gets the same output
            outputs[key] = work(task)
        return self.answer(200, outputs[key])

    def answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    HTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
