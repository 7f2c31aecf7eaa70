"""ASGI middleware (Starlette, FastAPI, any ASGI app) that serves Foliot's pushes.

    app = FastAPI()
    app.add_middleware(FoliotMiddleware, router=router)

POSTs under `path_prefix` (default `/foliot/`, where Foliot pushes) and to any of `paths` (steps
with a `handler` path) are answered by the router; everything else goes to the wrapped app.
With `app=None` the middleware is a complete ASGI app that answers 404 elsewhere.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from .handlers import MAX_BODY, HttpAnswer, TaskRouter, error_answer

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class FoliotMiddleware:
    def __init__(
        self,
        app: ASGIApp | None,
        router: TaskRouter,
        *,
        path_prefix: str = "/foliot/",
        paths: Iterable[str] = (),
        max_body: int = MAX_BODY,
    ) -> None:
        self.app = app
        self.router = router
        self.path_prefix = path_prefix
        self.paths = frozenset(paths)
        self.max_body = max_body

    def matches(self, path: str) -> bool:
        return path.startswith(self.path_prefix) or path in self.paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or not self.matches(scope["path"]):
            if self.app is not None:
                await self.app(scope, receive, send)
            elif scope["type"] == "http":
                await _send(send, error_answer(404, "not_found", "no Foliot handler here", False))
            return
        raw = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            raw += message.get("body", b"")
            if len(raw) > self.max_body:
                await _send(send, error_answer(413, "payload_too_large", "push body too large", False))
                return
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        await _send(send, await self.router.handle_async(bytes(raw), headers))


async def _send(send: Send, answer: HttpAnswer) -> None:
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
    headers.append((b"content-length", str(len(answer.body)).encode()))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})
