"""A worker process for the kill -9 tests: logs each execution (`key input`) before answering.

python tests/client/worker_proc.py URL KEY APP LOGFILE
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from foliot_client import AsyncClient, RetryPolicy, Task, Worker


def main() -> None:
    url, key, app, log_path = sys.argv[1:5]
    log = open(log_path, "a", buffering=1)

    def work(task: Task) -> dict[str, Any]:
        log.write(f"{task.idempotency_key} {task.input}\n")
        log.flush()
        os.fsync(log.fileno())
        time.sleep(0.02)  # some work, so that kills land while tasks are held
        return {"n": task.input}

    client = AsyncClient(
        url, key, app=app, retry=RetryPolicy(max_attempts=2, initial_interval=0.05), timeout=5
    )
    Worker(client, "q", work, concurrency=4, wait_seconds=2).run_sync()


if __name__ == "__main__":
    main()
