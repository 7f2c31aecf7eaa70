"""A pull worker for the `warehouse` queue (steps with `"queue": "warehouse"`).

FOLIOT_URL=http://127.0.0.1:8080 FOLIOT_TOKEN=<app key> FOLIOT_APP=orders python examples/worker.py
SIGTERM or Ctrl-C stops it gracefully: it stops polling and finishes the tasks it holds.
"""

import os
from typing import Any

from foliot_client import AsyncClient, Task, TaskFailure, Worker

client = AsyncClient(os.environ.get("FOLIOT_URL", "http://127.0.0.1:8080"), os.environ["FOLIOT_TOKEN"],
                     app=os.environ.get("FOLIOT_APP", "orders"))  # fmt: skip


def pick(task: Task) -> dict[str, Any]:
    """Runs in a thread (an `async def` would run on the loop); the return value is state[step]."""
    items = task.input.get("items", [])
    if not items:  # a business error: the run goes to the step's onFailure, no retry
        raise TaskFailure("nothing_to_pick", f"order {task.run_id} has no items", retryable=False)
    return {"picked": len(items), "attempt": task.attempt}


if __name__ == "__main__":
    Worker(client, os.environ.get("FOLIOT_QUEUE", "warehouse"), pick, concurrency=8).run_sync()
