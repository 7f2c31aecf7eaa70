"""Push handlers for the README's order workflow, in a FastAPI app.

SIGNING_SECRET=<secret> hypercorn examples.fastapi_handler:app --bind 127.0.0.1:9000
(uvicorn works too). Every push is signature-checked, redeliveries are answered from the store.
"""

import os
from typing import Any

from fastapi import FastAPI
from foliot_client import Task, TaskRouter
from foliot_client.asgi import FoliotMiddleware

router = TaskRouter(secrets=os.environ["SIGNING_SECRET"].split(","))  # old,new during a rotation


@router.task("order-fulfilment", "reserve")
async def reserve(task: Task) -> dict[str, Any]:
    return {"reservationId": f"R-{task.input['orderId']}"}


@router.task("order-fulfilment", "ship")
def ship(task: Task) -> dict[str, Any]:  # sync handlers run in a thread
    return {"shipped": task.state["reserve"]["reservationId"]}


@router.task("order-fulfilment", "release")
async def release(task: Task) -> None:
    print(f"releasing {task.run_id}: {task.error}")


app = FastAPI()
app.add_middleware(FoliotMiddleware, router=router)  # answers POST /foliot/...; the rest is yours
