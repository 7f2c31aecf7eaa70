"""A pull worker for the `warehouse` queue (steps with `"queue": "warehouse"`).

FOLIOT_URL=http://127.0.0.1:8080 FOLIOT_TOKEN=<app key> FOLIOT_APP=orders python examples/worker.py
Tasks are routed by step: `pick`, and `restock`, a compensation step on the same queue.
It logs to stderr when it starts, on each task it claims, and when it stops. SIGTERM or
Ctrl-C stops it gracefully: it stops polling and finishes the tasks it holds.
"""

import os
from typing import Any

from foliot_client import AsyncClient, Task, TaskFailure, Worker

client = AsyncClient(os.environ.get("FOLIOT_URL", "http://127.0.0.1:8080"), os.environ["FOLIOT_TOKEN"],
                     app=os.environ.get("FOLIOT_APP", "orders"))  # fmt: skip


def pick(task: Task) -> dict[str, Any]:
    """Runs in a thread (an `async def` would run on the loop); the return value is state[step]."""
    order = task.input if isinstance(task.input, dict) else {}  # a run may be started without input
    items = order.get("items") or []
    if not items:  # a business error: the run goes to the step's onFailure, no retry
        raise TaskFailure("nothing_to_pick", f"order {task.run_id} has no items", retryable=False)
    return {"picked": len(items), "attempt": task.attempt}


def restock(task: Task) -> dict[str, Any]:
    """Undo `pick` (a step's `onFailure` can lead here): put back what it took, if anything."""
    picked = task.state.get("pick") or {}
    return {"restocked": picked.get("picked", 0)}


if __name__ == "__main__":
    handlers = {"pick": pick, "restock": restock}  # step -> function; ("workflow", "step") keys too
    Worker(client, os.environ.get("FOLIOT_QUEUE", "warehouse"), handlers, concurrency=8).run_sync()
