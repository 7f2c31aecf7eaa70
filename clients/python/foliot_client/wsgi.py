"""WSGI middleware (Flask, Django, any WSGI app) that serves Foliot's pushes.

    flask_app.wsgi_app = FoliotWSGIMiddleware(flask_app.wsgi_app, router)

or, inside a Flask view of your own: `to_flask(router.handle_sync(request.get_data(), request.headers))`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .handlers import MAX_BODY, HttpAnswer, TaskRouter, error_answer

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

_REASONS = {200: "OK", 202: "Accepted", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            413: "Payload Too Large", 422: "Unprocessable Entity", 500: "Internal Server Error"}  # fmt: skip


class FoliotWSGIMiddleware:
    def __init__(
        self,
        app: WSGIApp | None,
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

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "POST" or not (
            path.startswith(self.path_prefix) or path in self.paths
        ):
            if self.app is not None:
                return self.app(environ, start_response)
            return _respond(start_response, error_answer(404, "not_found", "no Foliot handler here", False))
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= self.max_body:
            return _respond(
                start_response, error_answer(413, "payload_too_large", "push body too large", False)
            )
        raw = environ["wsgi.input"].read(length) if length else b""
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
        return _respond(start_response, self.router.handle_sync(raw, headers))


def _respond(start_response: StartResponse, answer: HttpAnswer) -> list[bytes]:
    status = f"{answer.status} {_REASONS.get(answer.status, 'Status')}"
    start_response(status, [*answer.headers, ("content-length", str(len(answer.body)))])
    return [answer.body]


def to_flask(answer: HttpAnswer) -> Any:
    """A `flask.Response` for an answer (for a view that calls `router.handle_sync` itself)."""
    from flask import Response

    return Response(answer.body, status=answer.status, headers=list(answer.headers))
