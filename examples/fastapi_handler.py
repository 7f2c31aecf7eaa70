"""Push handlers for the README's order workflow in FastAPI: signatures checked, redeliveries
answered from the idempotency store. SIGNING_SECRET=<secret> hypercorn examples.fastapi_handler:app
--bind 127.0.0.1:9000 (or uvicorn). Several secrets, comma-separated, during a rotation."""

import os
from typing import Any

from fastapi import FastAPI
from foliot_client import Task, TaskRouter
from foliot_client.asgi import FoliotMiddleware

router = TaskRouter(secrets=os.environ["SIGNING_SECRET"].split(","))


@router.task("order-fulfilment", "reserve")
async def reserve(task: Task) -> dict[str, Any]:
    return {"reservationId": f"R-{task.input['orderId']}"}


@router.task("order-fulfilment", "ship")
def ship(task: Task) -> dict[str, Any]:  # sync handlers run in a thread
    return {"shipped": task.state["reserve"]["reservationId"]}


app = FastAPI()
app.add_middleware(FoliotMiddleware, router=router)  # answers POST /foliot/...; the rest is yours
